"""Steady state of a rank's steps: the warm-up (explicit or inferred), the steady samples
throughput and thresholds come from, and the percentiles they are summarised by.

The rules are stated in `ledger/job.py`'s module docstring ("steady state", "late", "stalled").
"""

import math
from collections.abc import Iterable, Sequence
from statistics import median
from typing import TypeVar

from trnwatch.ledger.job_ranks import RankState, StepSample
from trnwatch.ledger.job_summary import Percentiles, Throughput

WARMUP_OUTLIER_FACTOR = 2.0
WARMUP_PROBE_STEPS = 32  # the first steps of a process the warm-up is inferred from
WARMUP_MIN_AFTER = 1  # steps after a candidate warm-up step needed to judge it (re-judged as more come)
RECENT_STEPS = 64  # steady steps the late and stall thresholds are computed from


_Number = TypeVar("_Number", int, float)


def nearest_rank(ordered: Sequence[_Number], q: float) -> _Number:
    """Nearest-rank percentile (q in 0..100) of `ordered`: sorted and not empty."""
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def percentile(values: Iterable[_Number], q: float) -> _Number | None:
    """Nearest-rank percentile (q in 0..100) of `values`; None when empty."""
    ordered = sorted(values)
    return nearest_rank(ordered, q) if ordered else None


def percentiles(values) -> Percentiles:
    """p50, p90 and p99 (nearest rank) of `values`; all None when empty."""
    ordered = sorted(values)
    if not ordered:
        return Percentiles(p50=None, p90=None, p99=None)
    return Percentiles(p50=nearest_rank(ordered, 50), p90=nearest_rank(ordered, 90), p99=nearest_rank(ordered, 99))


def warmup_steps(rank: RankState) -> int:
    """Leading steps of the rank's process that are outliers against the median of the steps
    after them (inferred warm-up), or the steps before its explicit steady phase."""
    if rank.saw_steady:
        return rank.steps_before_steady
    return inferred_warmup(rank.first_step_times_s)


def inferred_warmup(times: list[float]) -> int:
    """How many of a process's first step times (at most WARMUP_PROBE_STEPS) are warm-up: the
    leading ones over WARMUP_OUTLIER_FACTOR x the median of the steps after them."""
    warmup = 0
    while len(times) - warmup - 1 >= WARMUP_MIN_AFTER:
        if times[warmup] <= WARMUP_OUTLIER_FACTOR * median(times[warmup + 1 :]):
            break
        warmup += 1
    return warmup


def steady_samples(rank: RankState) -> list[StepSample]:
    """The rank's recent steady steps (see the steady-state rule)."""
    if rank.saw_steady:
        return [s for s in rank.steps if s.kind == "steady"]
    warmup = warmup_steps(rank)
    return [s for s in rank.steps if s.kind == "open" and s.open_index >= warmup]


def recent_step_times_s(rank: RankState) -> list[float]:
    """The rank's recent steady step times (its recent steps if none is steady)."""
    steady = steady_samples(rank)[-RECENT_STEPS:]
    return [s.step_time_s for s in steady] or [s.step_time_s for s in list(rank.steps)[-RECENT_STEPS:]]


def rank_throughput(rank: RankState, now_s: float) -> Throughput | None:
    """Steady-state figures of one rank, with the steps and time span they cover."""
    samples = steady_samples(rank)
    if not samples:
        return None
    steady_s = sum(s.step_time_s for s in samples)
    with_tokens = [s for s in samples if s.tokens is not None]
    token_s = sum(s.step_time_s for s in with_tokens)
    return Throughput(
        tokens_per_s=sum(s.tokens or 0 for s in with_tokens) / token_s if with_tokens and token_s > 0 else None,
        from_rank=rank.rank,
        boundary="explicit" if rank.saw_steady else "inferred",
        warmup_steps=warmup_steps(rank),
        steps_in_window=len(samples),
        first_step=samples[0].step,
        last_step=samples[-1].step,
        begin_ts=samples[0].ts - samples[0].step_time_s,
        end_ts=samples[-1].ts,
        steady_s=steady_s,
        excluded_steps=len(rank.steps) - len(samples),
        last_step_age_s=max(0.0, now_s - samples[-1].ts),
        step_time_s=percentiles(s.step_time_s for s in samples[-RECENT_STEPS * 4 :]),
        tokens_per_s_per_device=median(per_device)
        if (per_device := [s.tokens_per_s_per_device for s in samples if s.tokens_per_s_per_device is not None])
        else None,
    )
