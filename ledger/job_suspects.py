"""Who to look at: each live rank's position (heartbeat step and region), the majority position,
the ranks away from it, and suspects as records with their device evidence.

The rule ("stalled": the majority position and its ties) is stated in `ledger/job.py`'s module
docstring; the ledger decides the verdict, this module only names ranks.
"""

from bisect import bisect_left
from collections.abc import Callable, Mapping
from statistics import median

from trnwatch.ledger.job_ranks import COLLECTIVE_REGION_PREFIX, RankState
from trnwatch.ledger.job_summary import Suspect, SuspectEvidence

ChipUtilisation = Callable[[str, int], float | None]  # (host, chip) -> latest utilisation %, or None
Positions = dict[tuple[int | None, str | None], list[int]]  # (heartbeat step, region) -> ranks there

POSITIONS_SHOWN = 3  # in a reason; the suspects list has every rank
SUSPECTS_NAMED = 3  # ranks named in a reason


def positions(ranks: Mapping[int, RankState], dead: set[int]) -> Positions:
    """Where each running, heartbeating, not dead rank is."""
    found: Positions = {}
    for rank in sorted(ranks.values(), key=lambda rank: rank.rank):
        if rank.status == "running" and rank.has_heartbeats and rank.rank not in dead:
            found.setdefault((rank.heartbeat_step, rank.region), []).append(rank.rank)
    return found


def majority(found: Positions) -> tuple[int | None, str | None] | None:
    """The most common position; ties go to one inside a collective, then to the higher step."""
    if not found:
        return None
    return max(
        found,
        key=lambda position: (
            len(found[position]),
            (position[1] or "").startswith(COLLECTIVE_REGION_PREFIX),  # a heartbeat may name no region
            position[0],
        ),
    )


def position_suspects(ranks: Mapping[int, RankState], dead: set[int], now_s: float) -> tuple[Suspect, ...]:
    """The ranks away from the majority position (none when every rank is at one position)."""
    found = positions(ranks, dead)
    most = majority(found)
    if most is None or len(found) == 1:
        return ()
    step, region = most
    why = f"differs from the majority ({len(found[most])} rank(s) in {region} at step {step})"
    return tuple(
        suspect(ranks[rank], why, now_s)
        for position, at in sorted(found.items(), key=lambda item: item[1][0])
        if position != most
        for rank in at
    )


def majority_text(found: Positions) -> str:
    """The most common positions in words, for a reason."""
    if not found:
        return "no heartbeats (passive source): position of ranks unknown"
    ordered = sorted(found.items(), key=lambda item: -len(item[1]))
    parts = [f"{len(at)} rank(s) in {region} at step {step}" for (step, region), at in ordered[:POSITIONS_SHOWN]]
    if len(ordered) > POSITIONS_SHOWN:
        parts.append(f"{len(ordered) - POSITIONS_SHOWN} more position(s)")
    return "; ".join(parts)


def suspect(
    rank: RankState, why: str, now_s: float, error: str | None = None, pause: tuple[str, float] | None = None
) -> Suspect:
    """The record of one rank to look at, with the evidence the ledger holds on it; `pause`
    (what, since) is the pause it is named for: its region, with that age."""
    region, region_since = pause if pause is not None else (rank.region, rank.region_since)
    return Suspect(
        rank=rank.rank,
        host=rank.host,
        chip=rank.chip,
        core=rank.core,
        region=region,
        step=rank.heartbeat_step if rank.heartbeat_step is not None else rank.last_step,
        evidence=SuspectEvidence(
            why=why,
            heartbeat_age_s=None if rank.heartbeat_ts is None else max(0.0, now_s - rank.heartbeat_ts),
            region_age_s=None if region_since is None else max(0.0, now_s - region_since),
            chip_util_pct=None,
            peer_chip_util_median_pct=None,
            error=error if error is not None else rank.error,
            warnings=rank.warnings,
            last_warning=rank.last_warning,
        ),
    )


def with_device_evidence(
    suspects: tuple[Suspect, ...], ranks: Mapping[int, RankState], chip_util_pct: ChipUtilisation | None
) -> tuple[Suspect, ...]:
    """Add each suspect's chip utilisation and the median of the other chips in the job. The
    chips' values are sorted once, so each suspect costs a bisection, not a pass over every chip
    (thousands of suspects at 18,432 ranks)."""
    if chip_util_pct is None or not suspects:
        return suspects
    chips = {(rank.host, rank.chip) for rank in ranks.values() if rank.host is not None and rank.chip is not None}
    utilisation = {chip: chip_util_pct(*chip) for chip in chips}
    known = sorted(value for value in utilisation.values() if value is not None)
    if not known:
        return suspects  # no chip has a figure: nothing to add (the evidence already says None)
    with_evidence = []
    for one in suspects:
        if one.host is None or one.chip is None:
            with_evidence.append(one)
            continue
        own = utilisation.get((one.host, one.chip))
        evidence = one.evidence.model_copy(
            update={"chip_util_pct": own, "peer_chip_util_median_pct": _median_without(known, own)}
        )
        with_evidence.append(one.model_copy(update={"evidence": evidence}))
    return tuple(with_evidence)


def _median_without(values: list[float], own: float | None) -> float | None:
    """`statistics.median` of sorted `values` less one occurrence of `own` (None: of them all)."""
    if own is None:
        return median(values) if values else None
    skip = bisect_left(values, own)
    n = len(values) - 1
    if n <= 0:
        return None

    def at(i: int) -> float:
        return values[i] if i < skip else values[i + 1]

    return at(n // 2) if n % 2 else (at(n // 2 - 1) + at(n // 2)) / 2


def named(suspects: tuple[Suspect, ...]) -> str:
    """ "rank 437 (host trn3-07 chip 3)" for the first few suspects."""
    parts = []
    for suspect in suspects[:SUSPECTS_NAMED]:
        chip = "?" if suspect.chip is None else suspect.chip
        parts.append(f"rank {suspect.rank} (host {suspect.host or '?'} chip {chip})")
    if len(suspects) > SUSPECTS_NAMED:
        parts.append(f"{len(suspects) - SUSPECTS_NAMED} more")
    return ", ".join(parts)
