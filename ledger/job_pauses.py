"""Pauses: a blocking checkpoint, a compile or a start-up, when a rank takes no step and that is
expected; each has a bound and a culprit.

The rules (the job ledger applies them in `JobLedger.diagnose`; its module docstring lists them
in the verdict's precedence):

- a rank's open pause (`RankState.blocking_pause`): a blocking checkpoint (a save without
  `blocking: false`, a `checkpoint` phase, a heartbeat region `checkpoint`) is `checkpoint`; an
  open `compile` phase is `compile`; an open `init` phase is `bootstrap`. While no running rank has
  taken a step since its process started, and none has reported a runtime warning since (a
  collective timeout says the ranks are already waiting on each other), every rank is in its
  `bootstrap`, from its start.
- bound: `Rules.pause_limit_s(kind, p99 of the run's earlier pauses of the kind)`, the earlier
  ones being the timeline rank's blocking saves and compiles and its restarts' time to first step.
  A pause past its bound is a stall caused by that kind; its ranks are the suspects.
- a start-up that waits instead of working (`start_up_wait`): a rank of a process that has not
  stepped and whose heartbeat is in a collective (a rendezvous, `init_process_group`, a first
  barrier: from when it entered it), or whose compiles have ended with none open (from the last
  end), is in a `bootstrap` pause bounded by the stall threshold (`--stall-after`), not by the
  start-up's limit; past it, while no compile is open on any running rank (the waits would be for
  it), the job is stalled (`job_verdicts.start_up_stuck`).
- one-sided: a pause explains the job's lack of progress only while the ranks outside it are not
  known to be elsewhere. A rank is known to be elsewhere when its heartbeat names a region (it is
  in a collective, the data loader, ...) or it left a pause of the same kind after this one began.
  A one-sided pause explains nothing: the late and stall rules apply, with its ranks first among
  the suspects (their region is the pause, their age its length).
"""

from collections.abc import Iterable
from dataclasses import dataclass

from trnwatch.ledger.job_ranks import RankState
from trnwatch.ledger.rules import PauseKind

PAUSE_OF_PHASE: dict[str, PauseKind] = {"checkpoint": "checkpoint", "compile": "compile", "init": "bootstrap"}
BOOTSTRAP_WORDS = "start-up (no step yet)"
AFTER_COMPILE_WORDS = "the wait for a first step after compiling"


@dataclass(frozen=True, slots=True)
class Pause:
    """One rank's open pause: its kind, the phase or state it is in (for words), since when;
    `waits`: a start-up waiting (in a collective, or for a first step after its compiles), bounded
    by the stall threshold."""

    rank: RankState
    kind: PauseKind
    what: str
    since_ts: float
    waits: bool = False


def rank_pause(rank: RankState) -> Pause | None:
    """The rank's open blocking checkpoint, compile or init phase, if any (an init phase whose
    rank waits in a collective is that wait)."""
    found = rank.blocking_pause()
    if found is None:
        return None
    phase, since_ts = found
    kind = PAUSE_OF_PHASE[phase]
    if kind == "bootstrap" and (waiting := collective_wait(rank)) is not None:
        return waiting
    return Pause(rank, kind, phase, since_ts)


def bootstrap_pauses(running: list[RankState], paused: set[int]) -> list[Pause]:
    """Every running rank not already in a pause is in its start-up (or waits in it: `start_up_wait`)
    while none has stepped or warned since its process started; [] once one has."""
    if any(rank.stepped_since_start() or rank.warnings for rank in running):
        return []
    return [
        start_up_wait(rank) or Pause(rank, "bootstrap", BOOTSTRAP_WORDS, rank.started_ts)
        for rank in running
        if rank.rank not in paused and rank.started_ts is not None
    ]


def start_up_wait(rank: RankState) -> Pause | None:
    """The rank's start-up wait, if its process has not stepped: in a collective, else with its
    compiles ended (one since its start, none open)."""
    found = collective_wait(rank)
    if found is not None:
        return found
    ended_ts = rank.compile_ended_ts
    if (
        ended_ts is None
        or rank.stepped_since_start()
        or (rank.started_ts is not None and ended_ts < rank.started_ts)
        or "compile" in rank.open_phases
    ):
        return None
    return Pause(rank, "bootstrap", AFTER_COMPILE_WORDS, ended_ts, waits=True)


def collective_wait(rank: RankState) -> Pause | None:
    """A rank of a process that has not stepped, in a collective since it entered it (a new
    process's heartbeats name its region anew)."""
    if not rank.in_collective() or rank.region_since is None or rank.stepped_since_start():
        return None
    return Pause(rank, "bootstrap", rank.region or "collective", rank.region_since, waits=True)


def one_sided(pauses: list[Pause], running: Iterable[RankState]) -> list[Pause]:
    """The pauses some rank outside them is known to have left or not to be in (none: the job
    pauses together, and the pause explains its lack of progress)."""
    paused = {pause.rank.rank for pause in pauses}
    others = [rank for rank in running if rank.rank not in paused]
    if not others:
        return []
    found = []
    for pause in pauses:
        if any(
            (rank.has_heartbeats and rank.region is not None)
            or rank.pause_left_ts.get(pause.kind, float("-inf")) >= pause.since_ts
            for rank in others
        ):
            found.append(pause)
    return found


def pause_words(pauses: list[Pause], now_s: float) -> str:
    """ "checkpoint open on 2 rank(s) for 41 s" (the oldest's age)."""
    what = ", ".join(sorted({pause.what for pause in pauses}))
    return f"{what} open on {len(pauses)} rank(s) for {now_s - min(p.since_ts for p in pauses):.0f} s"
