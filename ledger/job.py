"""Job ledger: folds `trnwatch.job/1` events into per-rank state, run figures and a verdict.

Pure logic: no I/O, no clock. Every method that needs "now" takes `now_s` (unix seconds).
Ages are measured against the events' own `ts` (the job hosts' clocks), so a monitor opened late
judges history correctly; this assumes job hosts and monitor agree on time (chrony/NTP), as any
cluster does. An event stamped more than MAX_TS_AHEAD_S after it was received (a millisecond
`ts`, a wrong clock) is rejected, so it cannot keep a dead rank alive. Old stamps are fine: a
monitor opened late, or a log read after the fact, folds history.

Rules (defaults are module constants, all overridable per ledger):

- progress: a step, a phase end, a blocking checkpoint's end, a process start. An open background
  checkpoint (`blocking: false`) is not progress and explains no pause: steps go on during it.
- late: no progress for longer than max(LATE_FACTOR x p99 of recent steady step times,
  late_after_s) = max(3 x p99, 5 s). Suspects as for stalled.
- stalled: no progress for longer than max(STALL_FACTOR x median recent steady step time,
  stall_after_s) = max(5 x median, 30 s) while every running rank's heartbeats are fresh.
  Suspects: each live rank's position is (heartbeat step, heartbeat region); the majority position
  is the most common one, ties going to a position inside a collective (those ranks are waiting
  for peers) and then to the higher step; ranks at any other position are the suspects.
- pauses that are not stalls: an open init or compile phase ("compiling"), a blocking checkpoint
  (a save without `blocking: false`, a `checkpoint` phase, or a rank whose heartbeat region is
  `checkpoint`: "checkpointing"), reported with their age.
- dead: a running rank that has sent heartbeats sends nothing for more than `dead_after_s`
  (DEAD_AFTER_S = 10 s: more than 3 missed heartbeats at the emitter's default 2 s interval), or
  went silent without a word (no error, no run_end) before the first failure of its peers while
  all of them have ended (a SIGKILL, the OOM killer). Ranks seen only through passive sources (no
  heartbeats) are never declared dead. A dead rank is not running.
- warnings: an error with severity `warning` (a non-fatal runtime line such as a retried
  collective timeout) is counted on its rank and kept as evidence; it never fails the rank.
- failed: a rank errored (fatally) or ended failed/aborted since its latest start. The first failure in
  time is the cause: a silent rank failed at its last event, a report at its `failed_ts` (else
  its `ts`); a rank that ended `aborted` was stopped from outside (its launcher's SIGTERM) and is
  the cause only when nothing else is. Every later failure is listed as a consequence.
- slow (straggler): per rank, the median over its last WAIT_WINDOW_STEPS steady steps of the time
  per step spent waiting for peers. The rank that waits least is the straggler; it is reported as
  slow when the others' median wait exceeds its wait by at least STRAGGLER_MIN_SKEW_FRACTION
  (20 %) of the median step time.
- steady state: from an explicit `steady` phase when the rank emits one (steps between compile
  end and steady begin are warm-up); otherwise after the warm-up inferred from step times: the
  leading steps of the rank's process that are outliers (more than WARMUP_OUTLIER_FACTOR x) against
  the median of the steps after them. Steady steps exclude steps taken while another phase or a
  blocking checkpoint was open, and steps that ended a late gap, so throughput (tokens / summed
  step time of those steps, lowest rank present, so the job's tokens count once) is never
  averaged over stalled, checkpoint or restart time.
- verdict precedence: no-data; failed; finished; dead; checkpointing / compiling (an open long
  phase); stalled; late; compiling (warmup still open); slow; steady.
- cold compile: time in compile phases not marked as persistent-cache hits (lowest rank).
- restart from checkpoint: from the lowest rank's run_start with restart > 0 to its first step,
  with the checkpoint load time and the steps redone.

Memory: per-rank and per-op state plus deques with a maxlen; at most MAX_RANKS ranks (and never
a rank at or beyond the announced world size) and MAX_COLLECTIVE_OPS op names; an event beyond
a bound is rejected (`JobEventRejected`, counted by the caller), never folded.
"""

import math
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import median
from typing import Literal

from trnwatch.collectors.job_events import (
    Checkpoint,
    Collective,
    Error,
    Heartbeat,
    JobEvent,
    Phase,
    RunEnd,
    RunStart,
    Step,
)
from trnwatch.ledger.job_summary import (
    CheckpointSaves,
    CollectiveEntry,
    Failure,
    JobSection,
    Observed,
    Percentiles,
    PhaseEntry,
    RankCounts,
    RestartEntry,
    Stall,
    Suspect,
    SuspectEvidence,
    Thresholds,
    Throughput,
    Verdict,
    WaitSkew,
    WarningEntry,
    Warnings,
)

ChipUtilisation = Callable[[str, int], float | None]  # (host, chip) -> latest utilisation %, or None

DEAD_AFTER_S = 10.0
LATE_FACTOR = 3.0
LATE_AFTER_S = 5.0
STALL_FACTOR = 5.0
STALL_AFTER_S = 30.0
STRAGGLER_MIN_SKEW_FRACTION = 0.2
WARMUP_OUTLIER_FACTOR = 2.0
WARMUP_PROBE_STEPS = 32  # the first steps of a process the warm-up is inferred from
WARMUP_MIN_AFTER = 1  # steps after a candidate warm-up step needed to judge it (re-judged as more come)
RECENT_STEPS = 64  # steady steps the late and stall thresholds are computed from
STEP_WINDOW = 256
COLLECTIVE_WINDOW = 1024
WAIT_WINDOW_STEPS = 32
MIN_WAIT_STEPS = 5  # fewer steps of wait data say nothing about a straggler
TIMELINE_SPANS = 128
FAILURES_KEPT = 64
WARNINGS_KEPT = 16
STALLS_KEPT = 64
RESTARTS_KEPT = 32
SAVES_KEPT = 256
MAX_RANKS = 32768  # a 1,152-host Trn3 cluster at LNC=2 runs 18,432 ranks
MAX_COLLECTIVE_OPS = 64
MAX_TS_AHEAD_S = 60.0

STARTUP_LONG_PHASES = ("init", "compile")
STARTUP_PHASES = ("init", "compile", "warmup")
COLLECTIVE_REGION_PREFIX = "collective"
CHECKPOINT_REGION = "checkpoint"
POSITIONS_SHOWN = 3  # in a reason; the suspects list has every rank
SUSPECTS_NAMED = 3  # ranks named in a reason

StepKind = Literal["steady", "open", "other", "late"]  # open: no phase open


class JobEventRejected(ValueError):
    """A valid event the ledger will not fold (beyond a bound, another run); `reason` is the count key."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason


def percentile(values, q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100) of `values`; None when empty."""
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def _percentiles(values) -> Percentiles:
    ordered = sorted(values)
    if not ordered:
        return Percentiles(p50=None, p90=None, p99=None)
    at = lambda q: ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]  # noqa: E731
    return Percentiles(p50=at(50), p90=at(90), p99=at(99))


@dataclass(slots=True)
class StepSample:
    step: int
    ts: float
    step_time_s: float
    tokens: int | None
    kind: StepKind
    open_index: int  # how many steps with no phase open this process took before this one
    tokens_per_s_per_device: float | None = None  # as a passive log reports it (TorchTitan's tps)


@dataclass
class RankState:
    """What the ledger knows about one rank, from its latest process start onwards."""

    rank: int
    host: str | None = None
    chip: int | None = None
    core: int | None = None
    local_rank: int | None = None
    pid: int | None = None
    restart: int = 0
    status: Literal["running", "finished", "failed", "aborted"] = "running"
    last_seen_ts: float | None = None
    has_heartbeats: bool = False
    last_step: int | None = None
    last_step_ts: float | None = None
    heartbeat_ts: float | None = None
    heartbeat_step: int | None = None
    region: str | None = None
    region_since: float | None = None
    open_phases: dict[str, float] = field(default_factory=dict)  # phase -> begin ts
    open_checkpoint: Checkpoint | None = None
    paused_since_step: bool = False  # a blocking checkpoint ran since the last step
    saw_steady: bool = False  # this process opened an explicit steady phase
    steps_before_steady: int = 0
    first_step_times_s: list[float] = field(default_factory=list)  # this process's first open steps
    open_steps: int = 0  # steps with no phase open, this process
    steps: deque = field(default_factory=lambda: deque(maxlen=STEP_WINDOW))  # StepSample
    wait_per_step: deque = field(default_factory=lambda: deque(maxlen=WAIT_WINDOW_STEPS))  # [step, wait_s]
    error: str | None = None
    failed_ts: float | None = None
    warnings: int = 0  # non-fatal errors since its latest start
    last_warning: str | None = None

    def blocking_pause(self) -> tuple[str, float] | None:
        """(phase, since) of an open pause that explains no steps: a blocking checkpoint first."""
        if self.open_checkpoint is not None and self.open_checkpoint.blocking is not False:
            return "checkpoint", self.open_checkpoint.ts
        if "checkpoint" in self.open_phases:
            return "checkpoint", self.open_phases["checkpoint"]
        if self.region == CHECKPOINT_REGION and self.region_since is not None:
            return "checkpoint", self.region_since
        return next(((phase, ts) for phase, ts in self.open_phases.items() if phase in STARTUP_LONG_PHASES), None)


@dataclass
class PhaseSpan:
    phase: str  # a contract phase, or "restart" (process start to first step after a resume)
    begin_ts: float
    end_ts: float | None = None

    @property
    def duration_s(self) -> float | None:
        return None if self.end_ts is None else self.end_ts - self.begin_ts


@dataclass
class Restart:
    restart: int
    ts: float
    last_step_before: int | None
    from_step: int | None = None
    checkpoint_load_s: float | None = None
    first_step_ts: float | None = None


@dataclass(frozen=True)
class Straggler:
    """The rank that waits least for its peers, and by how much less than the others' median."""

    rank: int
    skew_s: float
    wait_s_by_rank: dict[int, float]  # median wait per step
    slow: bool  # skew large enough (relative to the step time) to call the job slow


@dataclass(frozen=True)
class JobDiagnosis:
    """The on-call answer: a verdict, a one-line reason, and the ranks to look at (first first)."""

    verdict: Verdict
    reason: str
    suspects: tuple[Suspect, ...] = ()
    idle_s: float | None = None  # seconds since the last progress (late, stalled)
    threshold_s: float | None = None  # the threshold that was crossed (late, stalled)


class JobLedger:
    """Folds job events for one run; memory is bounded whatever the run length."""

    def __init__(
        self,
        dead_after_s: float = DEAD_AFTER_S,
        late_after_s: float = LATE_AFTER_S,
        stall_after_s: float = STALL_AFTER_S,
        late_factor: float = LATE_FACTOR,
        stall_factor: float = STALL_FACTOR,
        straggler_min_skew_fraction: float = STRAGGLER_MIN_SKEW_FRACTION,
        max_ranks: int = MAX_RANKS,
    ):
        self.dead_after_s = dead_after_s
        self.late_after_s = late_after_s
        self.stall_after_s = stall_after_s
        self.late_factor = late_factor
        self.stall_factor = stall_factor
        self.straggler_min_skew_fraction = straggler_min_skew_fraction
        self.max_ranks = max_ranks
        self.run: str | None = None
        self.run_start: RunStart | None = None  # from the lowest rank that announced itself
        self.ranks: dict[int, RankState] = {}
        self.timeline: deque[PhaseSpan] = deque(maxlen=TIMELINE_SPANS)
        self.restarts: deque[Restart] = deque(maxlen=RESTARTS_KEPT)
        self.failures: deque[dict] = deque(maxlen=FAILURES_KEPT)
        self.warnings = 0
        self.warning_ranks: set[int] = set()
        self.latest_warnings: deque[WarningEntry] = deque(maxlen=WARNINGS_KEPT)
        self.stalls: deque[Stall] = deque(maxlen=STALLS_KEPT)
        self.checkpoint_saves_s: deque[float] = deque(maxlen=SAVES_KEPT)
        self.checkpoint_saves = 0
        self.background_saves = 0
        self.cold_compile_s = 0.0
        self.cold_compiles = 0
        self.compile_cache_hits = 0
        self.collective_latency_s: dict[str, deque[float]] = {}
        self.collective_count: dict[str, int] = {}
        self.collective_bytes: dict[str, int] = {}
        self.last_progress_ts: float | None = None
        self.first_event_ts: float | None = None
        self.last_event_ts: float | None = None
        self.first_received_s: float | None = None
        self.last_received_s: float | None = None
        # Wrong-typed optional fields dropped by the decoder ("step.seq_len" -> count).
        self.dropped_fields: Counter[str] = Counter()
        # Passive job logs: source id -> the log profile reading it (None: none detected yet).
        self.log_profiles: dict[str, str | None] = {}
        self._timeline_rank: int | None = None

    # ---- ingest ------------------------------------------------------------------------------

    def ingest(self, event: JobEvent, now_s: float) -> None:
        """Fold one event received at `now_s`; raise `JobEventRejected` for an event of another
        run, stamped too far from its receive time, or beyond a bound (nothing is folded then)."""
        self._check(event, now_s)
        if self.run is None:
            self.run = event.run
        self.first_received_s = now_s if self.first_received_s is None else self.first_received_s
        self.last_received_s = now_s
        self.first_event_ts = event.ts if self.first_event_ts is None else min(self.first_event_ts, event.ts)
        self.last_event_ts = event.ts if self.last_event_ts is None else max(self.last_event_ts, event.ts)
        if self._timeline_rank is None or event.rank < self._timeline_rank:
            self._timeline_rank = event.rank
        rank = self.ranks.get(event.rank)
        if rank is None:
            rank = self.ranks[event.rank] = RankState(event.rank)
        rank.last_seen_ts = event.ts if rank.last_seen_ts is None else max(rank.last_seen_ts, event.ts)
        on_timeline = event.rank == self._timeline_rank
        if isinstance(event, Step):
            self._step(rank, event, on_timeline)
        elif isinstance(event, Collective):
            self._collective(rank, event)
        elif isinstance(event, Heartbeat):
            rank.has_heartbeats = True
            rank.heartbeat_ts, rank.heartbeat_step = event.ts, event.step
            rank.region, rank.region_since = event.region, min(event.region_since, event.ts)
        elif isinstance(event, RunStart):
            self._run_start(rank, event, on_timeline)
        elif isinstance(event, Phase):
            self._phase(rank, event, on_timeline)
        elif isinstance(event, Checkpoint):
            self._checkpoint(rank, event, on_timeline)
        elif isinstance(event, Error) and event.severity == "warning":
            rank.warnings += 1
            rank.last_warning = event.message
            self.warnings += 1
            self.warning_ranks.add(event.rank)
            self.latest_warnings.append(WarningEntry(rank=event.rank, ts=event.ts, source=event.source,
                                                     message=event.message))
        elif isinstance(event, Error):
            failed_ts = event.failed_ts if event.failed_ts is not None and event.failed_ts <= event.ts else event.ts
            rank.error = rank.error or event.message
            self._fail(rank, "failed", failed_ts)
            self.failures.append({"rank": event.rank, "ts": failed_ts, "kind": "error", "error": event.message,
                                  "run_end": None, "source": event.source, "exit_code": event.exit_code,
                                  "signal": event.signal, "restart": rank.restart})
        elif isinstance(event, RunEnd):
            if event.status == "success":
                rank.status = "finished"
            else:
                self._fail(rank, event.status, event.ts)
                self.failures.append({"rank": event.rank, "ts": event.ts, "kind": "run_end", "error": None,
                                      "run_end": event.status, "source": None, "exit_code": None,
                                      "signal": None, "restart": rank.restart})

    def _check(self, event: JobEvent, now_s: float) -> None:
        if self.run is not None and event.run != self.run:
            raise JobEventRejected("job-foreign-run", f"event of run {event.run!r} in a ledger of run {self.run!r}")
        if event.ts > now_s + MAX_TS_AHEAD_S:
            raise JobEventRejected("job-ts-ahead", f"ts {event.ts} is {event.ts - now_s:.0f} s after its receive time")
        if event.rank not in self.ranks:
            world = self.run_start.world_size if self.run_start is not None else None
            if world is not None and event.rank >= world:
                raise JobEventRejected("job-rank-range", f"rank {event.rank} >= world size {world}")
            if len(self.ranks) >= self.max_ranks:
                raise JobEventRejected("job-ranks-bound", f"more than {self.max_ranks} ranks")
        if (isinstance(event, Collective) and event.op not in self.collective_count
                and len(self.collective_count) >= MAX_COLLECTIVE_OPS):
            raise JobEventRejected("job-ops-bound", f"more than {MAX_COLLECTIVE_OPS} collective op names")

    @staticmethod
    def _fail(rank: RankState, status: str, ts: float) -> None:
        if rank.failed_ts is None:
            rank.status, rank.failed_ts = status, ts

    def _run_start(self, rank: RankState, event: RunStart, on_timeline: bool) -> None:
        self._note_progress(event.ts)
        if self.run_start is None or event.rank <= self.run_start.rank:
            self.run_start = event
        rank.host, rank.chip, rank.core = event.host, event.chip, event.core
        rank.local_rank, rank.pid, rank.restart = event.local_rank, event.pid, event.restart
        # A new process for this rank: the previous process's phases, steps, waits, position and
        # failure are history (kept in the timeline and failures), not its current state.
        rank.status, rank.error, rank.failed_ts = "running", None, None
        rank.warnings, rank.last_warning = 0, None
        rank.open_phases.clear()
        rank.open_checkpoint = None
        rank.paused_since_step = rank.saw_steady = False
        rank.steps_before_steady = rank.open_steps = 0
        rank.first_step_times_s.clear()
        rank.steps.clear()
        rank.wait_per_step.clear()
        rank.heartbeat_ts = rank.heartbeat_step = rank.region = rank.region_since = None
        if on_timeline and event.restart > 0:
            self.restarts.append(Restart(event.restart, event.ts, rank.last_step))
            self.timeline.append(PhaseSpan("restart", event.ts))

    def _phase(self, rank: RankState, event: Phase, on_timeline: bool) -> None:
        if event.phase == "compile" and event.cache == "hit":
            # A persistent-cache hit is counted, never timed: passive logs show only its end, and
            # it must not close a cold compile that is still running.
            if on_timeline and event.state == "end":
                self.compile_cache_hits += 1
            return
        if event.state == "begin":
            rank.open_phases[event.phase] = event.ts
            if event.phase == "steady":
                rank.saw_steady = True
            if event.phase == "checkpoint":
                rank.paused_since_step = True
            if on_timeline:
                self.timeline.append(PhaseSpan(event.phase, event.ts))
            return
        self._note_progress(event.ts)
        began_ts = rank.open_phases.pop(event.phase, None)
        if not on_timeline:
            return
        span = self._open_span(event.phase)
        if span is not None:
            span.end_ts = event.ts
        if event.phase == "compile" and began_ts is not None:
            self.cold_compiles += 1
            self.cold_compile_s += event.ts - began_ts

    def _step(self, rank: RankState, event: Step, on_timeline: bool) -> None:
        self._record_stall_if_gap(event.ts)
        self._note_progress(event.ts)
        rank.last_step, rank.last_step_ts = event.step, event.ts
        if event.step_time_s is not None:
            kind = self._step_kind(rank, event)
            rank.steps.append(StepSample(event.step, event.ts, event.step_time_s, event.tokens, kind, rank.open_steps,
                                          event.tokens_per_s_per_device))
            if not rank.saw_steady:
                rank.steps_before_steady += 1
            if kind in ("open", "late"):
                if len(rank.first_step_times_s) < WARMUP_PROBE_STEPS:
                    rank.first_step_times_s.append(event.step_time_s)
                rank.open_steps += 1
        rank.paused_since_step = False
        if on_timeline:
            span = self._open_span("restart")
            if span is not None:
                span.end_ts = event.ts
                self.restarts[-1].first_step_ts = event.ts

    def _step_kind(self, rank: RankState, event: Step) -> StepKind:
        others = [phase for phase in rank.open_phases if phase != "steady"]
        if others or rank.paused_since_step or (rank.open_checkpoint is not None and rank.open_checkpoint.blocking is not False):
            return "other"
        if event.step_time_s > self.late_after_s:
            # A step longer than the floor: its time holds a stall if it is late by this rank's own rule.
            if event.step_time_s > self._late_threshold_s(self._recent_step_times_s(rank)):
                return "late"
        return "steady" if "steady" in rank.open_phases else "open"

    def _collective(self, rank: RankState, event: Collective) -> None:
        latencies = self.collective_latency_s.get(event.op)
        if latencies is None:
            latencies = self.collective_latency_s[event.op] = deque(maxlen=COLLECTIVE_WINDOW)
        latencies.append(event.latency_s)
        self.collective_count[event.op] = self.collective_count.get(event.op, 0) + 1
        self.collective_bytes[event.op] = event.bytes
        if any(phase != "steady" for phase in rank.open_phases):
            return  # start-up and checkpoint waits say nothing about a straggler
        if rank.wait_per_step and rank.wait_per_step[-1][0] == event.step:
            rank.wait_per_step[-1][1] += event.wait_s
        else:
            rank.wait_per_step.append([event.step, event.wait_s])

    def _checkpoint(self, rank: RankState, event: Checkpoint, on_timeline: bool) -> None:
        if event.state == "begin":
            rank.open_checkpoint = event  # a newer begin supersedes an interrupted one
            if event.blocking is not False:
                rank.paused_since_step = True
            return
        began = rank.open_checkpoint
        rank.open_checkpoint = None
        blocking = event.blocking is not False and (began is None or began.blocking is not False)
        if blocking:
            self._note_progress(event.ts)  # a background save's end says nothing about steps
        if not on_timeline or began is None or began.action != event.action:
            return
        duration_s = event.ts - began.ts
        if event.action == "save":
            self.checkpoint_saves += 1
            self.background_saves += not blocking
            self.checkpoint_saves_s.append(duration_s)
        elif self.restarts and self.restarts[-1].first_step_ts is None:
            self.restarts[-1].from_step = event.step
            self.restarts[-1].checkpoint_load_s = duration_s

    def _open_span(self, phase: str) -> PhaseSpan | None:
        for span in reversed(self.timeline):
            if span.phase == phase and span.end_ts is None:
                return span
        return None

    def _note_progress(self, ts: float) -> None:
        self.last_progress_ts = ts if self.last_progress_ts is None else max(self.last_progress_ts, ts)

    def _record_stall_if_gap(self, ts: float) -> None:
        """A step that ends a stall: keep the episode for the receipt (judged at the step's ts)."""
        if self.last_progress_ts is None or ts - self.last_progress_ts <= self.stall_after_s:
            return  # the common case, decided without the full rule (this runs for every step event)
        idle_s = ts - self.last_progress_ts
        threshold_s = self.thresholds(ts).stall_s
        if idle_s <= threshold_s or self._blocking_pause(ts) is not None or self.dead_ranks(ts):
            return
        self.stalls.append(Stall(begin_ts=ts - idle_s, end_ts=ts, duration_s=idle_s, threshold_s=threshold_s,
                                 suspects=list(self._position_suspects(ts))))

    # ---- queries -----------------------------------------------------------------------------

    def reference_rank(self, now_s: float) -> int | None:
        """Lowest rank present (not dead) that has step times; throughput comes from it alone."""
        with_steps = [rank for rank in sorted(self.ranks) if self.ranks[rank].steps]
        dead = set(self.dead_ranks(now_s))
        present = [rank for rank in with_steps if rank not in dead]
        return (present or with_steps or [None])[0]

    @staticmethod
    def _warmup_steps(rank: RankState) -> int:
        """Leading steps of the rank's process that are outliers against the median of the steps
        after them (inferred warm-up), or the steps before its explicit steady phase."""
        if rank.saw_steady:
            return rank.steps_before_steady
        times = rank.first_step_times_s
        warmup = 0
        while len(times) - warmup - 1 >= WARMUP_MIN_AFTER:
            if times[warmup] <= WARMUP_OUTLIER_FACTOR * median(times[warmup + 1:]):
                break
            warmup += 1
        return warmup

    def _steady_samples(self, rank: RankState) -> list[StepSample]:
        """The rank's recent steady steps (see the module's steady-state rule)."""
        if rank.saw_steady:
            return [s for s in rank.steps if s.kind == "steady"]
        warmup = self._warmup_steps(rank)
        return [s for s in rank.steps if s.kind == "open" and s.open_index >= warmup]

    def _recent_step_times_s(self, rank: RankState) -> list[float]:
        steady = self._steady_samples(rank)[-RECENT_STEPS:]
        return [s.step_time_s for s in steady] or [s.step_time_s for s in list(rank.steps)[-RECENT_STEPS:]]

    def step_times_s(self, now_s: float) -> list[float]:
        """Recent steady step times of the reference rank (all recent steps if none is steady)."""
        rank = self.reference_rank(now_s)
        return [] if rank is None else self._recent_step_times_s(self.ranks[rank])

    def _late_threshold_s(self, step_times_s: list[float]) -> float:
        p99 = percentile(step_times_s, 99)
        return max(self.late_factor * p99, self.late_after_s) if p99 is not None else self.late_after_s

    def thresholds(self, now_s: float) -> Thresholds:
        """The late and stall thresholds at `now_s`, from the reference rank's recent steady steps."""
        step_times = self.step_times_s(now_s)
        stall_s = max(self.stall_factor * median(step_times), self.stall_after_s) if step_times else self.stall_after_s
        return Thresholds(late_s=self._late_threshold_s(step_times), stall_s=stall_s, dead_after_s=self.dead_after_s,
                          late_after_s=self.late_after_s, stall_after_s=self.stall_after_s)

    def throughput(self, now_s: float) -> Throughput | None:
        """Steady-state figures of the reference rank, with the steps and time span they cover."""
        rank_id = self.reference_rank(now_s)
        if rank_id is None:
            return None
        rank = self.ranks[rank_id]
        samples = self._steady_samples(rank)
        if not samples:
            return None
        steady_s = sum(s.step_time_s for s in samples)
        with_tokens = [s for s in samples if s.tokens is not None]
        token_s = sum(s.step_time_s for s in with_tokens)
        return Throughput(
            tokens_per_s=sum(s.tokens for s in with_tokens) / token_s if with_tokens and token_s > 0 else None,
            from_rank=rank_id,
            boundary="explicit" if rank.saw_steady else "inferred",
            warmup_steps=self._warmup_steps(rank),
            steps_in_window=len(samples),
            first_step=samples[0].step,
            last_step=samples[-1].step,
            begin_ts=samples[0].ts - samples[0].step_time_s,
            end_ts=samples[-1].ts,
            steady_s=steady_s,
            excluded_steps=len(rank.steps) - len(samples),
            last_step_age_s=max(0.0, now_s - samples[-1].ts),
            step_time_s=_percentiles(s.step_time_s for s in samples[-RECENT_STEPS * 4:]),
            tokens_per_s_per_device=median(per_device) if (per_device := [
                s.tokens_per_s_per_device for s in samples if s.tokens_per_s_per_device is not None]) else None,
        )

    def throughput_tokens_per_s(self, now_s: float) -> float | None:
        """Steady-state tokens/s of the whole job, from the reference rank's steady steps."""
        figures = self.throughput(now_s)
        return None if figures is None else figures.tokens_per_s

    def straggler(self, now_s: float) -> Straggler | None:
        """The rank (not dead) that waits least for its peers; None without two ranks of wait data."""
        dead = set(self.dead_ranks(now_s))
        wait_s = {
            rank.rank: median(wait for _, wait in rank.wait_per_step)
            for rank in self.ranks.values()
            if rank.rank not in dead and len(rank.wait_per_step) >= MIN_WAIT_STEPS
        }
        if len(wait_s) < 2:
            return None
        least = min(wait_s, key=lambda rank: (wait_s[rank], rank))
        skew_s = median(wait for rank, wait in wait_s.items() if rank != least) - wait_s[least]
        step_times = self.step_times_s(now_s)
        slow = bool(step_times) and skew_s >= self.straggler_min_skew_fraction * median(step_times)
        return Straggler(least, skew_s, wait_s, slow)

    # ---- accounting and blame ----------------------------------------------------------------

    def dead_ranks(self, now_s: float) -> list[int]:
        """Running ranks of the in-job emitter that are gone: heartbeating ranks silent for more
        than `dead_after_s`, or ranks that announced themselves (`run_start`, heartbeats) and are
        silent since before their peers' first failure while every peer has ended. The second
        rule needs no heartbeat: a rank killed before its first one is still the silent one."""
        silent = [
            rank for rank in self.ranks.values()
            if rank.status == "running" and (rank.has_heartbeats or rank.pid is not None)
            and rank.last_seen_ts is not None
        ]
        dead = {rank.rank for rank in silent if rank.has_heartbeats and now_s - rank.last_seen_ts > self.dead_after_s}
        reported = [rank.failed_ts for rank in self.ranks.values() if rank.failed_ts is not None]
        if reported:
            first_ts = min(reported)
            before = {rank.rank for rank in silent if rank.last_seen_ts < first_ts}
            others_ended = all(rank.status != "running" for rank in self.ranks.values() if rank.rank not in before)
            if before and others_ended:
                dead |= before
        return sorted(dead)

    def rank_counts(self, now_s: float) -> RankCounts:
        """running + finished + failed + dead + unknown = world size (dead ranks are not running)."""
        dead = set(self.dead_ranks(now_s))
        statuses = Counter("dead" if rank.rank in dead else rank.status for rank in self.ranks.values())
        world = self.run_start.world_size if self.run_start is not None else None
        return RankCounts(
            seen=len(self.ranks), world_size=world,
            hosts=len({rank.host for rank in self.ranks.values() if rank.host}),
            running=statuses["running"], finished=statuses["finished"],
            failed=statuses["failed"] + statuses["aborted"], dead=statuses["dead"],
            unknown=max(0, world - len(self.ranks)) if world is not None else 0,
        )

    def _failure_rows(self, now_s: float) -> list[dict]:
        """Failure reports kept, plus ranks gone without a word, in time order, each with its
        `role`: in each process generation (`restart`) the cause is "first", the rest follow."""
        rows = [dict(row) for row in self.failures]
        if rows:
            for rank_id in self.dead_ranks(now_s):
                rank = self.ranks[rank_id]
                rows.append({"rank": rank_id, "ts": rank.last_seen_ts, "kind": "silent", "error": None,
                             "run_end": None, "source": None, "exit_code": None, "signal": None,
                             "restart": rank.restart})
        first: dict[int, dict] = {}
        for row in rows:
            best = first.get(row["restart"])
            if best is None or _blame_key(row) < _blame_key(best):
                first[row["restart"]] = row
        for row in rows:
            row["role"] = "first" if first[row["restart"]] is row else "consequence"
        return sorted(rows, key=lambda row: (row["ts"], row["rank"]))

    def failure_reports(self, now_s: float) -> list[Failure]:
        """Every failure kept (and ranks gone without a word), in time order, cause first in role."""
        return [Failure(**{k: v for k, v in row.items() if k != "restart"}) for row in self._failure_rows(now_s)]

    def _any_failed(self) -> bool:
        return any(rank.status in ("failed", "aborted") for rank in self.ranks.values())

    # ---- diagnosis ---------------------------------------------------------------------------

    def diagnose(self, now_s: float, chip_util_pct: ChipUtilisation | None = None) -> JobDiagnosis:
        """Verdict for on-call at `now_s`, with the ranks to look at (and their chips' utilisation)."""
        if not self.ranks:
            return JobDiagnosis("no-data", "no job events yet")
        dead = self.dead_ranks(now_s)
        if self._any_failed():
            return self._failed(now_s, chip_util_pct)
        running = [rank for rank in self.ranks.values() if rank.status == "running" and rank.rank not in dead]
        if not running and not dead:
            return JobDiagnosis("finished", f"all {len(self.ranks)} ranks ended with success")
        if dead:
            suspects = tuple(
                self._suspect(self.ranks[rank], f"no event for {now_s - self.ranks[rank].last_seen_ts:.0f} s", now_s)
                for rank in dead
            )
            return JobDiagnosis("dead", f"{len(dead)} rank(s) silent for > {self.dead_after_s:.0f} s: "
                                f"{_named(suspects)}", self._with_device_evidence(suspects, chip_util_pct))

        pause = self._blocking_pause(now_s)
        if pause is not None:
            return pause

        idle_s = None if self.last_progress_ts is None else now_s - self.last_progress_ts
        if idle_s is not None and idle_s > min(self.late_after_s, self.stall_after_s):
            thresholds = self.thresholds(now_s)
            for verdict, threshold_s in (("stalled", thresholds.stall_s), ("late", thresholds.late_s)):
                if idle_s > threshold_s:
                    suspects = self._with_device_evidence(self._position_suspects(now_s), chip_util_pct)
                    lead = f"{_named(suspects)}; " if suspects else ""
                    reason = (f"{lead}no progress for {idle_s:.0f} s ({verdict} after {threshold_s:.0f} s); "
                              f"{self._majority_text(now_s)}")
                    return JobDiagnosis(verdict, reason, suspects, idle_s, threshold_s)

        starting = [rank for rank in running if any(phase in STARTUP_PHASES for phase in rank.open_phases)]
        if starting:
            phases = sorted({phase for rank in starting for phase in rank.open_phases if phase in STARTUP_PHASES})
            return JobDiagnosis("compiling", f"starting up: {', '.join(phases)} open on {len(starting)} rank(s)")

        straggler = self.straggler(now_s)
        if straggler is not None and straggler.slow:
            suspect = self._suspect(self.ranks[straggler.rank], f"waits {straggler.skew_s * 1e3:.0f} ms/step less than peers", now_s)
            suspects = self._with_device_evidence((suspect,), chip_util_pct)
            return JobDiagnosis("slow", f"straggler {_named(suspects)}", suspects)
        return JobDiagnosis("steady", f"{len(running)} rank(s) stepping")

    def _failed(self, now_s: float, chip_util_pct: ChipUtilisation | None) -> JobDiagnosis:
        """Name the rank that failed first in this generation of processes, then the others."""
        generation = max(rank.restart for rank in self.ranks.values() if rank.status in ("failed", "aborted"))
        rows = [row for row in self._failure_rows(now_s) if row["restart"] == generation]
        first = next(row for row in rows if row["role"] == "first")
        order = [first["rank"]] + [rank for rank in dict.fromkeys(row["rank"] for row in rows) if rank != first["rank"]]
        errors = {row["rank"]: row["error"] for row in reversed(rows) if row["error"]}
        words = _failure_words(first)
        suspects = tuple(
            self._suspect(self.ranks[rank], words if rank == first["rank"] else "failed after the first",
                          now_s, errors.get(rank))
            for rank in order
        )
        later = f"; {len(order) - 1} later failure(s) listed as consequences" if len(order) > 1 else ""
        reason = f"first failure {_named(suspects[:1])}: {words}{later}"
        return JobDiagnosis("failed", reason, self._with_device_evidence(suspects, chip_util_pct))

    def _blocking_pause(self, now_s: float) -> JobDiagnosis | None:
        dead = set(self.dead_ranks(now_s))
        running = [rank for rank in self.ranks.values() if rank.status == "running" and rank.rank not in dead]
        pauses = [found for rank in running if (found := rank.blocking_pause())]
        if not pauses:
            return None
        checkpointing = [found for found in pauses if found[0] == "checkpoint"]
        shown = checkpointing or pauses
        phases = ", ".join(sorted({phase for phase, _ in shown}))
        open_s = now_s - min(ts for _, ts in shown)
        verdict = "checkpointing" if checkpointing else "compiling"
        return JobDiagnosis(verdict, f"{phases} open on {len(shown)} rank(s) for {open_s:.0f} s")

    def _positions(self, now_s: float) -> dict[tuple[int, str], list[int]]:
        dead = set(self.dead_ranks(now_s))
        positions: dict[tuple[int, str], list[int]] = {}
        for rank in sorted(self.ranks.values(), key=lambda rank: rank.rank):
            if rank.status == "running" and rank.has_heartbeats and rank.rank not in dead:
                positions.setdefault((rank.heartbeat_step, rank.region), []).append(rank.rank)
        return positions

    @staticmethod
    def _majority(positions: dict[tuple[int, str], list[int]]) -> tuple[int, str] | None:
        if not positions:
            return None
        return max(
            positions,
            key=lambda position: (
                len(positions[position]),
                (position[1] or "").startswith(COLLECTIVE_REGION_PREFIX),  # a heartbeat may name no region
                position[0],
            ),
        )

    def _position_suspects(self, now_s: float) -> tuple[Suspect, ...]:
        positions = self._positions(now_s)
        majority = self._majority(positions)
        if majority is None or len(positions) == 1:
            return ()
        step, region = majority
        why = f"differs from the majority ({len(positions[majority])} rank(s) in {region} at step {step})"
        return tuple(
            self._suspect(self.ranks[rank], why, now_s)
            for position, ranks in sorted(positions.items(), key=lambda item: item[1][0])
            if position != majority
            for rank in ranks
        )

    def _majority_text(self, now_s: float) -> str:
        positions = self._positions(now_s)
        if not positions:
            return "no heartbeats (passive source): position of ranks unknown"
        ordered = sorted(positions.items(), key=lambda item: -len(item[1]))
        parts = [f"{len(ranks)} rank(s) in {region} at step {step}" for (step, region), ranks in ordered[:POSITIONS_SHOWN]]
        if len(ordered) > POSITIONS_SHOWN:
            parts.append(f"{len(ordered) - POSITIONS_SHOWN} more position(s)")
        return "; ".join(parts)

    def _suspect(self, rank: RankState, why: str, now_s: float, error: str | None = None) -> Suspect:
        return Suspect(
            rank=rank.rank, host=rank.host, chip=rank.chip, core=rank.core, region=rank.region,
            step=rank.heartbeat_step if rank.heartbeat_step is not None else rank.last_step,
            evidence=SuspectEvidence(
                why=why,
                heartbeat_age_s=None if rank.heartbeat_ts is None else max(0.0, now_s - rank.heartbeat_ts),
                region_age_s=None if rank.region_since is None else max(0.0, now_s - rank.region_since),
                chip_util_pct=None, peer_chip_util_median_pct=None,
                error=error if error is not None else rank.error,
                warnings=rank.warnings, last_warning=rank.last_warning,
            ),
        )

    def _with_device_evidence(
        self, suspects: tuple[Suspect, ...], chip_util_pct: ChipUtilisation | None
    ) -> tuple[Suspect, ...]:
        """Add each suspect's chip utilisation and the median of the other chips in the job."""
        if chip_util_pct is None or not suspects:
            return suspects
        chips = {(rank.host, rank.chip) for rank in self.ranks.values() if rank.host is not None and rank.chip is not None}
        utilisation = {chip: chip_util_pct(*chip) for chip in chips}
        with_evidence = []
        for suspect in suspects:
            if suspect.host is None or suspect.chip is None:
                with_evidence.append(suspect)
                continue
            own = (suspect.host, suspect.chip)
            peers = [value for chip, value in utilisation.items() if chip != own and value is not None]
            evidence = suspect.evidence.model_copy(update={
                "chip_util_pct": utilisation.get(own),
                "peer_chip_util_median_pct": median(peers) if peers else None,
            })
            with_evidence.append(suspect.model_copy(update={"evidence": evidence}))
        return tuple(with_evidence)

    # ---- the receipt's job section -----------------------------------------------------------

    def summary(self, now_s: float, chip_util_pct: ChipUtilisation | None = None) -> JobSection:
        """The job section judged at `now_s` (typed: see ledger/job_summary.py)."""
        info = self.run_start
        diagnosis = self.diagnose(now_s, chip_util_pct)
        straggler = self.straggler(now_s)
        stalls = list(self.stalls)
        if diagnosis.verdict == "stalled":
            stalls.append(Stall(begin_ts=now_s - diagnosis.idle_s, end_ts=None, duration_s=diagnosis.idle_s,
                                threshold_s=diagnosis.threshold_s, suspects=list(diagnosis.suspects)))
        return JobSection(
            run=self.run,
            verdict=diagnosis.verdict,
            reason=diagnosis.reason,
            suspects=list(diagnosis.suspects),
            ranks=self.rank_counts(now_s),
            thresholds=self.thresholds(now_s),
            backend=info.backend if info else None,
            model=info.model if info else None,
            precision=info.precision if info else None,
            global_batch=info.global_batch if info else None,
            micro_batch=info.micro_batch if info else None,
            seq_len=info.seq_len if info else None,
            parallel=info.parallel if info else None,
            lnc=info.lnc if info else None,
            versions=dict(info.versions) if info else None,
            cold_compile_s=self.cold_compile_s if self.cold_compiles else None,
            cold_compiles=self.cold_compiles,
            compile_cache_hits=self.compile_cache_hits,
            throughput=self.throughput(now_s),
            checkpoint_saves=CheckpointSaves(count=self.checkpoint_saves, background=self.background_saves,
                                             save_s=_percentiles(self.checkpoint_saves_s)),
            restarts=[
                RestartEntry(
                    restart=r.restart, from_step=r.from_step,
                    steps_redone=None if r.from_step is None or r.last_step_before is None
                    else max(0, r.last_step_before - r.from_step),
                    checkpoint_load_s=r.checkpoint_load_s,
                    restart_to_first_step_s=None if r.first_step_ts is None else r.first_step_ts - r.ts,
                )
                for r in self.restarts
            ],
            collectives={
                op: CollectiveEntry(count=self.collective_count[op], bytes=self.collective_bytes[op],
                                    latency_s=_percentiles(latencies))
                for op, latencies in sorted(self.collective_latency_s.items())
            } or "unavailable: needs the in-job emitter",
            wait_skew=None if straggler is None else WaitSkew(
                least_waiting_rank=straggler.rank, skew_s=straggler.skew_s, slow=straggler.slow,
                wait_s_per_step_by_rank={str(rank): wait for rank, wait in sorted(straggler.wait_s_by_rank.items())},
            ),
            failures=self.failure_reports(now_s),
            warnings=Warnings(count=self.warnings, ranks=len(self.warning_ranks),
                              latest=list(self.latest_warnings)),
            stalls=stalls,
            phases=[PhaseEntry(phase=span.phase, begin_ts=span.begin_ts, end_ts=span.end_ts, duration_s=span.duration_s)
                    for span in self.timeline],
            observed=Observed(first_event_ts=self.first_event_ts, last_event_ts=self.last_event_ts,
                              first_received_s=self.first_received_s, last_received_s=self.last_received_s),
            dropped_fields=dict(sorted(self.dropped_fields.items())),
            log_profiles=dict(sorted(self.log_profiles.items())),
        )


def _blame_key(row: dict) -> tuple:
    """Which failure is the cause: a rank stopped from outside (ended aborted, or reported by its
    launcher as ended by SIGTERM: torchrun's agent stops the surviving workers that way once one
    failed) only when nothing else failed, then the earliest in time."""
    stopped = row["run_end"] == "aborted" or (row["source"] == "launcher" and row["signal"] == "SIGTERM")
    return (stopped, row["ts"], row["rank"])


def _failure_words(row: dict) -> str:
    if row["kind"] == "silent":
        return "went silent without an error or run_end (killed?)"
    if row["kind"] == "error":
        how = ", ".join(part for part in (row["signal"], None if row["exit_code"] is None else f"exit {row['exit_code']}") if part)
        return f"error: {row['error']}" + (f" ({how})" if how else "")
    return f"run ended {row['run_end']}"


def _named(suspects: tuple[Suspect, ...]) -> str:
    """"rank 437 (host trn3-07 chip 3)" for the first few suspects."""
    parts = []
    for suspect in suspects[:SUSPECTS_NAMED]:
        chip = "?" if suspect.chip is None else suspect.chip
        parts.append(f"rank {suspect.rank} (host {suspect.host or '?'} chip {chip})")
    if len(suspects) > SUSPECTS_NAMED:
        parts.append(f"{len(suspects) - SUSPECTS_NAMED} more")
    return ", ".join(parts)
