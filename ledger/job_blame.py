"""Failures and blame: which ranks are dead, and which failure of each process generation is
the cause. The rules ("dead", "failed") are stated in `ledger/job.py`'s module docstring."""

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Literal

from trnwatch.ledger.job_ranks import RankState

# A rank whose error says it timed out waiting in a collective was waiting for a peer: gloo's
# `Timed out waiting 3000ms for recv operation to complete` (third_party/gloo/gloo/transport/tcp/
# unbound_buffer.cc, as torch 2.13 raises it), NCCL's watchdog `Watchdog caught collective
# operation timeout` (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp).
COLLECTIVE_TIMEOUT = re.compile(
    r"Timed out waiting \d+ms for (?:recv|send) operation|Watchdog caught collective operation timeout"
)
# A rank whose error says a peer closed its connection failed because that peer did: gloo's
# `Connection closed by peer [127.0.0.1]:55720. This is typically caused by a remote worker
# crashing.` (third_party/gloo/gloo/transport/tcp/pair.cc, torch 2.13).
PEER_CLOSED = re.compile(r"Connection closed by peer ")


@dataclass(frozen=True)
class JobFailure:
    """A rank's failure: an error it reported, a run_end that was not a success, or (made by
    `failure_rows`) a rank gone silent. `waited` and `role` are judged by `failure_rows`."""

    rank: int
    ts: float  # when it failed (the report's failed_ts, else its ts; a silent rank: its last event)
    kind: Literal["error", "run_end", "silent"]
    restart: int  # the process generation it failed in
    error: str | None = None
    run_end: str | None = None
    source: str | None = None
    exit_code: int | None = None
    signal: str | None = None
    root_cause: bool = False  # the launcher named it the first failure it observed
    waited: bool = False  # its error says it timed out waiting for a peer, or lost one
    role: Literal["first", "consequence"] = "consequence"


def dead_ranks(ranks: Mapping[int, RankState], now_s: float, dead_after_s: float) -> list[int]:
    """Running ranks of the in-job emitter that are gone: heartbeating ranks silent for more
    than `dead_after_s`, or ranks that announced themselves (`run_start`, heartbeats) and are
    silent since before their peers' first failure while every peer has ended. The second
    rule needs no heartbeat: a rank killed before its first one is still the silent one."""
    silent = [
        (rank, seen_ts)
        for rank in ranks.values()
        if rank.status == "running"
        and (rank.has_heartbeats or rank.pid is not None)
        and (seen_ts := rank.last_seen_ts) is not None
    ]
    dead = {rank.rank for rank, seen_ts in silent if rank.has_heartbeats and now_s - seen_ts > dead_after_s}
    reported = [rank.failed_ts for rank in ranks.values() if rank.failed_ts is not None]
    if reported:
        first_ts = min(reported)
        before = {rank.rank for rank, seen_ts in silent if seen_ts < first_ts}
        others_ended = all(rank.status != "running" for rank in ranks.values() if rank.rank not in before)
        if before and others_ended:
            dead |= before
    return sorted(dead)


def failure_rows(
    failures: Iterable[JobFailure], ranks: Mapping[int, RankState], dead: Iterable[int]
) -> list[JobFailure]:
    """Failure reports kept, plus the `dead` ranks (gone without a word), in time order, each with
    its `role`: in each process generation (`restart`) the cause is "first", the rest follow."""
    rows = [
        replace(f, waited=bool(f.error and (COLLECTIVE_TIMEOUT.search(f.error) or PEER_CLOSED.search(f.error))))
        for f in failures
    ]
    if rows:
        for rank_id in list(dead) + waited_for(rows, ranks, dead):
            rank = ranks[rank_id]
            seen_ts = rank.last_seen_ts
            assert seen_ts is not None  # a dead rank was seen (dead_ranks), and one waited for (waited_for)
            rows.append(JobFailure(rank=rank_id, ts=seen_ts, kind="silent", restart=rank.restart))
    first: dict[int, JobFailure] = {}
    for row in rows:
        best = first.get(row.restart)
        if best is None or _blame_key(row) < _blame_key(best):
            first[row.restart] = row
    judged = [replace(row, role="first" if first[row.restart] is row else "consequence") for row in rows]
    return sorted(judged, key=lambda row: (row.ts, row.rank))


def waited_for(rows: list[JobFailure], ranks: Mapping[int, RankState], dead: Iterable[int]) -> list[int]:
    """Ranks that went silent while their peers timed out waiting for them, with no account of
    their own (no error, no run_end, no launcher line: a passive log under mpirun or srun, whose
    launcher stops the rest without a word per rank): in a process generation where every
    failure is a wait in a collective, each running rank of it that wrote nothing after the first
    of those timeouts. A rank that never wrote anything the ledger read is not known: it cannot be
    named."""
    out = []
    for generation in {row.restart for row in rows}:
        failures = [row for row in rows if row.restart == generation]
        if not all(row.waited for row in failures):
            continue
        first_ts = min(row.ts for row in failures)
        reported = {row.rank for row in failures} | set(dead)
        out += [
            rank.rank
            for rank in ranks.values()
            if rank.restart == generation
            and rank.status == "running"
            and rank.rank not in reported
            and rank.last_seen_ts is not None
            and rank.last_seen_ts <= first_ts  # equal: a log read after the fact, every line at its receive time
        ]
    return sorted(out)


def _blame_key(row: JobFailure) -> tuple:
    """Which failure is the cause, in this order of evidence: a rank that timed out waiting in a
    collective only when no rank failed otherwise (a hang elsewhere makes its peers time out, and
    the agent then SIGTERMs the hung rank: that one is the cause); a rank stopped from outside
    (ended aborted, or reported by its launcher as ended by SIGTERM: torchrun's agent stops the
    surviving workers that way once one failed) only when nothing else failed; the launcher's own
    mark (torchrun's Root Cause); then the earliest in time, the lowest rank last."""
    stopped = row.run_end == "aborted" or (row.source == "launcher" and row.signal == "SIGTERM")
    return (row.waited, stopped, not row.root_cause, row.ts, row.rank)


def waited_words(rows: list[JobFailure], first: JobFailure) -> str | None:
    """The evidence when peers failed waiting for the cause and the cause did not: "ranks 0, 2
    timed out in a collective, waiting; rank 1 did not: it was the one they waited for"."""
    if first.waited:
        return None
    parts = []
    for words, pattern in (
        ("timed out in a collective, waiting", COLLECTIVE_TIMEOUT),
        ("lost a peer's connection", PEER_CLOSED),
    ):
        ranks = sorted({row.rank for row in rows if row.error and pattern.search(row.error)} - {first.rank})
        if ranks:
            parts.append(f"{'ranks' if len(ranks) > 1 else 'rank'} {', '.join(map(str, ranks))} {words}")
    if not parts:
        return None
    return f"{'; '.join(parts)}; rank {first.rank} did not: it was the one they waited for"


def failure_words(row: JobFailure) -> str:
    """How a failure row reads in a reason."""
    if row.kind == "silent":
        return "went silent without an error or run_end (killed?)"
    if row.kind == "error":
        how = ", ".join(
            part for part in (row.signal, None if row.exit_code is None else f"exit {row.exit_code}") if part
        )
        return f"error: {row.error}" + (f" ({how})" if how else "")
    return f"run ended {row.run_end}"
