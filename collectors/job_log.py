"""Passive job source: follow a job's own log and translate its lines through a log profile.

For jobs that do not use the in-job emitter. The profile (collectors/log_profiles.py) is chosen
by name or detected from the first lines; the always-on profiles (Neuron runtime errors,
torchrun's failure summary) apply to every log. What a log cannot give: heartbeats (so no
dead-vs-hung distinction), per-rank compute time and collective latency, which need the in-job
emitter. Tokens per step are known when the log says them or the caller passes the global batch
and sequence length.

A line from `torchrun --tee` / `--log-dir` carrying a `[rank<N>]:` / `[default<N>]:` prefix is
attributed to local rank N; a line without one to `default_rank`. Timestamps without a zone are
read as the monitor's local time; a line without a timestamp gets its receive time. Carriage
returns end lines too, so a progress bar that never writes a newline is read as it is drawn.

Yielded lines: each event as a `trnwatch.job/1` JSON line (kind "job"), so the job ledger reads
this source exactly like the emitter's files and a recording holds the translated lines; after
each read, when they changed, the translator's counts (kind "job-log": the profile used, lines
read, lines no rule matched), which the ledger keeps on the source.
"""

import asyncio
import os
import random
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass

from trnwatch.collectors.descriptors import shortage_words
from trnwatch.collectors.job_events import SCHEMA_VERSION, JobEvent, JobLogStats, Launcher
from trnwatch.collectors.job_files import (
    POLL_S,
    SHORTAGE_BACKOFF,
    FileTail,
    final_reads,
    read_followed,
    unread_message,
)
from trnwatch.collectors.lines import Line, SourceEvent
from trnwatch.collectors.log_profiles import LogProfile, LogTranslator
from trnwatch.collectors.log_profiles_generic import no_step_hint


class DescriptorShortage(Exception):
    """A log could not be read for want of file descriptors (EMFILE, ENFILE): read it again later."""

    def __init__(self, source_id: str, error: OSError):
        super().__init__(shortage_words(error))
        self.source_id = source_id


class _Retry:
    """When a follower of logs reads again after a descriptor shortage (SHORTAGE_BACKOFF), and
    the event that says so: the log's source "connecting" with the reason."""

    def __init__(self) -> None:
        self.failures = 0
        self._rng = random.Random()

    def after(self, shortage: DescriptorShortage) -> tuple[SourceEvent, float]:
        self.failures += 1
        delay_s = SHORTAGE_BACKOFF.delay_s(self.failures, self._rng)
        error = f"{shortage}; reading again in {delay_s:.1f} s"
        return SourceEvent(shortage.source_id, "job", time.time(), "connecting", error), delay_s


def _exit_reads(
    poll: Callable[[], Iterator[Line | SourceEvent]],
    backlog: Callable[[], bool],
    left_unread: Callable[[], Iterator[Line | SourceEvent]],
) -> Iterator[Line | SourceEvent]:
    """`final_reads`, ended early by a descriptor shortage (the session is ending: no retry)."""
    try:
        yield from final_reads(poll, backlog, left_unread)
    except DescriptorShortage:
        return


@dataclass(frozen=True)
class LogSource:
    path: str
    source_id: str
    default_rank: int  # the rank of lines without a torchrun prefix


_NUMBER = re.compile(r"\d+")


def log_sources(paths: list[str]) -> tuple[str, list[LogSource]]:
    """The run id and one source per log. One log: run = its name, lines without a prefix are
    rank 0. Several (one per rank): run = their common folder's name; each log's rank is the last
    number in its path below that folder (torchrun --log-dir's `<local_rank>/stdout.log`,
    `rank-3.log`) when every log has a different one, else 0; source ids are those paths."""
    if len(paths) == 1:
        path = paths[0]
        return os.path.splitext(os.path.basename(path))[0], [LogSource(path, f"joblog:{os.path.basename(path)}", 0)]
    absolute = [os.path.abspath(path) for path in paths]
    common = os.path.commonpath([os.path.dirname(path) for path in absolute])
    relative = [os.path.relpath(path, common) for path in absolute]
    numbers = [(_NUMBER.findall(rel) or [None])[-1] for rel in relative]
    ranks = [int(n) for n in numbers] if None not in numbers and len(set(numbers)) == len(numbers) else [0] * len(paths)
    run = os.path.basename(common) or "job"
    return run, [LogSource(path, f"joblog:{rel}", rank) for path, rel, rank in zip(paths, relative, ranks, strict=True)]


class _FollowedLog:
    """One log file read through its own translator: `poll` yields the lines of the events its new
    lines show and, when they changed, its counts (kind "job-log")."""

    def __init__(self, path: str, source_id: str, translator: LogTranslator):
        self.source_id = source_id
        self.translator = translator
        self.tail = FileTail(path, split_cr=True)
        self.reported: JobLogStats | None = None
        self.more_waiting = False

    def poll(self) -> Iterator[Line | SourceEvent]:
        try:
            texts, self.more_waiting = read_followed(self.tail)
        except OSError as exc:  # only a descriptor shortage gets through read_followed
            self.reported = None  # the next read says its counts again, which puts the source back up
            raise DescriptorShortage(self.source_id, exc) from None
        received_s = time.time()
        translator = self.translator
        read: list[JobEvent | str] = []
        for text in texts:
            try:
                read += translator.feed(text, received_s)
            except ValueError:
                # Matched a rule but does not validate (e.g. a step time of 1e999): pass the raw
                # line on so the job-line parser rejects it and it is counted, not silently lost.
                read.append(text)
        if not self.more_waiting:
            read += translator.release()  # a bar's last redraw waits no longer for a record after it
        # Progress-bar steps stamped on their bar's clock (LogTranslator.settle).
        settled = iter(translator.settle([item for item in read if not isinstance(item, str)], received_s))
        for item in read:
            text = item if isinstance(item, str) else next(settled).model_dump_json()
            yield Line(source_id=self.source_id, kind="job", received_s=received_s, text=text)
        note = translator.profile.no_steps if translator.profile is not None and translator.profile.no_steps else None
        if translator.profile is None and translator.lines and not translator.events:
            note = no_step_hint(", ".join(name for name, p in translator.profiles.items() if not p.always))
        stats = JobLogStats(
            profile=translator.profile_name,
            lines=translator.lines,
            unparsed=translator.unparsed,
            note=note,
            error_files=translator.error_files,
        )
        if stats != self.reported:
            self.reported = stats
            yield Line(source_id=self.source_id, kind="job-log", received_s=received_s, text=stats.model_dump_json())

    def left_unread(self) -> Iterator[Line | SourceEvent]:
        if left := self.tail.unread_bytes():
            yield SourceEvent(self.source_id, "job", time.time(), "end", unread_message(left))


async def follow_job_log(
    path: str,
    profiles: dict[str, LogProfile],
    profile: str | None = None,
    run: str | None = None,
    default_rank: int = 0,
    global_batch: int | None = None,
    seq_len: int | None = None,
    poll_s: float = POLL_S,
    source_id: str | None = None,
) -> AsyncIterator[Line | SourceEvent]:
    """Follow a job log from its start and yield the events it shows as `trnwatch.job/1` lines."""
    name = os.path.basename(path)
    translator = LogTranslator(run or os.path.splitext(name)[0], profiles, profile, default_rank, global_batch, seq_len)
    log = _FollowedLog(path, source_id or f"joblog:{name}", translator)
    retry = _Retry()
    try:
        while True:
            try:
                for item in log.poll():
                    yield item
                retry.failures = 0
                delay_s = 0 if log.more_waiting else poll_s
            except DescriptorShortage as shortage:
                event, delay_s = retry.after(shortage)
                yield event
            try:
                await asyncio.sleep(delay_s)
            except asyncio.CancelledError:  # the session ends: what the log holds by now goes in first
                for item in _exit_reads(log.poll, lambda: log.more_waiting, log.left_unread):
                    yield item
                raise
    finally:
        log.tail.close()


# torchrun --log-dir: <log dir>/<run id>/attempt_<N>/<local rank>/{stdout,stderr}.log (torch 2.13)
_LOG_DIR_FILE = re.compile(r"(?:^|/)attempt_(?P<attempt>\d+)/(?P<rank>\d+)/(?:stdout|stderr)\.log$")
LOG_DIR_DEPTH = 4  # the log dir, its run-id folder, an attempt folder or a rank folder may be given


def log_dir_files(folder: str) -> list[tuple[int, int, str]]:
    """(attempt, local rank, path relative to `folder`) of every per-rank log torchrun's --log-dir
    wrote under `folder`, attempt by attempt."""
    found = []
    for root, dirs, names in os.walk(folder):
        if os.path.relpath(root, folder).count(os.sep) >= LOG_DIR_DEPTH:
            dirs.clear()
        for name in names:
            relative = os.path.relpath(os.path.join(root, name), folder)
            if match := _LOG_DIR_FILE.search(os.path.join(os.path.basename(os.path.abspath(folder)), relative)):
                found.append((int(match["attempt"]), int(match["rank"]), relative))
    return sorted(found)


async def follow_log_dir(
    folder: str,
    profiles: dict[str, LogProfile],
    profile: str | None = None,
    global_batch: int | None = None,
    seq_len: int | None = None,
    poll_s: float = POLL_S,
) -> AsyncIterator[Line | SourceEvent]:
    """Follow torchrun's --log-dir folder: each `attempt_<N>/<rank>/stdout.log` and `stderr.log`
    through a translator of its own, as that rank (source `joblog:<path below the folder>`); new
    attempt folders are picked up as torchrun makes them, and the first file of a later attempt is
    announced as the launcher's restart (source `joblog:<folder name>`) after the earlier attempts'
    files were read. The run id is the folder's name."""
    run = os.path.basename(os.path.abspath(folder))
    logs: dict[str, tuple[int, _FollowedLog]] = {}
    announced = 0

    def poll() -> Iterator[Line | SourceEvent]:
        nonlocal announced
        for attempt, rank, relative in log_dir_files(folder):
            if relative not in logs:
                translator = LogTranslator(run, profiles, profile, rank, global_batch, seq_len, per_rank_file=True)
                logs[relative] = (
                    attempt,
                    _FollowedLog(os.path.join(folder, relative), f"joblog:{relative}", translator),
                )
        for attempt, log in sorted(logs.values(), key=lambda item: item[0]):
            if attempt > announced:
                announced = attempt
                event = Launcher(
                    v=SCHEMA_VERSION,
                    ts=time.time(),
                    run=run,
                    rank=0,
                    event="launcher",
                    action="restart",
                    attempt=attempt,
                )
                yield Line(source_id=f"joblog:{run}", kind="job", received_s=event.ts, text=event.model_dump_json())
            yield from log.poll()

    def backlog() -> bool:
        return any(log.more_waiting for _, log in logs.values())

    def left_unread() -> Iterator[Line | SourceEvent]:
        for _, log in logs.values():
            yield from log.left_unread()

    retry = _Retry()
    try:
        while True:
            delay_s = 0.0
            try:
                for item in poll():
                    yield item
                retry.failures = 0
                delay_s = 0 if backlog() else poll_s
            except DescriptorShortage as shortage:
                event, delay_s = retry.after(shortage)
                yield event
            try:
                await asyncio.sleep(delay_s)
            except asyncio.CancelledError:
                for item in _exit_reads(poll, backlog, left_unread):
                    yield item
                raise
    finally:
        for _, log in logs.values():
            log.tail.close()
