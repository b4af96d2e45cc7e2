"""Job ledger: folds `trnwatch.job/1` events into per-rank state, run figures and a verdict.

Pure logic: no I/O, no clock. Every method that needs "now" takes `now_s` (unix seconds).
Ages are measured against the events' own `ts` (the job hosts' clocks), so a monitor opened late
judges history correctly; this assumes job hosts and monitor agree on time (chrony/NTP), as any
cluster does. An event stamped more than MAX_TS_AHEAD_S after it was received (a millisecond
`ts`, a wrong clock) is rejected, so it cannot keep a dead rank alive. Old stamps are fine: a
monitor opened late, or a log read after the fact, folds history; but one more than MAX_TS_BEHIND_S (10 years)
before its receive time is rejected too (`job-ts-behind`: a `ts` of 0 would make the receipt's window
decades long), and a `failed_ts` or `region_since` that much before the event's `ts` is taken as that `ts`.

Rules (thresholds from the one `Rules` object, ledger/rules.py; its defaults here):

- progress: a step, a phase end, a blocking checkpoint's end, a process start. An open background
  checkpoint (`blocking: false`) is not progress and explains no pause: steps go on during it.
- late: no progress for longer than max(late_factor x p99 of recent steady step times,
  late_after_s) = max(3 x p99, 5 s). Suspects as for stalled.
- stalled: no progress for longer than max(stall_factor x median recent steady step time,
  stall_after_s) = max(5 x median, 30 s) while every running rank's heartbeats are fresh.
  Suspects: each live rank's position is (heartbeat step, heartbeat region); the majority position
  is the most common one, ties going to a position inside a collective (those ranks are waiting
  for peers) and then to the higher step; ranks at any other position are the suspects.
- pauses that are not stalls: an open compile phase ("compiling"), an open init phase or the
  start-up of a job none of whose ranks has stepped yet ("starting"), a blocking checkpoint (a
  save without `blocking: false`, a `checkpoint` phase, or a rank whose heartbeat region is
  `checkpoint`: "checkpointing"), reported
  with their age, while within their bound and taken by the job together; past its bound a pause
  is a stall caused by it, and a pause other ranks left explains nothing (ledger/job_pauses.py).
- no progress ever (no step, no phase end): idle is counted from the job's first event, and the
  verdict is never "steady" before a first step.
- dead: a running rank that has sent heartbeats sends nothing for more than `dead_after_s`
  (`Rules.dead_after_s`, 10 s: more than 3 missed heartbeats at the emitter's default 2 s interval), or
  went silent without a word (no error, no run_end) before the first failure of its peers while
  all of them have ended (a SIGKILL, the OOM killer). Ranks seen only through passive sources (no
  heartbeats) are never declared dead. A dead rank is not running.
- warnings: an error with severity `warning` (a non-fatal runtime line such as a retried
  collective timeout) is counted on its rank and kept as evidence; it never fails the rank.
- failed: a rank errored (fatally) or ended failed/aborted since its latest start. The first failure in
  time is the cause: a silent rank failed at its last event, a report at its `failed_ts` (else
  its `ts`); a rank that ended `aborted` was stopped from outside (its launcher's SIGTERM) and is
  the cause only when nothing else is; a rank that timed out waiting in a collective is the cause
  only when no other failure is, and when every failure of an attempt is such a wait, a running
  rank silent since the first of them (no word of its own: a passive log under mpirun or srun) is
  the cause (`job_blame.waited_for`). Every later failure is listed as a consequence.
- slow (straggler): per rank, the median over its last WAIT_WINDOW_STEPS steady steps of the time
  per step spent waiting for peers. The rank that waits least is the straggler; it is reported as
  slow when the others' median wait exceeds its wait by at least `Rules.straggler_min_skew_fraction`
  (20 %) of the median step time.
- steady state: from an explicit `steady` phase when the rank emits one (steps between compile
  end and steady begin are warm-up); otherwise after the warm-up inferred from step times: the
  leading steps of the rank's process that are outliers (more than WARMUP_OUTLIER_FACTOR x) against
  the median of the steps after them. Steady steps exclude steps taken while another phase or a
  blocking checkpoint was open, and steps that ended a late gap, so throughput (tokens / summed
  step time of those steps, lowest rank present, so the job's tokens count once) is never
  averaged over stalled, checkpoint or restart time.
- start-up waits: a job none of whose ranks has stepped, with a rank in a collective or past its
  compiles, longer than the stall threshold while no compile is open, is stalled (cause bootstrap;
  ledger/job_pauses.py, `job_verdicts.start_up_stuck`).
- verdict precedence: no-data; failed; finished; dead; stalled (a pause past its bound); stalled
  (a start-up wait past the stall threshold); checkpointing / compiling / starting (pauses within
  their bounds, taken together); stalled; late (with the ranks of a one-sided pause first among
  the suspects); compiling / starting (a one-sided pause not yet late, warmup still open, or no
  step yet); slow; steady.
- cold compile: time in compile phases not marked as persistent-cache hits (lowest rank).
- restart from checkpoint: from the lowest rank's run_start with restart > 0 to its first step,
  with the checkpoint load time and the steps redone.

Memory: per-rank and per-op state plus deques with a maxlen; at most MAX_RANKS ranks (and never
a rank at or beyond the announced world size) and MAX_COLLECTIVE_OPS op names; an event beyond
a bound is rejected (`JobEventRejected`, counted by the caller), never folded.

Here: the fold and the run's figures. The verdict is the ordered rules of `job_verdicts.py`
(one small function per verdict, in the precedence above); the per-rank state is
`job_ranks.py`; the steady-state rules (warm-up, steady samples, percentiles) `job_steady.py`;
dead ranks and which failure is the cause `job_blame.py`; positions, the majority and suspect
records `job_suspects.py`; the typed section they fill `job_summary.py`.
"""

from collections import Counter, deque
from dataclasses import dataclass
from operator import itemgetter
from statistics import median

from msgspec import Struct

from trnwatch.collectors.job_events import JobEvent, ModelInfo, Parallelism
from trnwatch.collectors.job_records import (
    Checkpoint,
    Collective,
    Error,
    Heartbeat,
    JobRecord,
    Launcher,
    Phase,
    RunEnd,
    RunStart,
    Step,
    record_of,
)
from trnwatch.ledger.job_blame import JobFailure, dead_ranks, failure_rows
from trnwatch.ledger.job_pauses import PAUSE_OF_PHASE
from trnwatch.ledger.job_progress import RunProgress
from trnwatch.ledger.job_ranks import CHECKPOINT_REGION, RankState, RankStatus, StepKind, StepSample
from trnwatch.ledger.job_ranks import STEP_WINDOW as STEP_WINDOW  # bounds named with the ledger
from trnwatch.ledger.job_ranks import WAIT_WINDOW_STEPS as WAIT_WINDOW_STEPS
from trnwatch.ledger.job_steady import (
    WARMUP_PROBE_STEPS,
    percentile,
    percentiles,
    rank_throughput,
    recent_step_times_s,
)
from trnwatch.ledger.job_summary import (
    CheckpointSaves,
    CollectiveEntry,
    Failure,
    JobSection,
    Observed,
    PhaseEntry,
    RankCounts,
    RankProcessRow,
    RestartEntry,
    Stall,
    Thresholds,
    Throughput,
    WaitSkew,
    WarningEntry,
    Warnings,
)
from trnwatch.ledger.job_suspects import (
    ChipUtilisation,
    position_suspects,
    suspect,
)
from trnwatch.ledger.job_verdicts import JobDiagnosis as JobDiagnosis
from trnwatch.ledger.job_verdicts import verdict_of
from trnwatch.ledger.rank_processes import RankProcesses
from trnwatch.ledger.rules import DEFAULT_RULES, PAUSE_KINDS, PauseKind, Rules

COLLECTIVE_WINDOW = 1024
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
# The oldest history a session folds: a log read years after its run is fine, a stamp of 0, a
# negative one or seconds counted from boot is a bad clock or a bad line, never history.
MAX_TS_BEHIND_S = 10 * 365.25 * 86400.0
# A checkpoint folder keeps tags of earlier runs (and of this one's distant past): a tag saved more
# than this before it was read is history from before the session's plausible span, counted as
# `ckpt-tag-old` and not folded (a 30-day-old tag made the goodput window 30 days).
MAX_CKPT_HISTORY_S = 24 * 3600.0
CKPT_SOURCE_PREFIX = "ckpt:"
# Saves already ended, by (action, tag), so one save told by two sources (the emitter's events in
# the rank files and the checkpoint folder's markers) counts once; the latest this many.
SAVE_TAGS_KEPT = 4096


class JobEventRejected(ValueError):
    """A valid event the ledger will not fold (beyond a bound, another run); `reason` is the count key."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason


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


class JobLedger:
    """Folds job events for one run; memory is bounded whatever the run length."""

    def __init__(self, rules: Rules = DEFAULT_RULES, max_ranks: int = MAX_RANKS):
        self.rules = rules
        self.max_ranks = max_ranks
        self.run: str | None = None
        self.run_start: RunStart | None = None  # from the lowest rank that announced itself
        self.ranks: dict[int, RankState] = {}
        self.timeline: deque[PhaseSpan] = deque(maxlen=TIMELINE_SPANS)
        self.restarts: deque[Restart] = deque(maxlen=RESTARTS_KEPT)
        self.failures: deque[JobFailure] = deque(maxlen=FAILURES_KEPT)
        self.warnings = 0
        self.warning_ranks: set[int] = set()
        self.latest_warnings: deque[WarningEntry] = deque(maxlen=WARNINGS_KEPT)
        self.stalls: deque[Stall] = deque(maxlen=STALLS_KEPT)
        self.checkpoint_saves_s: deque[float] = deque(maxlen=SAVES_KEPT)
        # The timeline rank's earlier pauses by kind (blocking saves, compiles, restarts' time to
        # first step): a pause far longer than these is a stall (ledger/job_pauses.py).
        self.pauses_s: dict[PauseKind, deque[float]] = {kind: deque(maxlen=SAVES_KEPT) for kind in PAUSE_KINDS}
        self.checkpoint_saves = 0
        self.background_saves = 0
        self._saves_ended: dict[tuple[str, str | None], None] = {}  # (action, tag), oldest first
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
        self._active_run: str | None = None  # the run of the active sources (the emitter's files)
        # Which source gave what: source ("job-dir" for the emitter's rank files, a passive
        # source's id) -> events folded by kind. As many keys as sources given, plus one.
        self.source_events: dict[str, Counter[str]] = {}
        self.attempt = 0  # the launcher's latest attempt (restarts it reported)
        self.launcher_stopped: Launcher | None = None
        # Passive job log source -> (lines read, unparsed, the profile's note on a log without steps).
        self.log_lines: dict[str, tuple[int, int, str | None]] = {}
        self.progress = RunProgress()  # steps and losses by source
        self._timeline_rank: int | None = None
        self._folded = 0  # events folded: what `dead_ranks` at one "now" is kept against
        self._dead_at: tuple[float, int, list[int]] | None = None

    # ---- ingest ------------------------------------------------------------------------------

    def ingest(self, event: JobRecord | JobEvent, now_s: float, source: str = "job-dir", passive: bool = False) -> None:
        """Fold one event received at `now_s` from `source`; raise `JobEventRejected` for an event
        of another run, stamped too far from its receive time, or beyond a bound (nothing is
        folded then). A `passive` source's event (a job log, a checkpoint folder: their run id is
        only a name the monitor gave) joins whatever run the ledger holds and never rejects nor is
        rejected for its run; the run is the first active source's (the emitter's), else the
        first passive one's. The ledger folds decoded records (collectors/job_records.py); an
        event built with the contract's models (a log profile's, fed in directly) is taken as its
        record."""
        if not isinstance(event, Struct):  # a contract model (pydantic's BaseModel, whose check is the slow one)
            event = record_of(event)
        self._check(event, now_s, passive, source)
        self._folded += 1
        if not passive and self._active_run is None:
            self._active_run = self.run = event.run
        elif self.run is None:
            self.run = event.run
        kinds = self.source_events.get(source)
        if kinds is None:
            kinds = self.source_events[source] = Counter()
        kinds[event.event] += 1
        if self.first_received_s is None:
            self.first_received_s = now_s
        # The latest receive time (a receive clock stepped back must not make the session's end
        # look like years of silence after the job's last event). Comparisons, not min/max: this
        # runs for every job line.
        if self.last_received_s is None or now_s > self.last_received_s:
            self.last_received_s = now_s
        ts = event.ts
        if self.first_event_ts is None or ts < self.first_event_ts:
            self.first_event_ts = ts
        if self.last_event_ts is None or ts > self.last_event_ts:
            self.last_event_ts = ts
        if self._timeline_rank is None or event.rank < self._timeline_rank:
            self._timeline_rank = event.rank
        rank = self._rank_of(event)
        on_timeline = event.rank == self._timeline_rank
        if isinstance(event, Step):
            if on_timeline:  # the lowest rank's account, as throughput's (DP replicas' losses differ)
                self.progress.told(source, event.step, event.loss)
            if not (passive and event.step_time_s is None and self._told_before(rank, event.step)):
                self._step(rank, event, on_timeline)
        elif isinstance(event, Collective):
            self._collective(rank, event)
        elif isinstance(event, Heartbeat):
            rank.has_heartbeats = True
            if rank.region != event.region and rank.region is not None:
                if rank.region == CHECKPOINT_REGION:
                    rank.pause_left_ts["checkpoint"] = event.ts
                elif rank.in_collective():
                    rank.left_collective = rank.region
            rank.heartbeat_ts, rank.heartbeat_step = event.ts, event.step
            rank.region, rank.region_since = (
                event.region,
                min(max(event.region_since, event.ts - MAX_TS_BEHIND_S), event.ts),
            )
        elif isinstance(event, RunStart):
            self._run_start(rank, event, on_timeline)
        elif isinstance(event, Phase):
            self._phase(rank, event, on_timeline)
        elif isinstance(event, Checkpoint):
            self._checkpoint(rank, event, on_timeline)
        elif isinstance(event, Launcher):
            self._launcher(event)
        elif isinstance(event, Error) and event.severity == "warning":
            rank.warnings += 1
            rank.last_warning = event.message
            self.warnings += 1
            self.warning_ranks.add(event.rank)
            self.latest_warnings.append(
                WarningEntry(rank=event.rank, ts=event.ts, source=event.source, message=event.message)
            )
        elif isinstance(event, Error):
            if event.chip is not None and rank.chip is None:  # a passive log's only word on the rank's device
                rank.chip, rank.core = event.chip, event.core
            failed_ts = (
                event.failed_ts
                if event.failed_ts is not None and event.ts - MAX_TS_BEHIND_S <= event.failed_ts <= event.ts
                else event.ts
            )
            rank.error = rank.error or event.message
            self._fail(rank, "failed", failed_ts)
            self.failures.append(
                JobFailure(
                    rank=event.rank,
                    ts=failed_ts,
                    kind="error",
                    restart=rank.restart,
                    error=event.message,
                    source=event.source,
                    exit_code=event.exit_code,
                    signal=event.signal,
                    root_cause=bool(event.root_cause),
                )
            )
        elif isinstance(event, RunEnd):
            if event.status == "success":
                rank.status = "finished"
            else:
                self._fail(rank, event.status, event.ts)
                self.failures.append(
                    JobFailure(rank=event.rank, ts=event.ts, kind="run_end", restart=rank.restart, run_end=event.status)
                )

    def _rank_of(self, event: JobRecord) -> RankState:
        """The event's rank (registered on its first event), seen at the event's time."""
        rank = self.ranks.get(event.rank)
        if rank is None:
            rank = self.ranks[event.rank] = RankState(event.rank, restart=self.attempt, started_ts=event.ts)
        if rank.last_seen_ts is None or event.ts > rank.last_seen_ts:
            rank.last_seen_ts = event.ts
        return rank

    def carry(self, event: JobRecord | JobEvent, now_s: float, source: str = "job-dir", passive: bool = False) -> None:
        """Fold an event from before a replay window as the state it leaves (the reader keeps
        each rank's latest start, heartbeat, step, open phases and saves, and its end): a step
        moves the rank's position and the job's progress but adds no step time, so the window's
        figures are the window's own. Raises `JobEventRejected` as `ingest` does."""
        if not isinstance(event, Struct):
            event = record_of(event)
        if not isinstance(event, Step):
            self.ingest(event, now_s, source, passive)
            return
        self._check(event, now_s, passive, source)
        self._folded += 1
        self.run = self.run or event.run
        rank = self._rank_of(event)
        rank.last_step, rank.last_step_ts = event.step, event.ts
        self._note_progress(event.ts)

    def _check(self, event: JobRecord, now_s: float, passive: bool, source: str) -> None:
        if not passive and self._active_run is not None and event.run != self._active_run:
            raise JobEventRejected(
                "job-foreign-run", f"event of run {event.run!r} in a ledger of run {self._active_run!r}"
            )
        if event.ts < now_s - MAX_TS_BEHIND_S:
            raise JobEventRejected("job-ts-behind", f"ts {event.ts} is more than 10 years before its receive time")
        if event.ts > now_s + MAX_TS_AHEAD_S:
            raise JobEventRejected("job-ts-ahead", f"ts {event.ts} is {event.ts - now_s:.0f} s after its receive time")
        if source.startswith(CKPT_SOURCE_PREFIX) and event.ts < now_s - MAX_CKPT_HISTORY_S:
            raise JobEventRejected(
                "ckpt-tag-old",
                f"tag {getattr(event, 'tag', None)!r} marked {(now_s - event.ts) / 86400:.1f} days before it was read "
                f"(over {MAX_CKPT_HISTORY_S / 3600:g} h: an earlier run's)",
            )
        if event.rank not in self.ranks:
            world = self.run_start.world_size if self.run_start is not None else None
            if world is not None and event.rank >= world:
                raise JobEventRejected("job-rank-range", f"rank {event.rank} >= world size {world}")
            if len(self.ranks) >= self.max_ranks:
                raise JobEventRejected("job-ranks-bound", f"more than {self.max_ranks} ranks")
        if (
            isinstance(event, Collective)
            and event.op not in self.collective_count
            and len(self.collective_count) >= MAX_COLLECTIVE_OPS
        ):
            raise JobEventRejected("job-ops-bound", f"more than {MAX_COLLECTIVE_OPS} collective op names")

    @staticmethod
    def _fail(rank: RankState, status: RankStatus, ts: float) -> None:
        if rank.failed_ts is None:
            rank.status, rank.failed_ts = status, ts

    def _run_start(self, rank: RankState, event: RunStart, on_timeline: bool) -> None:
        self._note_progress(event.ts)
        if self.run_start is None or event.rank <= self.run_start.rank:
            self.run_start = event
        rank.host, rank.chip, rank.core = event.host, event.chip, event.core
        rank.local_rank, rank.pid = event.local_rank, event.pid
        rank.start_ticks, rank.pid_ts = event.start_ticks, event.ts
        _new_process(rank, event.restart, event.ts)
        if on_timeline and event.restart > 0:
            self.restarts.append(Restart(event.restart, event.ts, rank.last_step))
            self.timeline.append(PhaseSpan("restart", event.ts))
            self._saves_ended.clear()  # a restarted run that saves a tag again saves it anew

    def _launcher(self, event: Launcher) -> None:
        """The launcher restarted every worker (each rank's next process is generation
        `attempt`), or was stopped by a signal (the job is aborted)."""
        if event.action == "stopped":
            self.launcher_stopped = event
            return
        attempt = event.attempt if event.attempt is not None else self.attempt + 1
        self.attempt = max(self.attempt, attempt)
        timeline = self.ranks.get(self._timeline_rank) if self._timeline_rank is not None else None
        self.restarts.append(Restart(attempt, event.ts, timeline.last_step if timeline else None))
        self.timeline.append(PhaseSpan("restart", event.ts))
        for rank in self.ranks.values():
            _new_process(rank, attempt, event.ts)

    def _phase(self, rank: RankState, event: Phase, on_timeline: bool) -> None:
        if event.phase == "compile" and event.state == "end":
            rank.compile_ended_ts = event.ts
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
        if event.phase in PAUSE_OF_PHASE and began_ts is not None:
            self._pause_ended(rank, PAUSE_OF_PHASE[event.phase], event.phase, began_ts, event.ts, on_timeline)
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
            kind = self._step_kind(rank, event.step_time_s)
            rank.steps.append(
                StepSample(
                    event.step,
                    event.ts,
                    event.step_time_s,
                    event.tokens,
                    kind,
                    rank.open_steps,
                    event.tokens_per_s_per_device,
                )
            )
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
                self.pauses_s["bootstrap"].append(event.ts - span.begin_ts)

    @staticmethod
    def _told_before(rank: RankState, step: int) -> bool:
        """True when the rank's process already took `step` or a later one: a second passive
        source's untimed account (trainer_state.json beside the console log) then moves nothing."""
        return rank.last_step is not None and step <= rank.last_step and rank.stepped_since_start()

    def _step_kind(self, rank: RankState, step_time_s: float) -> StepKind:
        others = [phase for phase in rank.open_phases if phase != "steady"]
        if (
            others
            or rank.paused_since_step
            or (rank.open_checkpoint is not None and rank.open_checkpoint.blocking is not False)
        ):
            return "other"
        if step_time_s > self.rules.late_after_s:
            # A step longer than the floor: its time holds a stall if it is late by this rank's own rule.
            if step_time_s > self._late_threshold_s(recent_step_times_s(rank)):
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
        rank.wait_per_step.add(event.step, event.wait_s)

    def _checkpoint(self, rank: RankState, event: Checkpoint, on_timeline: bool) -> None:
        told = (event.action, event.tag)
        if event.tag is not None and told in self._saves_ended:
            if rank.open_checkpoint is not None and rank.open_checkpoint.tag == event.tag:
                rank.open_checkpoint = None
            return  # this save, told again by another source (rank files and checkpoint folder)
        if event.state == "end" and event.tag is not None:
            self._saves_ended[told] = None
            if len(self._saves_ended) > SAVE_TAGS_KEPT:
                del self._saves_ended[next(iter(self._saves_ended))]
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
            if began is not None and event.action == "save" and "checkpoint" not in rank.open_phases:
                self._pause_ended(rank, "checkpoint", "checkpoint", began.ts, event.ts, on_timeline)
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

    def pause_limit_s(self, kind: PauseKind) -> float:
        """How long a pause of `kind` may last now (`Rules.pause_limit_s` over the run's earlier ones)."""
        return self.rules.pause_limit_s(kind, percentile(list(self.pauses_s[kind]), 99))

    def _pause_ended(
        self, rank: RankState, kind: PauseKind, what: str, since_ts: float, ts: float, on_timeline: bool
    ) -> None:
        """A rank left a pause: remembered (for the one-sided rule), kept as a stall when it ran
        past its limit (once per episode, whichever rank ends it), and, on the timeline rank, as
        one of the run's earlier pauses of its kind."""
        rank.pause_left_ts[kind] = ts
        limit_s = self.pause_limit_s(kind)
        last = self.stalls[-1] if self.stalls else None
        same_episode = last is not None and last.cause == kind and (last.end_ts or ts) >= since_ts
        if ts - since_ts > limit_s and not same_episode:
            why = f"{what} open for {ts - since_ts:.0f} s, beyond its limit of {limit_s:.0f} s"
            self.stalls.append(
                Stall(
                    begin_ts=since_ts,
                    end_ts=ts,
                    duration_s=ts - since_ts,
                    threshold_s=limit_s,
                    suspects=[suspect(rank, why, ts, pause=(what, since_ts))],
                    cause=kind,
                )
            )
        if on_timeline and kind != "bootstrap":
            self.pauses_s[kind].append(ts - since_ts)

    def _open_span(self, phase: str) -> PhaseSpan | None:
        for span in reversed(self.timeline):
            if span.phase == phase and span.end_ts is None:
                return span
        return None

    def _note_progress(self, ts: float) -> None:
        if self.last_progress_ts is None or ts > self.last_progress_ts:
            self.last_progress_ts = ts

    def _record_stall_if_gap(self, ts: float) -> None:
        """A step that ends a stall: keep the episode for the receipt (judged at the step's ts)."""
        if self.last_progress_ts is None or ts - self.last_progress_ts <= self.rules.stall_after_s:
            return  # the common case, decided without the full rule (this runs for every step event)
        idle_s = ts - self.last_progress_ts
        threshold_s = self.thresholds(ts).stall_s
        if idle_s <= threshold_s or self._blocking_pause(ts) or self.dead_ranks(ts):
            return
        self.stalls.append(
            Stall(
                begin_ts=ts - idle_s,
                end_ts=ts,
                duration_s=idle_s,
                threshold_s=threshold_s,
                suspects=list(position_suspects(self.ranks, set(self.dead_ranks(ts)), ts)),
            )
        )

    # ---- queries -----------------------------------------------------------------------------

    def reference_rank(self, now_s: float) -> int | None:
        """Lowest rank present (not dead) that has step times; throughput comes from it alone."""
        with_steps = [rank for rank in sorted(self.ranks) if self.ranks[rank].steps]
        dead = set(self.dead_ranks(now_s))
        present = [rank for rank in with_steps if rank not in dead]
        return next(iter(present or with_steps), None)

    def step_times_s(self, now_s: float) -> list[float]:
        """Recent steady step times of the reference rank (all recent steps if none is steady)."""
        rank = self.reference_rank(now_s)
        return [] if rank is None else recent_step_times_s(self.ranks[rank])

    def _late_threshold_s(self, step_times_s: list[float]) -> float:
        p99 = percentile(step_times_s, 99)
        return (
            max(self.rules.late_factor * p99, self.rules.late_after_s) if p99 is not None else self.rules.late_after_s
        )

    def thresholds(self, now_s: float) -> Thresholds:
        """The late and stall thresholds at `now_s`, from the reference rank's recent steady steps."""
        step_times = self.step_times_s(now_s)
        stall_s = (
            max(self.rules.stall_factor * median(step_times), self.rules.stall_after_s)
            if step_times
            else self.rules.stall_after_s
        )
        return Thresholds(
            late_s=self._late_threshold_s(step_times),
            stall_s=stall_s,
            dead_after_s=self.rules.dead_after_s,
            late_after_s=self.rules.late_after_s,
            stall_after_s=self.rules.stall_after_s,
        )

    def throughput(self, now_s: float) -> Throughput | None:
        """Steady-state figures of the reference rank, with the steps and time span they cover."""
        rank_id = self.reference_rank(now_s)
        if rank_id is None:
            return None
        return rank_throughput(self.ranks[rank_id], now_s)

    def throughput_tokens_per_s(self, now_s: float) -> float | None:
        """Steady-state tokens/s of the whole job, from the reference rank's steady steps."""
        figures = self.throughput(now_s)
        return None if figures is None else figures.tokens_per_s

    def straggler(self, now_s: float) -> Straggler | None:
        """The rank (not dead) that waits least for its peers; None without two ranks of wait data."""
        dead = set(self.dead_ranks(now_s))
        wait_s = {
            rank_id: window.median_s()
            for rank_id, rank in self.ranks.items()  # keyed by rank
            if rank_id not in dead and len(window := rank.wait_per_step) >= MIN_WAIT_STEPS
        }
        if len(wait_s) < 2:
            return None
        least, least_s = min(wait_s.items(), key=itemgetter(1, 0))  # by wait, then rank
        peers_s = list(wait_s.values())
        peers_s.remove(least_s)  # the others' waits: one value equal to the least's goes
        skew_s = median(peers_s) - least_s
        step_times = self.step_times_s(now_s)
        slow = bool(step_times) and skew_s >= self.rules.straggler_min_skew_fraction * median(step_times)
        return Straggler(least, skew_s, wait_s, slow)

    # ---- accounting and blame ----------------------------------------------------------------

    def dead_ranks(self, now_s: float) -> list[int]:
        """Running ranks of the in-job emitter that are gone (the rule: `job_blame.dead_ranks`);
        a walk over every rank, done once per "now" and fold for the several rules that ask."""
        if self._dead_at is None or self._dead_at[:2] != (now_s, self._folded):
            self._dead_at = (now_s, self._folded, dead_ranks(self.ranks, now_s, self.rules.dead_after_s))
        return list(self._dead_at[2])

    def rank_counts(self, now_s: float) -> RankCounts:
        """running + finished + failed + dead + unknown = world size (dead ranks are not running)."""
        dead = set(self.dead_ranks(now_s))
        statuses = Counter("dead" if rank.rank in dead else rank.status for rank in self.ranks.values())
        world = self.run_start.world_size if self.run_start is not None else None
        return RankCounts(
            seen=len(self.ranks),
            world_size=world,
            hosts=len({rank.host for rank in self.ranks.values() if rank.host}),
            running=statuses["running"],
            finished=statuses["finished"],
            failed=statuses["failed"] + statuses["aborted"],
            dead=statuses["dead"],
            unknown=max(0, world - len(self.ranks)) if world is not None else 0,
        )

    def failure_rows(self, now_s: float) -> list[JobFailure]:
        """Failure reports kept, plus ranks gone without a word, each with its role (`job_blame`)."""
        return failure_rows(self.failures, self.ranks, self.dead_ranks(now_s))

    def failure_reports(self, now_s: float) -> list[Failure]:
        """Every failure kept (and ranks gone without a word), in time order, cause first in role."""
        return [
            Failure(
                rank=row.rank,
                ts=row.ts,
                role=row.role,
                kind=row.kind,
                error=row.error,
                run_end=row.run_end,
                source=row.source,
                exit_code=row.exit_code,
                signal=row.signal,
            )
            for row in self.failure_rows(now_s)
        ]

    def diagnose(
        self, now_s: float, chip_util_pct: ChipUtilisation | None = None, processes: RankProcesses | None = None
    ) -> JobDiagnosis:
        """Verdict for on-call at `now_s`, with the ranks to look at (their chips' utilisation, and
        their processes on this host when `processes` has them): the first answer of the ordered
        verdict rules (ledger/job_verdicts.py)."""
        return verdict_of(self, now_s, chip_util_pct, processes)

    def _blocking_pause(self, now_s: float) -> bool:
        """True when a running rank is in a blocking pause (a gap then is no stall of its own)."""
        dead = set(self.dead_ranks(now_s))
        return any(
            rank.status == "running" and rank.rank not in dead and rank.blocking_pause() is not None
            for rank in self.ranks.values()
        )

    # ---- the receipt's job section -----------------------------------------------------------

    def _open_stall(self, diagnosis: JobDiagnosis, now_s: float) -> Stall | None:
        """The stall still going on at `now_s`: the verdict's, or the silence of a job whose ranks
        died (DEAD comes first as a verdict, but the rest of the job stalled all the same)."""
        if diagnosis.verdict == "stalled" and diagnosis.idle_s is not None and diagnosis.threshold_s is not None:
            idle_s, threshold_s = diagnosis.idle_s, diagnosis.threshold_s
        elif diagnosis.verdict == "dead" and self.last_progress_ts is not None:
            idle_s, threshold_s = now_s - self.last_progress_ts, self.thresholds(now_s).stall_s
            if idle_s <= threshold_s:
                return None
        else:
            return None
        return Stall(
            begin_ts=now_s - idle_s,
            end_ts=None,
            duration_s=idle_s,
            threshold_s=threshold_s,
            suspects=list(diagnosis.suspects),
            cause=diagnosis.cause,
        )

    def summary(
        self,
        now_s: float,
        chip_util_pct: ChipUtilisation | None = None,
        diagnosis: JobDiagnosis | None = None,
        processes: RankProcesses | None = None,
    ) -> JobSection:
        """The job section judged at `now_s` (typed: see ledger/job_summary.py); `diagnosis` is
        `diagnose(now_s, chip_util_pct, processes)` when the caller has it already (the read model does)."""
        info = self.run_start
        if diagnosis is None:
            diagnosis = self.diagnose(now_s, chip_util_pct, processes)
        straggler = self.straggler(now_s)
        stalls = list(self.stalls)
        open_stall = self._open_stall(diagnosis, now_s)
        if open_stall is not None:
            stalls.append(open_stall)
        return JobSection(
            run=self.run,
            verdict=diagnosis.verdict,
            reason=diagnosis.reason,
            suspects=list(diagnosis.suspects),
            ranks=self.rank_counts(now_s),
            thresholds=self.thresholds(now_s),
            backend=info.backend if info else None,
            model=ModelInfo(name=info.model.name, params=info.model.params) if info else None,
            precision=info.precision if info else None,
            global_batch=info.global_batch if info else None,
            micro_batch=info.micro_batch if info else None,
            seq_len=info.seq_len if info else None,
            parallel=Parallelism(tp=info.parallel.tp, pp=info.parallel.pp, dp=info.parallel.dp) if info else None,
            lnc=info.lnc if info else None,
            versions=dict(info.versions) if info else None,
            cold_compile_s=self.cold_compile_s if self.cold_compiles else None,
            cold_compiles=self.cold_compiles,
            compile_cache_hits=self.compile_cache_hits,
            throughput=self.throughput(now_s),
            checkpoint_saves=CheckpointSaves(
                count=self.checkpoint_saves,
                background=self.background_saves,
                save_s=percentiles(self.checkpoint_saves_s),
            ),
            restarts=[
                RestartEntry(
                    restart=r.restart,
                    from_step=r.from_step,
                    steps_redone=None
                    if r.from_step is None or r.last_step_before is None
                    else max(0, r.last_step_before - r.from_step),
                    checkpoint_load_s=r.checkpoint_load_s,
                    restart_to_first_step_s=None if r.first_step_ts is None else r.first_step_ts - r.ts,
                )
                for r in self.restarts
            ],
            collectives={
                op: CollectiveEntry(
                    count=self.collective_count[op], bytes=self.collective_bytes[op], latency_s=percentiles(latencies)
                )
                for op, latencies in sorted(self.collective_latency_s.items())
            }
            or "unavailable: needs the in-job emitter",
            wait_skew=None
            if straggler is None
            else WaitSkew(
                least_waiting_rank=straggler.rank,
                skew_s=straggler.skew_s,
                slow=straggler.slow,
                wait_s_per_step_by_rank={str(rank): wait for rank, wait in sorted(straggler.wait_s_by_rank.items())},
            ),
            failures=self.failure_reports(now_s),
            warnings=Warnings(count=self.warnings, ranks=len(self.warning_ranks), latest=list(self.latest_warnings)),
            stalls=stalls,
            phases=[
                PhaseEntry(phase=span.phase, begin_ts=span.begin_ts, end_ts=span.end_ts, duration_s=span.duration_s)
                for span in self.timeline
            ],
            observed=Observed(
                first_event_ts=self.first_event_ts,
                last_event_ts=self.last_event_ts,
                first_received_s=self.first_received_s,
                last_received_s=self.last_received_s,
            ),
            dropped_fields=dict(sorted(self.dropped_fields.items())),
            log_profiles=dict(sorted(self.log_profiles.items())),
            sources={source: dict(sorted(kinds.items())) for source, kinds in sorted(self.source_events.items())},
            progress=self.progress.section(),
            processes=[] if processes is None else process_rows(processes, now_s),
        )


def process_rows(processes: RankProcesses, now_s: float) -> list[RankProcessRow]:
    """The rank processes of the latest passes, by rank, with how long each has been in its state."""
    return [
        RankProcessRow(
            rank=p.rank,
            local_rank=p.local_rank,
            host=p.host,
            pid=p.pid,
            ppid=p.ppid,
            state=p.state,
            state_for_s=round(max(0.0, now_s - p.state_since_s), 1),
            cpu_pct=p.cpu_pct,
            rss_bytes=p.rss_bytes,
            via=p.via,
            seen_at=p.seen_s,
        )
        for _, p in sorted(processes.by_rank.items())
    ]


def _new_process(rank: RankState, restart: int, started_ts: float) -> None:
    """A new process for this rank (generation `restart`, started at `started_ts`): the previous
    process's phases, steps, waits, position and failure are history (kept in the timeline and
    failures), not its state."""
    rank.restart, rank.started_ts = restart, started_ts
    rank.status, rank.error, rank.failed_ts = "running", None, None
    rank.warnings, rank.last_warning = 0, None
    rank.open_phases.clear()
    rank.open_checkpoint = None
    rank.paused_since_step = rank.saw_steady = False
    rank.steps_before_steady = rank.open_steps = 0
    rank.first_step_times_s.clear()
    rank.steps.clear()
    rank.wait_per_step.clear()
    rank.heartbeat_ts = rank.heartbeat_step = rank.region = rank.region_since = rank.left_collective = None
