"""Passive job source: read an NxD / NxD-Training job's own log and translate it to job events.

For jobs that do not use the in-job emitter. What the log gives (formats from the reference notes,
matched loosely because wording varies between Neuron releases):

- steps with loss: NxD Core tp_zero1 `LOG <asctime> - (<epoch>, <step>) step_loss : L ... throughput : T seq/s`,
  NxD Core tp_pp `step N step_time Ss throughput T seq/s step loss L`, and NxD-Training progress-bar
  fields `reduced_train_loss=L ... global_step=N` (optional `train_step_timing in s=S`; the NxDT form
  is inferred from metric names, not checked against a real NxDT log);
- compiles: `Call compiler with cmd` (cold compile begins), `Compiler status PASS|ERROR` (ends),
  `Using a cached neff` (persistent-cache hit);
- checkpoints: `synced|async saving of checkpoint <tag> began|completed`, `loading checkpoint from <tag>`,
  `loading checkpoint done`.

What it cannot give: heartbeats (so no dead-vs-hung distinction), per-rank compute time, and
collective latency, which needs the in-job emitter. Step time is the log's own figure (tp_pp, NxDT)
or, for tp_zero1 lines, the average over the logging interval (time between two log lines divided
by the steps between them; asctime has 1 s resolution). Tokens per step are only known when the
caller passes the job's global batch and sequence length.

Lines from `torchrun --tee`/`--log-dir` carry a `[default<local_rank>]:` prefix; the local rank is
used as the rank (one node's log). Timestamps without a zone are read as the monitor's local time;
a line without a timestamp gets its receive time.

The translated events are yielded as `trnwatch.job/1` JSON lines (kind "job"), so the job ledger
reads this source exactly like the emitter's files; a recording holds the translated lines.
"""

import os
import re
import time
from collections.abc import AsyncIterator
from datetime import datetime

from trnwatch.collectors.job_events import (
    SCHEMA_VERSION,
    Checkpoint,
    Error,
    JobEvent,
    Phase,
    Step,
)
from trnwatch.collectors.checkpoints import step_from_tag
from trnwatch.collectors.job_files import POLL_S, follow_file
from trnwatch.collectors.lines import Line

_TORCHRUN_PREFIX = re.compile(r"^\[[A-Za-z_-]*?(?P<local_rank>\d+)\]:\s?")
_ISO_TS = re.compile(r"^\[?(?P<ts>\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?)")
_ASCTIME_TS = re.compile(r"^LOG (?P<ts>\w{3} \w{3} +\d{1,2} \d{2}:\d{2}:\d{2} \d{4}) - ")

_SECONDS = r"\d+(?:\.\d*)?(?:[eE][-+]?\d+)?"
_LOSS = rf"[-+]?(?:{_SECONDS}|nan|inf)"  # a diverged loss is still a loss
_TP_ZERO1_STEP = re.compile(rf"\(\d+, (?P<step>\d+)\) step_loss : (?P<loss>{_LOSS})")
_TP_PP_STEP = re.compile(rf"step (?P<step>\d+) step_time (?P<step_time>{_SECONDS})s .*?step loss (?P<loss>{_LOSS})")
_NXDT_LOSS = re.compile(rf"reduced_train_loss=(?P<loss>{_LOSS})")
_NXDT_STEP = re.compile(r"global_step=(?P<step>\d+)(?:\.\d*)?")
_NXDT_STEP_TIME = re.compile(rf"train_step_timing(?: in s)?=(?P<step_time>{_SECONDS})")

_COLD_COMPILE_BEGIN = re.compile(r"Call compiler with cmd")
_COMPILE_STATUS = re.compile(r"Compiler status (?P<status>PASS|ERROR)")
_CACHE_HIT = re.compile(r"Using a cached neff")
_SAVE = re.compile(r"(?:synced|async) saving of checkpoint (?P<tag>\S+) (?P<state>began|completed)")
_LOAD_BEGIN = re.compile(r"loading checkpoint from (?P<tag>\S+)")
_LOAD_END = re.compile(r"loading checkpoint done")

MAX_MESSAGE_CHARS = 500


class NxdLogParser:
    """Translates one job log's lines into job events; keeps per-rank state between lines."""

    def __init__(self, run: str, default_rank: int = 0, global_batch: int | None = None, seq_len: int | None = None):
        self.run = run
        self.default_rank = default_rank
        self.tokens_per_step = global_batch * seq_len if global_batch and seq_len else None
        self._last_logged: dict[int, tuple[float, int]] = {}  # rank -> (ts, step) of the last step line
        self._loading_tag: dict[int, str] = {}

    def parse(self, text: str, received_s: float) -> list[JobEvent]:
        """Events found in one log line (most lines give none)."""
        rank = self.default_rank
        prefix = _TORCHRUN_PREFIX.match(text)
        if prefix:
            rank = int(prefix["local_rank"])
            text = text[prefix.end() :]
        ts = _line_ts(text, received_s)
        base = {"v": SCHEMA_VERSION, "ts": ts, "run": self.run, "rank": rank}

        if _COLD_COMPILE_BEGIN.search(text):
            return [Phase(**base, event="phase", phase="compile", state="begin", cache="miss")]
        if status := _COMPILE_STATUS.search(text):
            events = [Phase(**base, event="phase", phase="compile", state="end", cache="miss")]
            if status["status"] == "ERROR":
                events.append(Error(**base, event="error", message=text.strip()[:MAX_MESSAGE_CHARS]))
            return events
        if _CACHE_HIT.search(text):
            # A hit is reported as the end of a compile lookup whose start the log does not show.
            return [Phase(**base, event="phase", phase="compile", state="end", cache="hit")]
        if save := _SAVE.search(text):
            state = "begin" if save["state"] == "began" else "end"
            return [self._checkpoint(base, "save", state, save["tag"])]
        if load := _LOAD_BEGIN.search(text):
            self._loading_tag[rank] = load["tag"]
            return [self._checkpoint(base, "load", "begin", load["tag"])]
        if _LOAD_END.search(text):
            return [self._checkpoint(base, "load", "end", self._loading_tag.pop(rank, None))]
        return self._step(base, rank, ts, text)

    def _checkpoint(self, base: dict, action: str, state: str, tag: str | None) -> Checkpoint:
        step = step_from_tag(tag) if tag else None
        if step is None and base["rank"] in self._last_logged:
            step = self._last_logged[base["rank"]][1]
        return Checkpoint(**base, event="checkpoint", action=action, state=state, step=step, tag=tag)

    def _step(self, base: dict, rank: int, ts: float, text: str) -> list[JobEvent]:
        step_time_s = None
        if match := _TP_PP_STEP.search(text):
            step, loss, step_time_s = int(match["step"]), float(match["loss"]), float(match["step_time"])
        elif match := _TP_ZERO1_STEP.search(text):
            step, loss = int(match["step"]), float(match["loss"])
            previous = self._last_logged.get(rank)
            if previous and step > previous[1] and ts >= previous[0]:
                step_time_s = (ts - previous[0]) / (step - previous[1])
        elif (loss_match := _NXDT_LOSS.search(text)) and (step_match := _NXDT_STEP.search(text)):
            step, loss = int(step_match["step"]), float(loss_match["loss"])
            if timing := _NXDT_STEP_TIME.search(text):
                step_time_s = float(timing["step_time"])
        else:
            return []
        self._last_logged[rank] = (ts, step)
        return [
            Step(
                **base,
                event="step",
                step=step,
                step_time_s=step_time_s,
                compute_s=None,
                tokens=self.tokens_per_step,
                loss=loss,
            )
        ]


def _line_ts(text: str, received_s: float) -> float:
    try:
        if match := _ISO_TS.match(text):
            stamp, _, fraction = match["ts"].replace(",", ".").replace("T", " ").partition(".")
            seconds = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S").timestamp()
            return seconds + (float("0." + fraction) if fraction else 0.0)
        if match := _ASCTIME_TS.match(text):
            return time.mktime(time.strptime(match["ts"], "%a %b %d %H:%M:%S %Y"))
    except ValueError:  # shaped like a timestamp but not a real date
        pass
    return received_s


async def follow_job_log(
    path: str,
    run: str | None = None,
    default_rank: int = 0,
    global_batch: int | None = None,
    seq_len: int | None = None,
    poll_s: float = POLL_S,
) -> AsyncIterator[Line]:
    """Follow a job log from its start and yield the events it shows as `trnwatch.job/1` lines."""
    name = os.path.basename(path)
    parser = NxdLogParser(run or os.path.splitext(name)[0], default_rank, global_batch, seq_len)
    source_id = f"joblog:{name}"
    async for received_s, text in follow_file(path, poll_s):
        try:
            events = parser.parse(text, received_s)
        except ValueError:
            # Looked like an event but does not validate (e.g. a step time of 1e999): pass the raw
            # line on so the job-line parser rejects it and it is counted, not silently lost.
            yield Line(source_id=source_id, kind="job", received_s=received_s, text=text)
            continue
        for event in events:
            yield Line(source_id=source_id, kind="job", received_s=received_s, text=event.model_dump_json())
