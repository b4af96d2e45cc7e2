"""Passive job source: watch an NxD-layout checkpoint directory and report saves as job events.

NxD writes `<dir>/<tag>/checkpoint` when a save begins (rank 0) and `<dir>/<tag>/done` when every
rank has finished; the reference workload writes the same layout. A save is timed from the two
files' modification times (the file server's clock). A tag with a `checkpoint` marker but no `done`
is reported as an open save only while it is the newest tag: an older incomplete tag is an
interrupted save or a deletion in progress, not a save that is still running.

Saves are reported for `rank` (default 0, the rank that writes the markers); the step comes from
the tag name (`step_120`), or is null when the tag carries none.

A Hugging Face Trainer's output_dir (`checkpoint-N/trainer_state.json`) has no markers: the same
follower reads its trainer_state.json files (collectors/trainer_state.py), so `--ckpt-dir` takes
either layout.
"""

import os
import re
import time
from collections.abc import AsyncIterator, Iterator
from typing import Literal

from trnwatch.collectors.job_events import SCHEMA_VERSION, Checkpoint
from trnwatch.collectors.job_files import polled_lines
from trnwatch.collectors.lines import Line
from trnwatch.collectors.trainer_state import TrainerStateWatcher

BEGIN_MARKER = "checkpoint"
DONE_MARKER = "done"
POLL_S = 1.0
_STEP_IN_TAG = re.compile(r"step[_=-]?(?P<step>\d+)")


def step_from_tag(tag: str) -> int | None:
    """The step number inside a checkpoint tag (`step_120`, `...--step=120-...`), if any."""
    match = _STEP_IN_TAG.search(tag)
    return int(match["step"]) if match else None


def _mtime(path: str) -> float | None:
    """The marker's modification time; None while it is absent or cannot be read (a symbolic-link
    loop, a permission): one bad tag never ends the source, and a later scan tries again."""
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


class CheckpointDirWatcher:
    """Turns changes in a checkpoint directory into checkpoint save begin/end events."""

    def __init__(self, checkpoint_dir: str, run: str, rank: int = 0):
        self.checkpoint_dir = checkpoint_dir
        self.run = run
        self.rank = rank
        self._begun: set[str] = set()
        self._done: set[str] = set()

    def scan(self) -> list[Checkpoint]:
        """Events for what changed since the last scan (everything, on the first), oldest first."""
        try:
            tags = [entry.name for entry in os.scandir(self.checkpoint_dir) if entry.is_dir()]
        except FileNotFoundError:
            return []
        found = []  # (tag, begin mtime or None, done mtime or None)
        for tag in tags:
            if tag in self._done or tag.startswith("."):
                continue
            tag_dir = os.path.join(self.checkpoint_dir, tag)
            found.append((tag, _mtime(os.path.join(tag_dir, BEGIN_MARKER)), _mtime(os.path.join(tag_dir, DONE_MARKER))))
        newest_begin = max((begin for _, begin, _ in found if begin is not None), default=None)
        events = []
        for tag, begin_s, done_s in found:
            if begin_s is not None and tag not in self._begun and (done_s is not None or begin_s == newest_begin):
                self._begun.add(tag)
                events.append(self._event(tag, "begin", begin_s))
            if done_s is not None:
                self._done.add(tag)
                events.append(self._event(tag, "end", done_s))
        return sorted(events, key=lambda event: event.ts)

    def _event(self, tag: str, state: Literal["begin", "end"], ts: float) -> Checkpoint:
        return Checkpoint(
            v=SCHEMA_VERSION,
            ts=ts,
            run=self.run,
            rank=self.rank,
            event="checkpoint",
            action="save",
            state=state,
            step=step_from_tag(tag),
            tag=tag,
        )


def checkpoint_source_id(checkpoint_dir: str) -> str:
    """The source id of a checkpoint folder's follower: `ckpt:<folder name>`."""
    return f"ckpt:{os.path.basename(os.path.abspath(checkpoint_dir))}"


async def follow_checkpoint_dir(
    checkpoint_dir: str, run: str, rank: int = 0, poll_s: float = POLL_S
) -> AsyncIterator[Line]:
    """Watch `checkpoint_dir` and yield checkpoint saves (and a Trainer's trainer_state.json steps)
    as `trnwatch.job/1` lines, history first."""
    watcher = CheckpointDirWatcher(checkpoint_dir, run, rank)
    states = TrainerStateWatcher(checkpoint_dir, run, rank)
    source_id = checkpoint_source_id(checkpoint_dir)

    def poll() -> Iterator[Line]:
        received_s = time.time()
        for event in watcher.scan():
            yield Line(source_id=source_id, kind="job", received_s=received_s, text=event.model_dump_json())
        for text in states.scan():
            yield Line(source_id=source_id, kind="job", received_s=received_s, text=text)

    async for line in polled_lines(poll, poll_s):  # the session's end: what is written by then still goes in
        yield line
