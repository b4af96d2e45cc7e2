"""The job's verdict: rules tried in order, the first that answers decides (the verdict precedence
in ledger/job.py's docstring). Each rule is a small function of the job at one moment (`JobAt`)
that returns a diagnosis or None (not its case). `JobLedger.diagnose` tries `VERDICT_RULES`;
the job ledger keeps the fold, the rules only read it.

`JobAt` computes what several rules read (the dead ranks, one walk over the ranks, the pauses)
the first time a rule asks, so a job that failed pays for no pause and a steady one walks its
ranks once, as the single function before the rules did.
"""

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from trnwatch.ledger.job_blame import failure_words, waited_words
from trnwatch.ledger.job_pauses import Pause, bootstrap_pauses, one_sided, pause_words, rank_pause
from trnwatch.ledger.job_ranks import RankState
from trnwatch.ledger.job_summary import StallCause, Suspect, SuspectEvidence, Verdict
from trnwatch.ledger.job_suspects import (
    ChipUtilisation,
    majority_text,
    named,
    position_suspects,
    positions,
    suspect,
    with_device_evidence,
)
from trnwatch.ledger.rank_processes import RankProcesses, RankProcessState, held_words
from trnwatch.ledger.rules import PAUSE_FACTOR, PAUSE_FLOOR_S

if TYPE_CHECKING:
    from trnwatch.ledger.job import JobLedger

STARTUP_PHASES = ("init", "compile", "warmup")
SUSPECTS_HELD_NAMED = 3  # held processes spelled out in a reason


@dataclass(frozen=True)
class JobDiagnosis:
    """The on-call answer: a verdict, a one-line reason, and the ranks to look at (first first)."""

    verdict: Verdict
    reason: str
    suspects: tuple[Suspect, ...] = ()
    idle_s: float | None = None  # seconds since the last progress, or the pause's length (late, stalled)
    threshold_s: float | None = None  # the threshold that was crossed (late, stalled), or the pause's limit
    cause: StallCause = "no-progress"  # a pause past its limit, or a one-sided pause (ledger/job_pauses.py)


@dataclass(frozen=True, slots=True)
class RankWalk:
    """One walk over the ranks (576 in the demo, at every refresh): whether any failed, the
    running ones (not dead), their blocking pauses, and those starting up."""

    any_failed: bool
    running: list[RankState]
    pauses: list[Pause]
    starting: list[RankState]


class JobAt:
    """The job at `now_s`, as the verdict rules read it; each part computed on first read."""

    def __init__(
        self,
        job: "JobLedger",
        now_s: float,
        chip_util_pct: ChipUtilisation | None,
        processes: RankProcesses | None = None,
    ):
        self.job, self.now_s, self.chip_util_pct, self.processes = job, now_s, chip_util_pct, processes

    def evidence(self, suspects: tuple[Suspect, ...]) -> tuple[Suspect, ...]:
        """`suspects` with their chips' utilisation joined in (device telemetry) and their process:
        its pid and state as this host's rank-process pass read them, else the pid of its run_start."""
        joined = with_device_evidence(suspects, self.job.ranks, self.chip_util_pct)
        by_rank = self.processes.by_rank if self.processes is not None else {}
        ranks = self.job.ranks
        out = []
        for one in joined:
            process = by_rank.get(one.rank)
            if process is not None:
                found = {"pid": process.pid, "process_state": process.state, "host": one.host or process.host}
                out.append(one.model_copy(update=found))
            elif (rank := ranks.get(one.rank)) is not None and rank.pid is not None:
                out.append(one.model_copy(update={"pid": rank.pid}))
            else:
                out.append(one)
        return tuple(out)

    @cached_property
    def held(self) -> list[RankProcessState]:
        """Ranks still running as the job knows them whose process is stopped, in disk wait or a
        zombie (this host's rank-process passes), longest held first: they cannot make progress."""
        if self.processes is None:
            return []
        ranks = self.job.ranks
        return [p for p in self.processes.held() if (rank := ranks.get(p.rank)) is None or rank.status == "running"]

    def held_first(self, suspects: tuple[Suspect, ...]) -> tuple[Suspect, ...]:
        """The held ranks first, each named by what its process is doing, then the other suspects."""
        if not self.held:
            return suspects
        first = tuple(self._held_suspect(process) for process in self.held)
        named_ranks = {one.rank for one in first}
        return first + tuple(one for one in suspects if one.rank not in named_ranks)

    def held_text(self) -> str:
        """ "rank 1: its process (pid 4242) stopped (SIGSTOP, or a debugger) for 31 s; " or ""."""
        return "".join(f"rank {p.rank}: {held_words(p, self.now_s)}; " for p in self.held[:SUSPECTS_HELD_NAMED])

    def _held_suspect(self, process: RankProcessState) -> Suspect:
        why = held_words(process, self.now_s)
        rank = self.job.ranks.get(process.rank)
        if rank is not None:
            return suspect(rank, why, self.now_s)
        # A rank the job's lines never named (a log that prints no rank): its process is the evidence.
        return Suspect(
            rank=process.rank,
            host=process.host,
            chip=None,
            core=None,
            region=None,
            step=None,
            evidence=SuspectEvidence(
                why=why,
                heartbeat_age_s=None,
                region_age_s=None,
                chip_util_pct=None,
                peer_chip_util_median_pct=None,
                error=None,
            ),
        )

    @cached_property
    def dead(self) -> list[int]:
        return self.job.dead_ranks(self.now_s)

    @cached_property
    def dead_set(self) -> set[int]:
        return set(self.dead)

    @cached_property
    def walk(self) -> RankWalk:
        dead_set = self.dead_set
        any_failed = False
        running: list[RankState] = []
        pauses: list[Pause] = []
        starting: list[RankState] = []
        for rank in self.job.ranks.values():
            if rank.status != "running":
                any_failed = any_failed or rank.status in ("failed", "aborted")
            elif rank.rank not in dead_set:
                running.append(rank)
                if found := rank_pause(rank):
                    pauses.append(found)
                if rank.open_phases and any(phase in STARTUP_PHASES for phase in rank.open_phases):
                    starting.append(rank)
        return RankWalk(any_failed, running, pauses, starting)

    @cached_property
    def pauses(self) -> list[Pause]:
        """The running ranks' pauses, and the start-up of those that never stepped."""
        walk = self.walk
        return walk.pauses + bootstrap_pauses(walk.running, {pause.rank.rank for pause in walk.pauses})

    @cached_property
    def over(self) -> list[tuple[Pause, float]]:
        """The pauses past their limit, with that limit (start-up waits have their own: `waits_over`)."""
        limit = self.job.pause_limit_s
        return [
            (pause, limit_s)
            for pause in self.pauses
            if not pause.waits and self.now_s - pause.since_ts > (limit_s := limit(pause.kind))
        ]

    @cached_property
    def compiled_ts(self) -> float:
        """When the running ranks' last compile ended (-inf: none did)."""
        return max((rank.compile_ended_ts or float("-inf") for rank in self.walk.running), default=float("-inf"))

    def wait_from(self, pause: Pause) -> float:
        """Since when a start-up wait counts: its start, or the end of the last compile (it waited for it)."""
        return max(pause.since_ts, self.compiled_ts)

    @cached_property
    def waits_over(self) -> list[Pause]:
        """The start-up waits past the stall threshold, while no compile is open (they wait for it)."""
        waits = [pause for pause in self.pauses if pause.waits]
        if not waits or any(pause.kind == "compile" for pause in self.pauses):
            return []
        stall_s = self.job.thresholds(self.now_s).stall_s
        return [pause for pause in waits if self.now_s - self.wait_from(pause) > stall_s]

    @cached_property
    def sided(self) -> list[Pause]:
        """The pauses other ranks left (or never were in): they explain nothing."""
        return one_sided(self.pauses, self.walk.running) if self.pauses else []

    @cached_property
    def culprits(self) -> tuple[Suspect, ...]:
        """The ranks of a one-sided pause, oldest first."""
        now_s = self.now_s
        return tuple(
            suspect(p.rank, f"still in {p.what} while other ranks are not", now_s, pause=(p.what, p.since_ts))
            for p in sorted(self.sided, key=lambda p: (p.since_ts, p.rank.rank))
        )


VerdictRule = Callable[[JobAt], JobDiagnosis | None]


def no_events(at: JobAt) -> JobDiagnosis | None:
    job = at.job
    if job.ranks:
        return None
    return JobDiagnosis("no-data", f"no job events yet: {logs_read(job)}" if job.log_lines else "no job events yet")


def failed(at: JobAt) -> JobDiagnosis | None:
    """A rank failed: name the one that failed first in this generation of processes, then the others."""
    if not at.walk.any_failed:
        return None
    job, now_s = at.job, at.now_s
    generation = max(rank.restart for rank in job.ranks.values() if rank.status in ("failed", "aborted"))
    rows = [row for row in job.failure_rows(now_s) if row.restart == generation]
    first = next(row for row in rows if row.role == "first")
    order = [first.rank] + [rank for rank in dict.fromkeys(row.rank for row in rows) if rank != first.rank]
    errors = {row.rank: row.error for row in reversed(rows) if row.error}
    words = failure_words(first)
    if hang := waited_words(rows, first):
        words = f"{words}; {hang}"
    suspects = tuple(
        suspect(job.ranks[rank], words if rank == first.rank else "failed after the first", now_s, errors.get(rank))
        for rank in order
    )
    later = f"; {len(order) - 1} later failure(s) listed as consequences" if len(order) > 1 else ""
    reason = f"first failure {named(suspects[:1])}: {words}{later}"
    return JobDiagnosis("failed", reason, at.evidence(suspects))


def launcher_stopped(at: JobAt) -> JobDiagnosis | None:
    stopped = at.job.launcher_stopped
    if stopped is None:
        return None
    return JobDiagnosis("aborted", stopped.message or f"the launcher was stopped by {stopped.signal}")


def finished(at: JobAt) -> JobDiagnosis | None:
    if at.walk.running or at.dead:
        return None
    return JobDiagnosis("finished", f"all {len(at.job.ranks)} ranks ended with success")


def dead(at: JobAt) -> JobDiagnosis | None:
    if not at.dead:
        return None
    job, now_s = at.job, at.now_s
    suspects = tuple(
        # a dead rank was seen: dead_ranks keeps only ranks with a last_seen_ts
        suspect(job.ranks[rank], f"no event for {now_s - job.ranks[rank].last_seen_ts:.0f} s", now_s)  # type: ignore[operator]
        for rank in at.dead
    )
    suspects = at.held_first(suspects)
    return JobDiagnosis(
        "dead",
        f"{at.held_text()}{len(at.dead)} rank(s) silent for > {job.rules.dead_after_s:.0f} s: {named(suspects)}",
        at.evidence(suspects),
    )


def logs_without_steps(at: JobAt) -> JobDiagnosis | None:
    """Passive logs that gave no step: their other lines (checkpoints, compiles) say nothing
    about progress, so silence after them is no stall."""
    job = at.job
    if (
        not job.log_lines
        or job.run_start is not None
        or any(rank.last_step is not None or rank.has_heartbeats for rank in job.ranks.values())
    ):
        return None
    return JobDiagnosis("no-data", f"no step read: {logs_read(job)}")


def pause_past_limit(at: JobAt) -> JobDiagnosis | None:
    """Pauses past their limit: a stall caused by the oldest one's kind, naming their ranks."""
    if not at.over:
        return None
    job, now_s = at.job, at.now_s
    over = sorted(at.over, key=lambda item: (item[0].since_ts, item[0].rank.rank))
    first, limit_s = over[0]
    suspects = tuple(
        suspect(
            pause.rank,
            f"{pause.what} open for {now_s - pause.since_ts:.0f} s, beyond its limit of {limit_s:.0f} s",
            now_s,
            pause=(pause.what, pause.since_ts),
        )
        for pause, limit_s in over
    )
    earlier = len(job.pauses_s[first.kind])
    basis = (
        f"{PAUSE_FACTOR:g} x p99 of {earlier} earlier, at least {PAUSE_FLOOR_S:g} s, at most the limit"
        if earlier
        else f"--pause-limit {first.kind}"
    )
    reason = (
        f"{named(suspects)}; {first.kind} pause: {pause_words([p for p, _ in over], now_s)}, beyond its limit "
        f"of {limit_s:.0f} s ({basis})"
    )
    return JobDiagnosis("stalled", reason, at.evidence(suspects), now_s - first.since_ts, limit_s, first.kind)


def start_up_stuck(at: JobAt) -> JobDiagnosis | None:
    """A start-up that waits past the stall threshold (ranks that never stepped, in a collective or
    past their compiles): stalled on the oldest wait, naming the ranks that never reached it (it
    waits for them), then those still in it, then those that left it."""
    if not at.waits_over:
        return None
    job, now_s = at.job, at.now_s
    first = min(at.waits_over, key=lambda pause: (at.wait_from(pause), pause.since_ts, pause.rank.rank))
    stall_s = job.thresholds(now_s).stall_s
    waiting = {pause.rank.rank: pause for pause in at.pauses if pause.waits}
    still = sorted((p for p in waiting.values() if p.what == first.what), key=lambda p: (p.since_ts, p.rank.rank))
    still_ids = {pause.rank.rank for pause in still}
    left = [
        rank
        for rank in at.walk.running
        if rank.rank not in still_ids
        and (rank.left_collective == first.what or (rank.in_collective() and rank.region != first.what))
    ]
    left_ids = {rank.rank for rank in left}
    away = [rank for rank in at.walk.running if rank.rank not in still_ids and rank.rank not in left_ids]
    pause_of = {pause.rank.rank: pause for pause in at.pauses}
    suspects = tuple(
        suspect(
            rank,
            f"not in {first.what} ({where(rank, pause_of.get(rank.rank))}), where its peers wait",
            now_s,
            pause=told_pause(rank, pause_of.get(rank.rank)),
        )
        for rank in away
    )
    suspects += tuple(
        suspect(
            p.rank,
            f"{p.what} for {now_s - p.since_ts:.0f} s with no step, beyond the stall threshold of {stall_s:.0f} s",
            now_s,
            pause=(p.what, p.since_ts),
        )
        for p in still
    )
    suspects += tuple(
        suspect(
            rank,
            f"left {first.what} ({where(rank, pause_of.get(rank.rank))})",
            now_s,
            pause=told_pause(rank, pause_of.get(rank.rank)),
        )
        for rank in left
    )
    unknown = job.rank_counts(now_s).unknown
    counts = [f"{len(left)} left it" if left else "", f"{len(away)} not in it" if away else ""]
    counts.append(f"{unknown} rank(s) never heard from" if unknown else "")
    from_ts = at.wait_from(first)
    after = f", {now_s - from_ts:.0f} s after the last compile ended" if from_ts > first.since_ts else ""
    reason = (
        f"{named(suspects)}; start-up with no step: {len(still)} rank(s) still in {first.what} for "
        f"{now_s - first.since_ts:.0f} s{after} (stalled after {stall_s:.0f} s)"
        + "".join(f", {part}" for part in counts if part)
    )
    return JobDiagnosis("stalled", reason, at.evidence(suspects), now_s - from_ts, stall_s, "bootstrap")


def told_pause(rank: RankState, pause: Pause | None) -> tuple[str, float] | None:
    """The pause a suspect record names for a rank whose heartbeats name no region (None: its region)."""
    if pause is None or (rank.has_heartbeats and rank.region is not None):
        return None
    return pause.what, pause.since_ts


def where(rank: RankState, pause: Pause | None) -> str:
    """Where a rank is, in words: its heartbeat region, else its pause."""
    if rank.has_heartbeats and rank.region is not None:
        return rank.region
    return pause.what if pause is not None else "no heartbeat region"


def pause_together(at: JobAt) -> JobDiagnosis | None:
    """Pauses within their limits that the job is in together."""
    if not at.pauses or at.sided:
        return None
    return pause_diagnosis(at.pauses, at.now_s)


def no_progress(at: JobAt) -> JobDiagnosis | None:
    """No progress past the stall, else the late, threshold: the ranks of a one-sided pause first
    among the suspects, then those away from the majority's position."""
    job, now_s = at.job, at.now_s
    since_ts = job.last_progress_ts if job.last_progress_ts is not None else job.first_event_ts
    idle_s = None if since_ts is None else now_s - since_ts
    if idle_s is None or idle_s <= min(job.rules.late_after_s, job.rules.stall_after_s):
        return None
    thresholds = job.thresholds(now_s)
    verdict: Verdict
    for verdict, threshold_s in (("stalled", thresholds.stall_s), ("late", thresholds.late_s)):
        if idle_s > threshold_s:
            culprits = at.culprits
            named_ranks = {one.rank for one in culprits}
            listed = culprits + tuple(
                one for one in position_suspects(job.ranks, at.dead_set, now_s) if one.rank not in named_ranks
            )
            suspects = at.evidence(at.held_first(listed))
            lead = f"{named(suspects)}; {at.held_text()}" if suspects else ""
            in_pause = f"{pause_words(at.pauses, now_s)} while others are not; " if culprits else ""
            reason = (
                f"{lead}{in_pause}no progress for {idle_s:.0f} s ({verdict} after {threshold_s:.0f} s); "
                f"{majority_text(positions(job.ranks, at.dead_set))}"
            )
            cause: StallCause = at.sided[0].kind if culprits else "no-progress"
            return JobDiagnosis(verdict, reason, suspects, idle_s, threshold_s, cause)
    return None


def one_sided_pause(at: JobAt) -> JobDiagnosis | None:
    """A pause other ranks left, not late yet: said as the pause it is."""
    if not at.culprits:
        return None
    return pause_diagnosis(at.pauses, at.now_s)


def starting_up(at: JobAt) -> JobDiagnosis | None:
    starting = at.walk.starting
    if not starting:
        return None
    phases = sorted({phase for rank in starting for phase in rank.open_phases if phase in STARTUP_PHASES})
    verdict: Verdict = "compiling" if "compile" in phases else "starting"
    return JobDiagnosis(verdict, f"starting up: {', '.join(phases)} open on {len(starting)} rank(s)")


def no_step_yet(at: JobAt) -> JobDiagnosis | None:
    running = at.walk.running
    if any(rank.stepped_since_start() for rank in running):
        return None
    return JobDiagnosis("starting", f"no step yet on {len(running)} rank(s)")


def straggler(at: JobAt) -> JobDiagnosis | None:
    found = at.job.straggler(at.now_s)
    if found is None or not found.slow:
        return None
    least = suspect(at.job.ranks[found.rank], f"waits {found.skew_s * 1e3:.0f} ms/step less than peers", at.now_s)
    suspects = at.evidence((least,))
    return JobDiagnosis("slow", f"straggler {named(suspects)}", suspects)


def steady(at: JobAt) -> JobDiagnosis:
    return JobDiagnosis("steady", f"{len(at.walk.running)} rank(s) stepping")


# The precedence: the first rule that answers decides; `steady` always does.
VERDICT_RULES: tuple[VerdictRule, ...] = (
    no_events,
    failed,
    launcher_stopped,
    finished,
    dead,
    logs_without_steps,
    pause_past_limit,
    start_up_stuck,
    pause_together,
    no_progress,
    one_sided_pause,
    starting_up,
    no_step_yet,
    straggler,
    steady,
)


def verdict_of(
    job: "JobLedger",
    now_s: float,
    chip_util_pct: ChipUtilisation | None = None,
    processes: RankProcesses | None = None,
) -> JobDiagnosis:
    """The first answer of `VERDICT_RULES` for `job` at `now_s` (`processes`: this host's rank processes)."""
    at = JobAt(job, now_s, chip_util_pct, processes)
    for rule in VERDICT_RULES:
        diagnosis = rule(at)
        if diagnosis is not None:
            return diagnosis
    raise AssertionError("steady always answers")


def pause_diagnosis(pauses: list[Pause], now_s: float) -> JobDiagnosis:
    """The verdict of pauses within their limits that the job is in together: checkpointing
    (a blocking checkpoint open anywhere), else compiling (a compile open anywhere), else
    starting (the start-up: an init phase, no step yet, a wait within the stall threshold)."""
    checkpointing = [pause for pause in pauses if pause.kind == "checkpoint"]
    verdict: Verdict = (
        "checkpointing"
        if checkpointing
        else "compiling"
        if any(pause.kind == "compile" for pause in pauses)
        else "starting"
    )
    return JobDiagnosis(verdict, pause_words(checkpointing or pauses, now_s))


def logs_read(job: "JobLedger") -> str:
    """What the passive log sources read, for a verdict that has no step to go on."""
    return "; ".join(
        f"{source} ({job.log_profiles.get(source) or 'no framework profile detected'}) read {lines} line(s), "
        f"{unparsed} matched no rule" + (f": {note}" if note else "")
        for source, (lines, unparsed, note) in sorted(job.log_lines.items())
    )
