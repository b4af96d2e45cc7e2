"""Passive job source: the Hugging Face Trainer's `trainer_state.json`, read as a second account of
the run beside its console log.

The Trainer writes `<output_dir>/checkpoint-N/trainer_state.json` at every save (and
`<output_dir>/trainer_state.json` on `save_state()`): `global_step` (update steps completed),
`max_steps`, and `log_history`, one dict per `on_log` (the same values the console's dicts print,
unrounded): `{"step": 10, "loss": 4.7, "grad_norm": 1.04, "learning_rate": 0.00045, "epoch": 0.1}`
for a training log, `eval_*` keys for an evaluation, `train_runtime`/`train_loss` at the end.

Each file is read when it appears or changes (size or modification time). Every training log
entry (one with a `step` and a `loss`) beyond the highest step told before becomes a `step` event
of rank 0 with its loss (a step redone after a resume keeps its first loss), and `global_step` a
`step` event when no entry told it; they are stamped with the file's
modification time (the steps had ended by then: the file carries no time of its own) and carry no
step time. A state whose `global_step` reached `max_steps` (the Trainer saves at its last step)
ends rank 0's run with success; an error read later from the log still fails it. The Trainer
writes the file in place (`open(..., "w")`): a file that does not parse is
read again at the next poll, and reported (one rejected line, counted against the source) only
when it still does not parse unchanged. An entry whose step or loss has the wrong type is one
rejected line too.
"""

import json
import os
import re
import time
from collections.abc import AsyncIterator, Iterator

from trnwatch.collectors.job_events import SCHEMA_VERSION, RunEnd, Step
from trnwatch.collectors.job_files import polled_lines
from trnwatch.collectors.lines import Line

STATE_FILE = "trainer_state.json"
POLL_S = 1.0
_CHECKPOINT = re.compile(r"checkpoint-\d+")  # transformers PREFIX_CHECKPOINT_DIR + "-" + global_step
MAX_STATE_BYTES = 64 << 20  # a log_history of a million entries is ~100 MB: far beyond any real run's


def state_files(output_dir: str) -> list[str]:
    """The trainer_state.json files of an output_dir: its own, then each checkpoint's."""
    found = [os.path.join(output_dir, STATE_FILE)]
    try:
        with os.scandir(output_dir) as entries:
            found += [
                os.path.join(entry.path, STATE_FILE)
                for entry in entries
                if _CHECKPOINT.fullmatch(entry.name) and entry.is_dir()
            ]
    except OSError:
        return []
    return found


def is_output_dir(folder: str) -> bool:
    """True when `folder` holds a trainer_state.json of its own or in a checkpoint-N folder."""
    return any(os.path.isfile(path) for path in state_files(folder))


class TrainerStateWatcher:
    """Turns new or changed trainer_state.json files of an output_dir into step events (as JSON
    lines of `trnwatch.job/1`) and rejected lines (text the job decoder refuses and counts)."""

    def __init__(self, output_dir: str, run: str, rank: int = 0):
        self.output_dir = output_dir
        self.run = run
        self.rank = rank
        self._seen: dict[str, tuple[float, int]] = {}  # path -> (mtime, size) read
        self._unparsed: dict[str, tuple[float, int]] = {}  # path -> (mtime, size) that did not parse once
        self._told_up_to = 0  # the highest step told (log_history is in step order)
        self._ended = False

    def scan(self) -> list[str]:
        """Lines for what changed since the last scan (everything, on the first), oldest file first."""
        changed = []
        for path in state_files(self.output_dir):
            try:
                status = os.stat(path)
            except OSError:
                continue
            mark = (status.st_mtime, status.st_size)
            if self._seen.get(path) != mark:
                changed.append((status.st_mtime, path, mark))
        lines: list[str] = []
        for mtime, path, mark in sorted(changed):
            lines += self._read(path, mtime, mark)
        return lines

    def _read(self, path: str, mtime: float, mark: tuple[float, int]) -> list[str]:
        try:
            if mark[1] > MAX_STATE_BYTES:
                raise ValueError(f"{mark[1]} bytes, over {MAX_STATE_BYTES}")
            with open(path, "rb") as handle:
                state = json.loads(handle.read())
            if not isinstance(state, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as exc:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
            if self._unparsed.get(path) != mark:
                self._unparsed[path] = mark  # maybe caught mid-write: read again at the next poll
                return []
            self._seen[path] = mark
            return [f"{STATE_FILE} unreadable: {os.path.relpath(path, self.output_dir)}: {exc}"]
        self._seen[path] = mark
        self._unparsed.pop(path, None)
        lines = []
        history = state.get("log_history")
        for entry in history if isinstance(history, list) else []:
            if not isinstance(entry, dict) or "loss" not in entry:
                continue  # an evaluation's or the final summary's entry: no training step
            step, loss = _count(entry.get("step")), entry.get("loss")
            if step is None or not isinstance(loss, (int, float)) or isinstance(loss, bool):
                lines.append(f"{STATE_FILE} entry refused: {json.dumps(entry)[:200]}")
                continue
            if step > self._told_up_to:
                self._told_up_to = step
                lines.append(self._step(step, float(loss), mtime))
        global_step = _count(state.get("global_step"))
        if global_step is not None and global_step > self._told_up_to:
            self._told_up_to = global_step
            lines.append(self._step(global_step, None, mtime))
        max_steps = _count(state.get("max_steps"))
        if not self._ended and global_step and max_steps and global_step >= max_steps:
            self._ended = True  # the Trainer saves at its last step: the training's steps are done
            end = RunEnd(v=SCHEMA_VERSION, ts=mtime, run=self.run, rank=self.rank, event="run_end", status="success")
            lines.append(end.model_dump_json())
        return lines

    def _step(self, step: int, loss: float | None, ts: float) -> str:
        return Step(
            v=SCHEMA_VERSION,
            ts=ts,
            run=self.run,
            rank=self.rank,
            event="step",
            step=step,
            step_time_s=None,
            compute_s=None,
            tokens=None,
            loss=loss,
        ).model_dump_json()


def _count(value: object) -> int | None:
    """`value` when it is a step count (a non-negative int, not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


async def follow_trainer_state(
    output_dir: str, run: str, source_id: str, rank: int = 0, poll_s: float = POLL_S
) -> AsyncIterator[Line]:
    """Watch `output_dir`'s trainer_state.json files and yield their steps as `trnwatch.job/1`
    lines, history first."""
    watcher = TrainerStateWatcher(output_dir, run, rank)

    def poll() -> Iterator[Line]:
        received_s = time.time()
        for text in watcher.scan():
            yield Line(source_id=source_id, kind="job", received_s=received_s, text=text)

    async for line in polled_lines(poll, poll_s):  # the session's end: what is written by then still goes in
        yield line
