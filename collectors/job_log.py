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
import re
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

from trnwatch.collectors.job_events import JobLogStats
from trnwatch.collectors.job_files import POLL_S, FileTail, final_reads, read_followed, unread_message
from trnwatch.collectors.lines import Line, SourceEvent
from trnwatch.collectors.log_profiles import LogProfile, LogTranslator


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
    source_id = source_id or f"joblog:{name}"
    tail = FileTail(path, split_cr=True)
    reported = None
    more_waiting = False

    def poll() -> Iterator[Line | SourceEvent]:
        nonlocal reported, more_waiting
        texts, more_waiting = read_followed(tail)
        received_s = time.time()
        for text in texts:
            try:
                events = translator.feed(text, received_s)
            except ValueError:
                # Matched a rule but does not validate (e.g. a step time of 1e999): pass the raw
                # line on so the job-line parser rejects it and it is counted, not silently lost.
                yield Line(source_id=source_id, kind="job", received_s=received_s, text=text)
                continue
            for event in events:
                yield Line(source_id=source_id, kind="job", received_s=received_s, text=event.model_dump_json())
        stats = JobLogStats(profile=translator.profile_name, lines=translator.lines, unparsed=translator.unparsed)
        if stats != reported:
            reported = stats
            yield Line(source_id=source_id, kind="job-log", received_s=received_s, text=stats.model_dump_json())

    def left_unread() -> Iterator[Line | SourceEvent]:
        yield SourceEvent(source_id, "job", time.time(), "end", unread_message(tail.unread_bytes()))

    try:
        while True:
            for item in poll():
                yield item
            try:
                await asyncio.sleep(0 if more_waiting else poll_s)
            except asyncio.CancelledError:  # the session ends: what the log holds by now goes in first
                for item in final_reads(poll, lambda: more_waiting, left_unread):
                    yield item
                raise
    finally:
        tail.close()
