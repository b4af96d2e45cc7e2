"""Failures and blame: which ranks are dead, and which failure of each process generation is
the cause. The rules ("dead", "failed") are stated in `ledger/job.py`'s module docstring."""

from collections.abc import Iterable, Mapping

from trnwatch.ledger.job_ranks import RankState


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


def failure_rows(failures: Iterable[dict], ranks: Mapping[int, RankState], dead: Iterable[int]) -> list[dict]:
    """Failure reports kept, plus the `dead` ranks (gone without a word), in time order, each with
    its `role`: in each process generation (`restart`) the cause is "first", the rest follow."""
    rows = [dict(row) for row in failures]
    if rows:
        for rank_id in dead:
            rank = ranks[rank_id]
            rows.append(
                {
                    "rank": rank_id,
                    "ts": rank.last_seen_ts,
                    "kind": "silent",
                    "error": None,
                    "run_end": None,
                    "source": None,
                    "exit_code": None,
                    "signal": None,
                    "restart": rank.restart,
                }
            )
    first: dict[int, dict] = {}
    for row in rows:
        best = first.get(row["restart"])
        if best is None or _blame_key(row) < _blame_key(best):
            first[row["restart"]] = row
    for row in rows:
        row["role"] = "first" if first[row["restart"]] is row else "consequence"
    return sorted(rows, key=lambda row: (row["ts"], row["rank"]))


def _blame_key(row: dict) -> tuple:
    """Which failure is the cause: a rank stopped from outside (ended aborted, or reported by its
    launcher as ended by SIGTERM: torchrun's agent stops the surviving workers that way once one
    failed) only when nothing else failed, then the earliest in time."""
    stopped = row["run_end"] == "aborted" or (row["source"] == "launcher" and row["signal"] == "SIGTERM")
    return (stopped, row["ts"], row["rank"])


def failure_words(row: dict) -> str:
    """How a failure row reads in a reason."""
    if row["kind"] == "silent":
        return "went silent without an error or run_end (killed?)"
    if row["kind"] == "error":
        how = ", ".join(
            part for part in (row["signal"], None if row["exit_code"] is None else f"exit {row['exit_code']}") if part
        )
        return f"error: {row['error']}" + (f" ({how})" if how else "")
    return f"run ended {row['run_end']}"
