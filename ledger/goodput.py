"""Goodput: the job's observed window split into productive step time and badput by cause.

Modelled on the goodput / badput breakdown of Google's ml-goodput-measurement (accelerator
initialisation, training preparation, program startup, data loading, checkpoint save and restore,
wasted progress from disruption, other), mapped onto what `trnwatch.job/1` events can show.

Pure logic, no clock: the clock folds the events of the timeline rank (the lowest rank seen, as
the job ledger's phase timeline does) and attributes every second of the window
[first job event, last job event] to exactly one bucket, so the buckets sum to the window:

- `productive`: inside a step (`[ts - step_time_s, ts]`) taken in steady state (a `steady` phase
  open and no start-up, compile or blocking checkpoint open). A job that marks no steady state
  (no warmup / steady phase: a passive log, whose start-up, compile and checkpoint lines are its
  only phases) has its steps outside any phase counted steady, after the leading steps the job
  ledger's rule calls warm-up (`ledger/job_steady.py`, `inferred_warmup`), which go to `startup`;
- `startup`: before the first step of a process, inside `init` / `warmup` (steps included), and
  the inferred warm-up steps above;
- `compile`: inside a `compile` phase (cache hits are instant and cost nothing here);
- `checkpoint_save`: inside a `checkpoint` phase or a save that blocks steps (`blocking` absent or
  true); a background save (`blocking: false`) costs nothing, steps go on;
- `restart`: from the last event before a process restart (`run_start` with `restart > 0`) to the
  first step after it, checkpoint load included, plus the wasted progress: the steps redone after
  the restart (last step before it minus the first step after it, plus one) at the median steady
  step time, moved out of `productive`;
- `data_loading`: gaps between one step's end and the next step's start no longer than the late
  threshold (max(3 x p99 of recent steady step times, `--late-after` 5 s)); a data loader timed
  inside the step (as the reference workload does) cannot be told apart and counts as step time;
- `stalled`: such gaps longer than the stall threshold (max(5 x their median, `--stall-after`
  30 s)): the thresholds of the job's LATE and STALLED verdicts, from the same rules object, so a
  receipt's stalled badput and its stalls[] tell of the same gaps;
- `unexplained`: the rest: gaps the job called late but not stalled, `eval` / `probe` phases,
  and what no event explains. The silence the monitor saw after the last event, up to the
  session's end, is a gap like any other (`breakdown(silence_s)`).
"""

from collections import Counter, deque
from dataclasses import dataclass, field
from statistics import median

from msgspec import Struct
from pydantic import BaseModel, ConfigDict

from trnwatch.collectors.job_events import JobEvent
from trnwatch.collectors.job_records import Checkpoint, JobRecord, Phase, RunStart, Step, record_of
from trnwatch.ledger.job_steady import WARMUP_PROBE_STEPS, inferred_warmup, nearest_rank
from trnwatch.ledger.rules import DEFAULT_RULES, Rules

CAUSES = ("startup", "compile", "data_loading", "checkpoint_save", "stalled", "restart", "unexplained")
RECENT_STEPS = 64  # steady step times the late and stall thresholds are judged from
STEP_SAMPLES = 1024  # steady step times kept for the receipt (compare's noise interval uses them)
THROUGHPUT_POINTS = 4096  # (step end, tokens/s) of the timeline rank's latest steps, for the receipt's picture
SEQ_LEN_VALUES = 64  # distinct sequence lengths counted one by one; more are counted as "other"
UNEXPLAINED_PHASES = ("eval", "probe")


# Badput seconds by cause (CAUSES): the receipt's `goodput.badput_s`.
class Badput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    startup: float
    compile: float
    data_loading: float
    checkpoint_save: float
    stalled: float
    restart: float
    unexplained: float


@dataclass(frozen=True)
class Breakdown:
    """The window [start, end] (job clock) split into productive seconds and badput by cause:
    `productive_s` and the badput sum to `window_s`."""

    from_rank: int | None  # the timeline rank
    start: float
    end: float
    window_s: float
    productive_s: float
    goodput_pct: float | None
    badput_s: Badput
    late_threshold_s: float


@dataclass
class SequenceLengths:
    """Distribution of the optional per-step `seq_len` (timeline rank, every step)."""

    steps: int = 0
    total: int = 0
    smallest: int | None = None
    largest: int | None = None
    counts: Counter = field(default_factory=Counter)
    other: int = 0  # steps whose length was not among the first SEQ_LEN_VALUES distinct values

    def add(self, seq_len: int) -> None:
        self.steps += 1
        self.total += seq_len
        self.smallest = seq_len if self.smallest is None else min(self.smallest, seq_len)
        self.largest = seq_len if self.largest is None else max(self.largest, seq_len)
        if seq_len in self.counts or len(self.counts) < SEQ_LEN_VALUES:
            self.counts[seq_len] += 1
        else:
            self.other += 1


class GoodputClock:
    """Attributes the job's window to productive time and badput causes, one event at a time."""

    def __init__(self, rules: Rules = DEFAULT_RULES):
        self.rules = rules  # the late and stall thresholds, as the job ledger's verdicts use them
        self.run: str | None = None
        self.rank: int | None = None  # the timeline rank
        self.first_ts: float | None = None
        self.last_ts: float | None = None
        self.cursor_ts: float | None = None  # the window is attributed up to here
        self.seconds: dict[str, float] = dict.fromkeys(("productive",) + CAUSES, 0.0)
        self.steady_samples_s: deque = deque(maxlen=STEP_SAMPLES)  # the latest steady step times
        self.sequence_lengths = SequenceLengths()
        self.phases_seen = False  # the job marks its steady state (warmup / steady phases, as the emitter does)
        # A job that does not (a passive log: compile and checkpoint phases at most): the first
        # steps of the process taken outside any phase, (step time, productive seconds given),
        # until the warm-up is judged from them as the job ledger judges it (`inferred_warmup`).
        self._leading: list[tuple[float, float]] = []
        self._open: set[str] = set()
        self._blocking_save = False
        self._background_save = False
        self._stepped = False  # this process has taken a step
        self._steady_seen = False  # this process has opened a steady phase
        self._restarting = False
        self._last_step_before_restart: int | None = None
        self._last_step: int | None = None
        self._recent_s: deque = deque(maxlen=RECENT_STEPS)
        self.throughput_points: deque = deque(maxlen=THROUGHPUT_POINTS)  # (step end ts, tokens/s)

    def ingest(self, event: JobRecord | JobEvent, passive: bool = False) -> None:
        """Fold one event (any rank; only the timeline rank's events move the attribution). A
        passive source's event joins whatever run (its run id is a name the monitor gave)."""
        if not isinstance(event, Struct):  # built with the contract's models: taken as its record
            event = record_of(event)
        if not passive:
            if self.run is None:
                self.run = event.run
            elif event.run != self.run:
                return
        if self.first_ts is None or event.ts < self.first_ts:  # comparisons: every job line passes here
            self.first_ts = event.ts
        if self.last_ts is None or event.ts > self.last_ts:
            self.last_ts = event.ts
        if self.rank is None or event.rank < self.rank:
            self.rank = event.rank
        if event.rank != self.rank:
            return
        if self.cursor_ts is None:
            self.cursor_ts = self.first_ts
        if isinstance(event, Step):
            if not (passive and event.step_time_s is None and self._told_before(event.step)):
                self._step(event)
        elif isinstance(event, RunStart):
            if event.restart > 0:
                self._attribute_until(event.ts, "restart")
                self._restarting = True
                self._last_step_before_restart = self._last_step
            else:
                self._attribute_until(event.ts)
            self._open.clear()
            self._blocking_save = self._background_save = self._stepped = self._steady_seen = False
            self._leading = []
        elif isinstance(event, Phase):
            if event.phase == "compile" and event.cache == "hit":
                return
            self._attribute_until(event.ts)
            self.phases_seen = self.phases_seen or event.phase in ("warmup", "steady")
            (self._open.add if event.state == "begin" else self._open.discard)(event.phase)
            self._steady_seen = self._steady_seen or event.phase == "steady"
        elif isinstance(event, Checkpoint) and event.action == "save":
            self._attribute_until(event.ts)
            blocking = event.blocking is not False
            if blocking:
                self._blocking_save = event.state == "begin"
            else:
                self._background_save = event.state == "begin"

    # ---- attribution -------------------------------------------------------------------------

    def _state_cause(self) -> str | None:
        """The cause of time outside steps in the current state; None: between steps."""
        if self._restarting:
            return "restart"
        if "compile" in self._open:
            return "compile"
        if self._blocking_save or ("checkpoint" in self._open and not self._background_save):
            return "checkpoint_save"
        if not self._stepped or "init" in self._open or "warmup" in self._open:
            return "startup"
        if any(phase in self._open for phase in UNEXPLAINED_PHASES):
            return "unexplained"
        if self.phases_seen and "steady" not in self._open:
            # Steps before the steady phase are warm-up; after it ended, nothing says what runs.
            return "unexplained" if self._steady_seen else "startup"
        return None

    def inferred_warmup_s(self) -> float:
        """For a job that marks no steady state: the time of the process's leading steps that the
        job ledger's rule calls warm-up (as for the steady-state figures), moved to start-up."""
        if self.phases_seen:
            return 0.0
        warmup = inferred_warmup([step_time_s for step_time_s, _ in self._leading])
        return sum(given_s for _, given_s in self._leading[:warmup])

    def late_threshold_s(self) -> float:
        """Longest gap between steps still counted as data loading (the job's LATE threshold)."""
        rules = self.rules
        if not self._recent_s:
            return rules.late_after_s
        return max(rules.late_factor * nearest_rank(sorted(self._recent_s), 99), rules.late_after_s)

    def stall_threshold_s(self) -> float:
        """Shortest gap between steps counted as stalled (the job's STALLED threshold)."""
        rules = self.rules
        if not self._recent_s:
            return rules.stall_after_s
        return max(rules.stall_factor * median(self._recent_s), rules.stall_after_s)

    def _gap_cause(self, seconds: float) -> str:
        """A gap the job called STALLED is stalled; one it called only LATE, unexplained."""
        if seconds > self.stall_threshold_s():
            return "stalled"
        return "data_loading" if seconds <= self.late_threshold_s() else "unexplained"

    def _attribute_until(self, ts: float, cause: str | None = None) -> None:
        assert self.cursor_ts is not None  # set by the first event, before any is attributed
        if ts <= self.cursor_ts:
            return
        cause = cause or self._state_cause()
        seconds = ts - self.cursor_ts
        self.seconds[cause or self._gap_cause(seconds)] += seconds
        self.cursor_ts = ts

    def _told_before(self, step: int) -> bool:
        """A second passive source's untimed account of a step already folded (trainer_state.json
        beside the console log): it moves nothing, as in the job ledger."""
        return not self._restarting and self._last_step is not None and step <= self._last_step

    def _step(self, event: Step) -> None:
        if event.seq_len is not None:
            self.sequence_lengths.add(event.seq_len)
        cursor_ts = self.cursor_ts
        assert cursor_ts is not None  # set by the first event
        begin_ts = event.ts - event.step_time_s if event.step_time_s is not None else cursor_ts
        if event.tokens is not None and event.step_time_s:
            self.throughput_points.append((event.ts, event.tokens / event.step_time_s))
        self._attribute_until(max(begin_ts, cursor_ts))
        if self._restarting:
            # Time to first step: the restart ends with this step; the steps it redoes are waste.
            self._attribute_until(event.ts, "restart")
            self._restarting = False
            self._stepped = True
            if self._last_step_before_restart is not None:
                self._waste(self._last_step_before_restart - event.step + 1)
            self._last_step = event.step
            return
        self._stepped = True
        cause = self._state_cause()  # None: steady ("steady" open, or a job that marks no steady state)
        steady = cause is None
        productive_s = self.seconds["productive"]
        self._attribute_until(event.ts, cause or "productive")
        self._last_step = event.step
        if (
            steady
            and not self.phases_seen
            and event.step_time_s is not None
            and len(self._leading) < WARMUP_PROBE_STEPS
        ):
            self._leading.append((event.step_time_s, self.seconds["productive"] - productive_s))
        if steady and event.step_time_s is not None:
            self.steady_samples_s.append(event.step_time_s)
            self._recent_s.append(event.step_time_s)

    def _waste(self, steps_lost: int) -> None:
        """Wasted progress: steps redone after a restart leave productive time for restart."""
        if steps_lost <= 0 or not self.steady_samples_s:
            return
        seconds = min(steps_lost * median(self.steady_samples_s), self.seconds["productive"])
        self.seconds["productive"] -= seconds
        self.seconds["restart"] += seconds

    # ---- figures -----------------------------------------------------------------------------

    def breakdown(self, silence_s: float = 0.0) -> Breakdown | None:
        """Productive seconds and badput seconds by cause over [first event, last event +
        `silence_s`] (the silence the monitor saw after the last event, up to the session's end,
        attributed as any gap is); None before any event. The parts sum to the window, to the
        rounding of each part (6 decimals); `unexplained` takes the rest, never below zero."""
        if self.first_ts is None or self.last_ts is None or self.cursor_ts is None:
            return None
        seconds = dict(self.seconds)
        warmup_s = self.inferred_warmup_s()
        seconds["productive"] -= warmup_s
        seconds["startup"] += warmup_s
        end_ts = self.last_ts + max(0.0, silence_s)
        pending = end_ts - self.cursor_ts
        if pending > 0:
            cause = self._state_cause() or self._gap_cause(pending)
            seconds[cause] += pending
        window_s = end_ts - self.first_ts
        explained = {k: v for k, v in seconds.items() if k != "unexplained"}
        badput = {cause: round(explained.get(cause, 0.0), 6) for cause in CAUSES if cause != "unexplained"}
        productive_s = round(explained["productive"], 6)
        # The rest of the window; the other parts' rounding can leave a residue of a microsecond or
        # two below zero, which is no badput (compare showed "unexplained -0.001 ms, -100.00%").
        residue = round(window_s - productive_s - sum(badput.values()), 6)
        badput["unexplained"] = residue if residue > 0 else 0.0  # never negative, never -0.0
        return Breakdown(
            from_rank=self.rank,
            start=self.first_ts,
            end=end_ts,
            window_s=round(window_s, 6),
            productive_s=productive_s,
            goodput_pct=round(100 * productive_s / window_s, 3) if window_s > 0 else None,
            badput_s=Badput(**badput),
            late_threshold_s=round(self.late_threshold_s(), 6),
        )
