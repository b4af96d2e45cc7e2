"""Log profiles: named sets of patterns that turn a training job's own log lines into
`trnwatch.job/1` events, for jobs that do not use the in-job emitter.

A profile is data (`LogProfile`): detection patterns, line-timestamp layouts, and rules. A rule is
a regular expression whose named groups are event fields (`step`, `loss`, `tag`, ...); it either
emits events (`emit`: the event kind plus constant fields) or only remembers its groups for the
next emitting rule of the same profile (a multi-line record, such as torchrun's failure summary).
Built-in profiles (collectors/log_profiles_builtin.py) and user profiles (a TOML file, see
docs/job-telemetry.md) are the same model, read by the same `LogTranslator`.

What the translator does for every profile, so that profiles stay patterns only:
- splits on carriage returns (tqdm / PyTorch Lightning progress bars rewrite one terminal line
  with `\r`; every segment is a line), removes ANSI colour codes, and reads a launcher's per-rank
  prefix (torchrun `[rank3]:`, Open MPI `[1,3]<stdout>:`, Slurm `3: `) as the rank, and the
  launchers' own lines (collectors/launcher_log.py); the kernel's NEURON_HW_ERR lines with the
  kernel-log parser (collectors/kernel_log.py);
- reads the line's own timestamp with the profiles' layouts (else the receive time is used);
- derives a step's time and tokens when the line does not say them (see `_complete_step`);
- drops a progress bar's repeated redraw of the step it already reported, and holds a redraw
  whose metrics are still the previous step's until the redraw with the step's own (see
  `_step_events`);
- counts lines that no rule matched (unparsed: normal for most log lines, never an error).
"""

import math
import re
import signal as signal_module
import tomllib
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from trnwatch.collectors.checkpoints import step_from_tag
from trnwatch.collectors.job_events import SCHEMA_VERSION, JobEvent
from trnwatch.collectors.kernel_log import HW_ERR_TOKEN, HardwareError, parse_kernel_line
from trnwatch.collectors.launcher_log import LauncherLog, split_prefix

MAX_MESSAGE_CHARS = 500
TICK_SPAN_S = 3  # a smoothed bar's step time: over at least this many of its elapsed field's seconds
DETECT_LINES = 500  # lines read while no profile is detected before the always-on layers take them alone

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# tqdm draws a bar nested under another (an evaluation bar under the Trainer's, a checkpoint's
# `Writing model shards`) on the line below and moves the cursor back up after each redraw.
_NESTED_BAR_END = "\x1b[A"
# A rank's line glued to the end of a progress bar's redraw (the bar writes no newline; under
# torchrun a rank's traceback starts right after it): a segment of its own from its prefix.
_GLUED_PREFIX = re.compile(r"(?<=\])(?=\[[A-Za-z_]+\d+\]: ?)")

# Named groups a rule may capture, and how each becomes a field value.
_FLOAT_GROUPS = {"loss", "step_time_s", "s_per_it", "it_per_s", "seq_per_s", "tokens_per_s", "tokens_per_s_per_device"}
_INT_GROUPS = {"step", "rank", "exit_code", "signal_number", "chip", "core", "epoch"}
_TEXT_GROUPS = {"tag", "message", "signal", "metrics"}  # metrics: see LogTranslator._step_events
_TIME_GROUPS = {"failed_ts"}
_DURATION_GROUPS = {"elapsed"}  # a progress bar's elapsed time, [H:]MM:SS: see LogTranslator._bar_step
GROUPS = _FLOAT_GROUPS | _INT_GROUPS | _TEXT_GROUPS | _TIME_GROUPS | _DURATION_GROUPS
# Constant fields an `emit` entry or a `set` table may carry besides `event`.
CONSTANTS = {"action", "state", "phase", "cache", "blocking", "source", "message", "first", "severity", "status"}
EventKind = Literal["step", "checkpoint", "phase", "error", "run_end"]
Name = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,40}$")]
Constant = str | int | float | bool


class LogProfileError(ValueError):
    """A log profile (built-in or from a file) that cannot be used; the message says where and why."""


class _Model(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class Emit(_Model):
    """One event a rule emits: its kind and constant fields (`action = "save"`, `blocking = false`)."""

    model_config = ConfigDict(strict=True, extra="allow", frozen=True)
    event: EventKind


class Rule(_Model):
    """A pattern and what a match means. First matching rule of a profile wins."""

    pattern: str
    emit: list[Emit] = []  # empty: remember the groups (and `set`) for the next emitting rule
    set: dict[str, Constant] = {}
    hold: bool = False  # keep the emitted events until a `release` rule (records printed as a block)
    # Its groups complete the step of the bar's last redraw, held for it (records_after_bar); emits nothing.
    amend: bool = False
    release: bool = False  # emit held events, those whose record has `first = true` first


class Timestamp(_Model):
    """A line layout that starts with a timestamp: `pattern` has a group `ts`, read with `format`."""

    pattern: str
    format: str


class LogProfile(_Model):
    """A named set of patterns for one framework's log format."""

    name: Name
    description: str = ""
    source: str = ""  # the public code the format was read from
    detect: list[str] = []  # a line matching one of these selects the profile
    include: list[Name] = []  # other profiles whose rules and timestamps apply too (after these)
    always: bool = False  # applies to every log, alongside the detected or chosen profile
    # Detected only while no other profile is: a later line that detects another replaces it (generic).
    fallback: bool = False
    timestamps: list[Timestamp] = []
    time_formats: list[str] = []  # strptime formats of timestamp groups (`failed_ts`)
    split: str = ""  # a line holding several records is cut where this matches (a bar with a message after it)
    no_steps: str = ""  # this log gives no step lines: why, and how to get a readable one (said in the receipt)
    first_step_ends: list[Literal["init", "compile", "warmup"]] = []  # phases a rank's first step line ends
    # A record printed after a bar's redraw belongs to that redraw's step (the Trainer's log dict):
    # each new step's redraw is held until the next line of its rank, or the end of the read.
    records_after_bar: bool = False
    # The bar's rate is tqdm's smoothed mean (smoothing 0.3, the Trainer's): never read; a step's
    # time comes from the elapsed field alone (`_tick_step_time`).
    bar_rate_smoothed: bool = False
    rules: list[Rule] = []


_PROFILE_FILE = TypeAdapter(dict[str, list[LogProfile]])


class _CompiledRule:
    __slots__ = ("regex", "rule", "profile")

    def __init__(self, rule: Rule, profile: "LogProfile"):
        self.regex = re.compile(rule.pattern)
        self.rule = rule
        self.profile = profile


def _compile(pattern: str, where: str) -> re.Pattern:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise LogProfileError(f"{where}: bad regular expression {pattern!r}: {exc}") from None


def check_profile(profile: LogProfile, known: dict[str, LogProfile]) -> None:
    """Raise LogProfileError if a pattern does not compile, captures an unknown group, emits an
    event that cannot validate, or includes an unknown profile."""
    where = f"profile {profile.name!r}"
    for pattern in profile.detect:
        _compile(pattern, f"{where} detect")
    if profile.split:
        _compile(profile.split, f"{where} split")
    for stamp in profile.timestamps:
        if "ts" not in _compile(stamp.pattern, f"{where} timestamp").groupindex:
            raise LogProfileError(f"{where} timestamp {stamp.pattern!r}: needs a group named ts")
    for name in profile.include:
        if name not in known:
            raise LogProfileError(f"{where}: includes unknown profile {name!r} (known: {', '.join(sorted(known))})")
    for index, rule in enumerate(profile.rules, 1):
        rule_where = f"{where} rule {index}"
        groups = set(_compile(rule.pattern, rule_where).groupindex)
        unknown = groups - GROUPS
        if unknown:
            raise LogProfileError(f"{rule_where}: unknown group(s) {sorted(unknown)}; known: {sorted(GROUPS)}")
        for key in rule.set:
            if key not in CONSTANTS:
                raise LogProfileError(f"{rule_where}: set {key!r} is not one of {sorted(CONSTANTS)}")
        if _TIME_GROUPS & groups and not profile.time_formats:
            raise LogProfileError(f"{rule_where}: a timestamp group needs the profile's time_formats")
        for emit in rule.emit:
            constants = dict(emit.model_extra or {})
            unknown = set(constants) - CONSTANTS
            if unknown:
                raise LogProfileError(f"{rule_where}: emit field(s) {sorted(unknown)} not one of {sorted(CONSTANTS)}")
            sample = {group: _SAMPLE[group] for group in groups if group in _SAMPLE}
            try:
                _build(emit.event, {**sample, **rule.set, **constants}, 0, 0.0, "check")
            except (ValidationError, ValueError) as exc:
                detail = exc.errors(include_url=False)[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
                raise LogProfileError(
                    f"{rule_where}: emits a {emit.event} event that cannot be valid: {detail}"
                ) from None


_SAMPLE = {
    "step": 1,
    "loss": 1.0,
    "step_time_s": 1.0,
    "tag": "step_1",
    "message": "m",
    "exit_code": 1,
    "signal": "SIGKILL",
    "rank": 0,
    "failed_ts": 0.0,
    "chip": 0,
    "core": 0,
    "seq_per_s": 1.0,
    "tokens_per_s": 1.0,
    "tokens_per_s_per_device": 1.0,
    "status": "success",
}


def load_profile_file(path: Path, known: dict[str, LogProfile]) -> list[LogProfile]:
    """User profiles from a TOML file (`[[profile]]` tables); LogProfileError says what is wrong."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise LogProfileError(f"cannot read log profile file {path}: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise LogProfileError(f"{path}: not valid TOML: {exc}") from None
    if set(data) != {"profile"}:
        raise LogProfileError(f"{path}: expected only [[profile]] tables, found {sorted(data) or 'nothing'}")
    try:
        profiles = _PROFILE_FILE.validate_python(data)["profile"]
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"])
        raise LogProfileError(f"{path}: {where}: {first['msg']}") from None
    names = set()
    for profile in profiles:
        if profile.name in names:
            raise LogProfileError(f"{path}: profile {profile.name!r} is defined twice")
        names.add(profile.name)
    combined = {**known, **{p.name: p for p in profiles}}
    for profile in profiles:
        try:
            check_profile(profile, combined)
        except LogProfileError as exc:
            raise LogProfileError(f"{path}: {exc}") from None
    return profiles


def _number(text: str) -> float:
    return float(text.replace(",", ""))  # TorchTitan prints tps with thousands separators


def _convert(group: str, text: str, time_formats: list[str]) -> Constant:
    if group in _FLOAT_GROUPS:
        value = _number(text)
        if group != "loss" and not (math.isfinite(value) and value >= 0):
            raise ValueError(f"{group} {text!r} is not a finite, non-negative number")
        return value
    if group in _INT_GROUPS:
        value = _number(text)  # tqdm prints float metrics: global_step=9.000, 1e+3
        if not value.is_integer():
            raise ValueError(f"{group} {text!r} is not a whole number")
        return int(value)
    if group in _TIME_GROUPS:
        return _parse_time(text, time_formats)
    if group in _DURATION_GROUPS:
        seconds = 0
        for part in text.split(":"):
            seconds = seconds * 60 + int(part)
        return float(seconds)
    return text[:MAX_MESSAGE_CHARS]


def _parse_time(text: str, formats: list[str]) -> float:
    for fmt in formats:
        try:
            return datetime.strptime(text, fmt).timestamp()  # no zone in the text: monitor's local time
        except ValueError:
            continue
    raise ValueError(f"timestamp {text!r} matches none of {formats}")


_EVENT = TypeAdapter(JobEvent)
_STEP_FIELDS = {"step", "step_time_s", "tokens", "loss", "tokens_per_s_per_device"}
_ERROR_FIELDS = {"message", "source", "exit_code", "signal", "failed_ts", "severity", "chip", "core"}
_CHECKPOINT_FIELDS = {"action", "state", "tag", "blocking"}
_PHASE_FIELDS = {"phase", "state", "cache"}
_FIELDS = {
    "step": _STEP_FIELDS,
    "error": _ERROR_FIELDS,
    "checkpoint": _CHECKPOINT_FIELDS | {"step"},
    "phase": _PHASE_FIELDS,
    "run_end": {"status"},
}


def _build(kind: str, values: dict, rank: int, ts: float, run: str) -> JobEvent:
    fields = {key: value for key, value in values.items() if key in _FIELDS[kind] and value is not None}
    if kind == "step":
        fields = {"step_time_s": None, "compute_s": None, "tokens": None, "loss": None, **fields}
    elif kind == "checkpoint":
        fields.setdefault("step", None)
    elif kind == "error":
        fields.setdefault("message", "")
    return _EVENT.validate_python({"v": SCHEMA_VERSION, "ts": ts, "run": run, "rank": rank, "event": kind, **fields})


class _Bar:
    """One progress bar (Lightning draws one per epoch, its counter and clock starting at 0)."""

    __slots__ = ("serial", "epoch", "offset", "seen", "n", "elapsed_s", "ticks")

    def __init__(self, serial: int, epoch: int, offset: int, ticks: bool = False):
        self.serial, self.epoch, self.offset = serial, epoch, offset  # offset: steps of the earlier bars
        self.seen = 0  # the highest counter drawn
        self.n = 0  # the counter's last value reported
        self.elapsed_s = 0.0  # the bar's elapsed time at that value
        # (counter, elapsed) where the elapsed field moved on, from the bar's start; None: the rate is read
        self.ticks: list[tuple[int, float]] | None = [(0, 0.0)] if ticks else None


class _RankState:
    __slots__ = (
        "last_step",
        "last_step_ts",
        "last_ts_from_line",
        "open_tags",
        "last_metrics",
        "held_step",
        "record",
        "bar",
        "open_phases",
    )

    def __init__(self):
        self.last_step: int | None = None
        self.last_step_ts: float | None = None
        self.last_ts_from_line = False
        self.open_tags: dict[str, str] = {}  # checkpoint action -> tag of its open begin
        self.last_metrics: str | None = None  # the `metrics` text of the last step reported
        self.held_step: tuple[dict, float, bool] | None = None  # (fields, ts, ts_from_line) of a stale redraw
        self.record: dict | None = None  # a record's values for the redraw after it (records_after_bar)
        self.bar: _Bar | None = None
        self.open_phases: set[str] = set()  # phases this log opened and has not ended


class LogTranslator:
    """Turns one log's lines into job events through a profile (chosen, or detected from the first
    lines) plus the always-on profiles; keeps per-rank state between lines.

    `feed(text, received_s)` returns the events of one raw line. Counts: `lines` (non-empty line
    segments), `matched` (segments a rule matched), `unparsed`, `events`.
    """

    def __init__(
        self,
        run: str,
        profiles: dict[str, LogProfile],
        chosen: str | None = None,
        default_rank: int = 0,
        global_batch: int | None = None,
        seq_len: int | None = None,
        per_rank_file: bool = False,
    ):
        self.run = run
        self.profiles = profiles
        self.default_rank = default_rank
        self.global_batch = global_batch
        self.seq_len = seq_len
        self.lines = self.matched = self.events = 0
        self.profile: LogProfile | None = None
        self._candidates = [p for p in profiles.values() if not p.always and p.detect]
        self._detectors = [(p, [re.compile(d) for d in p.detect]) for p in self._candidates]
        self._waiting: list[tuple[str, float, bool]] | None = []  # lines held until detection (None: done waiting)
        self._always = [p for p in profiles.values() if p.always]
        self._rules: list[_CompiledRule] = []
        self._timestamps: list[tuple[re.Pattern, str]] = []
        self._ranks: dict[int, _RankState] = {}
        self._pending: dict[str, dict] = {}  # profile name -> fields remembered from earlier lines
        self._held: list[tuple[bool, JobEvent]] = []
        self._launcher = LauncherLog(run, per_rank_file)
        self._split: re.Pattern | None = None
        self._bars = 0  # progress bars seen (every rank)
        self._unsettled: list[tuple[JobEvent, int, float]] = []  # bar steps since `settle`: (event, bar, elapsed)
        self._anchors: dict[int, float] = {}  # bar serial -> the time its clock started
        self._line_anchors: dict[int, float] = {}  # bar serial -> latest start its rank's timestamped lines allow
        self._nested = False  # the segment being read is a nested bar's redraw: no step of its own
        self._chosen = chosen is not None
        self._activate(profiles[chosen] if chosen else None)
        if chosen or not self._candidates:
            self._waiting = None

    @property
    def profile_name(self) -> str | None:
        return self.profile.name if self.profile else None

    def _activate(self, profile: LogProfile | None) -> None:
        self.profile = profile
        layers: list[LogProfile] = []
        self._expand(profile, layers)
        for always in self._always:
            self._expand(always, layers)
        self._rules = [_CompiledRule(rule, layer) for layer in layers for rule in layer.rules]
        splits = [layer.split for layer in layers if layer.split]
        self._split = re.compile("|".join(splits)) if splits else None
        self._timestamps = [(re.compile(t.pattern), t.format) for layer in layers for t in layer.timestamps]

    def _expand(self, profile: LogProfile | None, out: list[LogProfile]) -> None:
        if profile is None or profile in out:
            return
        out.append(profile)
        for name in profile.include:
            self._expand(self.profiles[name], out)

    def feed(self, text: str, received_s: float) -> list[JobEvent]:
        """Events found in one raw line (most lines give none). Raises ValueError when a line
        matched a rule but its values cannot make a valid event (the caller counts it).

        Until a profile is detected, lines the always-on profiles recognise are translated at
        once and the others are held (up to DETECT_LINES), then read through the detected profile.
        """
        events: list[JobEvent] = []
        for raw in (piece for cut in text.split("\r") for piece in _GLUED_PREFIX.split(cut)):
            self._nested = raw.rstrip().endswith(_NESTED_BAR_END)
            segment = _ANSI.sub("", raw).rstrip()
            if not segment.strip():
                continue
            self.lines += 1
            if self._waiting is None:
                replaceable = self.profile is None or (self.profile.fallback and not self._chosen)
                if replaceable and self._candidates and (detected := self._detect(segment)):
                    if detected is not self.profile:
                        self._activate(detected)
                events += self._translate(segment, received_s) or []
                continue
            detected = self._detect(segment)
            if detected is None:
                translated = self._translate(segment, received_s, hold_unmatched=len(self._waiting) < DETECT_LINES)
                if translated is not None:
                    events += translated
                continue
            held, self._waiting, nested = self._waiting, None, self._nested
            self._activate(detected)
            for old, old_received_s, self._nested in held:
                events += self._translate(old, old_received_s) or []
            self._nested = nested
            events += self._translate(segment, received_s) or []
        self.events += len(events)
        return events

    def _detect(self, segment: str) -> LogProfile | None:
        """The profile this segment detects: a framework's before a fallback's (generic)."""
        segment = split_prefix(segment)[2]
        found = None
        for profile, patterns in self._detectors:
            if (found is None or not profile.fallback) and any(p.search(segment) for p in patterns):
                if not profile.fallback:
                    return profile
                found = profile
        return found

    def _translate(self, segment: str, received_s: float, hold_unmatched: bool = False) -> list[JobEvent] | None:
        """The events of one segment; with `hold_unmatched`, a segment no rule matches is kept
        for the profile still to be detected and None is returned."""
        launcher, prefix_rank, text = split_prefix(segment)
        rank = self.default_rank if prefix_rank is None else prefix_rank
        launched = self._launcher.feed(text, rank, launcher, received_s)
        if launched is not None:
            self.matched += 1
            return launched
        if HW_ERR_TOKEN in text and isinstance(record := parse_kernel_line(text), HardwareError):
            self.matched += 1
            return [self._hardware_error(record, rank, self._line_ts(text, received_s)[0])]
        line_ts = self._line_ts(text, received_s)
        events: list[JobEvent] = []
        matched = False
        for part in self._split.split(text) if self._split else (text,):
            # A record after another on one line (a library line after a bar's redraw) has its own time.
            ts, ts_from_line = self._line_ts(part, received_s)
            if not ts_from_line:
                ts, ts_from_line = line_ts
            if ts_from_line:
                self._bound_bar(rank, ts)
            for compiled in self._rules:
                match = compiled.regex.search(part)
                if match:
                    self.matched += not matched  # a segment is counted once, before a value can raise
                    matched = True
                    events += self._apply(compiled, match, part, rank, ts, ts_from_line)
                    break
        if matched:
            return events
        if hold_unmatched and self._waiting is not None:
            self._waiting.append((segment, received_s, self._nested))
            return None
        return []

    def _hardware_error(self, record: HardwareError, rank: int, ts: float) -> JobEvent:
        """The kernel's NEURON_HW_ERR line in a job log (the kernel-log source's parser read it):
        a fatal error on the chip (nd-id) and core (nc-id) it names, the line as its message."""
        fields = {"message": record.message[:MAX_MESSAGE_CHARS], "source": "hardware", "chip": record.device}
        fields["core"] = record.core
        return _build("error", fields, rank, ts, self.run)

    @property
    def error_files(self) -> dict[str, int]:
        """torchrun's `@record` error files this log pointed to: how many were read, and why not."""
        return dict(sorted(self._launcher.error_files.items()))

    @property
    def unparsed(self) -> int:
        """Line segments that matched no rule (held ones included until they do)."""
        return self.lines - self.matched

    def _line_ts(self, segment: str, received_s: float) -> tuple[float, bool]:
        for regex, fmt in self._timestamps:
            if match := regex.match(segment):
                try:
                    return datetime.strptime(match["ts"], fmt).timestamp(), True
                except ValueError:  # shaped like a timestamp but not a real date
                    continue
        return received_s, False

    def _apply(
        self, compiled: _CompiledRule, match: re.Match, segment: str, rank: int, ts: float, ts_from_line: bool
    ) -> list[JobEvent]:
        rule, profile = compiled.rule, compiled.profile
        values: dict = {}
        for group, text in match.groupdict().items():
            if text is not None:
                values[group] = _convert(group, text, profile.time_formats)
        if rule.amend:
            return self._amend(values, self._ranks.setdefault(rank, _RankState()))
        pending = self._pending.setdefault(profile.name, {})
        if not rule.emit:
            pending.update(rule.set)
            pending.update(values)
            if rule.release:
                return self._release()
            return []
        values = {**pending, **rule.set, **values}
        pending.clear()
        rank = values.pop("rank", rank)
        if "failed_ts" in values and not ts_from_line:
            ts = values["failed_ts"]
        if "signal_number" in values and "signal" not in values:
            values["signal"] = _signal_name(values["signal_number"])
        if values.get("exit_code", 0) < 0 and "signal" not in values:
            values["signal"] = _signal_name(-values["exit_code"])
        state = self._ranks.setdefault(rank, _RankState())
        out = []
        if state.held_step is not None and all(emit.event != "step" for emit in rule.emit):
            out += self._release_rank(state, rank)  # this line comes after the held redraw's step (a save, the end)
        for emit in rule.emit:
            fields = {**values, **(emit.model_extra or {})}
            if emit.event == "step":
                if not self._nested:
                    out += self._step_events(fields, state, rank, ts, ts_from_line, profile)
                continue
            if emit.event == "phase":
                (state.open_phases.add if fields["state"] == "begin" else state.open_phases.discard)(fields["phase"])
            if emit.event == "checkpoint":
                self._complete_checkpoint(fields, state)
            elif emit.event == "error":
                fields.setdefault("message", segment.strip()[:MAX_MESSAGE_CHARS])
            out.append(_build(emit.event, fields, rank, ts, self.run))
            if not ts_from_line and state.bar is not None and state.bar.n:
                # No time of its own, after a bar's redraw (Lightning's save and end messages):
                # on the bar's clock, at its last redraw.
                self._unsettled.append((out[-1], state.bar.serial, state.bar.elapsed_s))
        if rule.hold:
            self._held += [(bool(values.get("first")), event) for event in out]
            out = []
        if rule.release:
            out += self._release()
        return out

    def _release(self) -> list[JobEvent]:
        held, self._held = self._held, []
        return [event for first, event in held if first] + [event for first, event in held if not first]

    @staticmethod
    def _amend(values: dict, state: _RankState) -> list[JobEvent]:
        """A record after a bar's redraw (records_after_bar): its values go to the step of the
        redraw that follows it (tqdm.write clears the bar, prints, then redraws it at the current
        counter, the record's step), or to the held step if the read ends first."""
        state.record = values
        return []

    def _release_rank(self, state: _RankState, rank: int) -> list[JobEvent]:
        held, state.held_step = state.held_step, None
        record, state.record = state.record, None
        if held is None:
            return []
        return self._step_event({**held[0], **(record or {})}, held[1], held[2], state, rank)

    def release(self) -> list[JobEvent]:
        """The steps still held at the end of a read (a bar's last redraw; a redraw waiting for its
        metrics): the log may say nothing more, and the step was drawn."""
        events: list[JobEvent] = []
        for rank, state in self._ranks.items():
            events += self._release_rank(state, rank)
        self.events += len(events)
        return events

    def _held_bar_step(
        self, fields: dict, state: _RankState, rank: int, ts: float, ts_from_line: bool
    ) -> list[JobEvent]:
        """A bar's redraw whose records follow it (records_after_bar): a new step is held until
        the next line of its rank (a record completes it: `_amend`) or the end of the read."""
        held = state.held_step
        if held is not None and held[0]["step"] == fields["step"]:
            # The same step drawn again: after its record (report it), or not (keep it held).
            return self._release_rank(state, rank) if state.record is not None else []
        record, state.record = state.record, None
        events = self._release_rank(state, rank)
        if fields["step"] != state.last_step:
            state.held_step = ({**fields, **(record or {})}, ts, ts_from_line)
        return events

    def _step_events(
        self, fields: dict, state: _RankState, rank: int, ts: float, ts_from_line: bool, profile: LogProfile
    ) -> list[JobEvent]:
        """The step events of one step line. A progress bar redraws its line when its counter
        moves and again when its metrics are set (Lightning's `on_train_batch_end`: `_update_n`,
        then `set_postfix`), so the first redraw of step N still shows step N-1's metrics. A line
        whose `metrics` text is the one of the step reported last is held, and the step is
        reported from the redraw with its own metrics; or, if none comes before another step's
        line, as held (its metrics did not change)."""
        metrics = fields.pop("metrics", None)
        if "elapsed" in fields:
            self._bar_position(fields, state, profile.bar_rate_smoothed)
            if profile.records_after_bar:
                return self._held_bar_step(fields, state, rank, ts, ts_from_line)
        if fields["step"] == state.last_step and metrics is not None:
            state.last_metrics = metrics  # a later redraw of the step reported: its own metrics
        events = []
        held, state.held_step = state.held_step, None
        if held is not None and held[0]["step"] != fields["step"]:
            events += self._step_event(*held, state, rank)
        elif held is not None and "elapsed" in held[0]:
            # The step's time is when its counter was drawn, right after the step; its metrics
            # redraw comes later (under load, tens of ms).
            fields.update({key: held[0][key] for key in ("elapsed", "it_per_s") if key in held[0]})
        if metrics is not None and metrics == state.last_metrics and fields["step"] != state.last_step:
            state.held_step = (fields, ts, ts_from_line)
            return events
        reported = self._step_event(fields, ts, ts_from_line, state, rank)
        if reported and metrics is not None:
            state.last_metrics = metrics
        return events + reported

    def _step_event(self, fields: dict, ts: float, ts_from_line: bool, state: _RankState, rank: int) -> list[JobEvent]:
        bar = fields.pop("bar", None)
        if (bar is not None and not self._bar_step(fields, bar)) or not self._complete_step(
            fields, state, ts, ts_from_line
        ):
            return []
        event = _build("step", fields, rank, ts, self.run)
        if bar is not None:
            self._unsettled.append((event, bar.serial, bar.elapsed_s))
        return self._first_step_ends(state, rank, ts) + [event]

    def _first_step_ends(self, state: _RankState, rank: int, ts: float) -> list[JobEvent]:
        """At a rank's first step, the phases the profile says that step ends (TorchTitan's time
        to its first step is the compile), ended at the step's line."""
        ends = [p for p in (self.profile.first_step_ends if self.profile else ()) if p in state.open_phases]
        state.open_phases.difference_update(ends)
        return [_build("phase", {"phase": phase, "state": "end"}, rank, ts, self.run) for phase in ends]

    def _bar_position(self, fields: dict, state: _RankState, smoothed: bool) -> None:
        """A progress bar's redraw: its step is the bar's counter plus the steps of the rank's
        earlier bars (Lightning starts a bar per epoch, counter and clock at 0)."""
        n, epoch = fields["step"], fields.pop("epoch", 0)
        bar = state.bar
        # The Trainer's one bar a run (smoothed) drawn back, counter and clock: a restarted worker's
        # bar, from step 0. (Lightning resets its bar at each epoch's start: read by the epoch.)
        restarted = smoothed and bar is not None and n < bar.n and fields["elapsed"] < bar.elapsed_s
        if bar is None or epoch != bar.epoch or restarted:
            offset = bar.offset + bar.seen if bar is not None and epoch > bar.epoch else 0
            self._bars += 1
            bar = state.bar = _Bar(self._bars, epoch, offset, ticks=smoothed)
        bar.seen = max(bar.seen, n)
        fields["step"], fields["bar"], fields["bar_n"] = bar.offset + n, bar, n

    @staticmethod
    def _bar_step(fields: dict, bar: _Bar) -> bool:
        """The step time of a bar's redraw: the bar's elapsed time since its last counter over the
        steps between, never its rate (tqdm's mean since the bar started). The elapsed field has
        whole seconds; tqdm's rate with smoothing 0 is counter / elapsed, so counter / rate gives
        the elapsed time finer, kept within the field's second. False: no new step (the counter
        did not move, or a reset bar's 0)."""
        n, elapsed_s, rate = fields.pop("bar_n"), fields.pop("elapsed"), fields.pop("it_per_s", None)
        if n <= bar.n:
            return False
        if bar.ticks is not None:
            step_time_s = LogTranslator._tick_step_time(bar, n, elapsed_s)
            if step_time_s is not None:
                fields.setdefault("step_time_s", step_time_s)
            bar.n, bar.elapsed_s = n, max(elapsed_s, bar.elapsed_s)
            return True
        if rate:
            elapsed_s = min(max(n / rate, elapsed_s), elapsed_s + 0.999)
        # A record's own step time (NeuronTrainer's train/step_time) before the bar's whole seconds.
        fields.setdefault("step_time_s", max(elapsed_s - bar.elapsed_s, 0.0) / (n - bar.n))
        bar.n, bar.elapsed_s = n, max(elapsed_s, bar.elapsed_s)
        return True

    @staticmethod
    def _tick_step_time(bar: _Bar, n: int, elapsed_s: float) -> float | None:
        """A step's time from a bar's whole-second elapsed field alone: a step that moved the field
        by 2 s or more is that difference (within a second); otherwise the field's seconds over the
        steps between its last move and a move at least TICK_SPAN_S earlier (or the bar's start).
        None in the bar's first second."""
        assert bar.ticks is not None
        if elapsed_s > bar.ticks[-1][1]:
            bar.ticks.append((n, elapsed_s))
            del bar.ticks[:-64]  # the span needs only the last few seconds' moves
        moved_s = elapsed_s - bar.elapsed_s
        if moved_s >= 2:
            return moved_s / (n - bar.n)
        last_n, last_s = bar.ticks[-1]
        base = next(((tn, ts) for tn, ts in reversed(bar.ticks) if ts <= last_s - TICK_SPAN_S), bar.ticks[0])
        if base[0] >= last_n:
            return None
        return (last_s - base[1]) / (last_n - base[0])

    def _bound_bar(self, rank: int, ts: float) -> None:
        """A timestamped line written after a bar's redraw (NxD's library lines after NxD
        Training's bar): the bar's clock started at most its elapsed time before that line."""
        state = self._ranks.get(rank)
        bar = state.bar if state is not None else None
        if bar is not None and bar.n:
            self._line_anchors[bar.serial] = min(self._line_anchors.get(bar.serial, math.inf), ts - bar.elapsed_s)

    def settle(self, events: list[JobEvent], received_s: float) -> list[JobEvent]:
        """The events of one read (every line received at `received_s`), each progress-bar step
        stamped on its bar's clock: bar start + elapsed. A bar's start is the earliest its
        redraws allow (received minus elapsed, the smallest over the reads), or the timestamped
        lines written after its redraws allow (`_bound_bar`); in a read that holds
        several bars (a log read after the fact), the last one ends at the receive time and each
        earlier one ends where the next started. So after the fact a stall keeps its length (and
        the log's own clock when its lines have one), and watched live the steps carry the time
        they were drawn."""
        marks, self._unsettled = self._unsettled, []
        if not marks:
            return events
        ends: dict[int, dict[int, float]] = {}  # rank -> bar -> its latest elapsed time in this read
        for event, bar, elapsed_s in marks:
            bars = ends.setdefault(event.rank, {})
            bars[bar] = max(bars.get(bar, 0.0), elapsed_s)
        for bars in ends.values():
            end = received_s
            for bar in sorted(bars, reverse=True):
                bound = self._line_anchors.get(bar, math.inf)
                self._anchors[bar] = end = min(self._anchors.get(bar, math.inf), end - bars[bar], bound)
        stamped = {
            id(event): event.model_copy(update={"ts": self._anchors[bar] + elapsed_s})
            for event, bar, elapsed_s in marks
        }
        return [stamped.get(id(event), event) for event in events]

    def _complete_step(self, fields: dict, state: _RankState, ts: float, ts_from_line: bool) -> bool:
        """Fill a step's time and tokens; False for a redraw of the step just reported.

        Step time, first that applies: the line's own (`step_time_s`, or a bar's elapsed time:
        `_bar_step`); the global batch over the line's throughput in sequences/s (`seq_per_s`,
        needs --global-batch); the progress bar's `s/it` or `it/s` when it has no elapsed field;
        the time between two timestamped lines over the steps between them, unless a blocking
        save or load ended in between.
        Tokens: global batch x sequence length; else throughput x sequence length x step time.
        """
        step = fields["step"]
        if step == state.last_step:
            return False
        step_time_s = fields.get("step_time_s")
        seq_per_s = fields.get("seq_per_s")
        if step_time_s is None and seq_per_s and self.global_batch:
            step_time_s = self.global_batch / seq_per_s
        if step_time_s is None and fields.get("s_per_it") is not None:
            step_time_s = fields["s_per_it"]
        if step_time_s is None and fields.get("it_per_s"):
            step_time_s = 1.0 / fields["it_per_s"]
        if (
            step_time_s is None
            and ts_from_line
            and state.last_ts_from_line
            and state.last_step is not None
            and state.last_step_ts is not None
            and step > state.last_step
            and ts >= state.last_step_ts
        ):
            step_time_s = (ts - state.last_step_ts) / (step - state.last_step)
        tokens = None
        if self.global_batch and self.seq_len:
            tokens = self.global_batch * self.seq_len
        elif seq_per_s and self.seq_len and step_time_s:
            tokens = round(seq_per_s * self.seq_len * step_time_s)
        elif fields.get("tokens_per_s") and step_time_s:
            tokens = round(fields["tokens_per_s"] * step_time_s)  # the job's tokens/s (NeuronTrainer's)
        fields["step_time_s"] = step_time_s
        fields["tokens"] = tokens
        state.last_step, state.last_step_ts, state.last_ts_from_line = step, ts, ts_from_line
        return True

    @staticmethod
    def _complete_checkpoint(fields: dict, state: _RankState) -> None:
        action = fields["action"]
        if fields["state"] == "end" and fields.get("blocking") is not False:
            # The time to the next step line includes a save or load that blocked steps: that step
            # gets no time from timestamps (how many steps ran after the save is not known).
            state.last_ts_from_line = False
        if fields["state"] == "begin" and "tag" in fields:
            state.open_tags[action] = fields["tag"]
        elif fields["state"] == "end" and "tag" not in fields and action in state.open_tags:
            fields["tag"] = state.open_tags.pop(action)
        tag = fields.get("tag")
        fields["step"] = step_from_tag(tag) if tag else None
        if fields["step"] is None:
            fields["step"] = state.last_step


def _signal_name(number: int) -> str | None:
    try:
        return signal_module.Signals(number).name
    except ValueError:
        return None


def profile_registry(extra: Iterable[LogProfile] = ()) -> dict[str, LogProfile]:
    """Built-in profiles plus user ones (a user profile may replace a built-in of the same name)."""
    from trnwatch.collectors.log_profiles_builtin import BUILTIN_PROFILES
    from trnwatch.collectors.log_profiles_generic import GENERIC_PROFILE

    # The generic profile last: detection prefers a framework's (LogProfile.fallback).
    return {
        **{p.name: p for p in BUILTIN_PROFILES},
        GENERIC_PROFILE.name: GENERIC_PROFILE,
        **{p.name: p for p in extra},
    }
