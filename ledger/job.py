"""Job ledger: folds `trnwatch.job/1` events into per-rank state, run figures and a verdict.

Pure logic: no I/O, no clock. Every method that needs "now" takes `now_s` (unix seconds).
Ages are measured against the events' own `ts` (the job hosts' clocks), so a monitor opened late
judges history correctly; this assumes job hosts and monitor agree on time (chrony/NTP), as any
cluster does.

Rules (defaults are module constants, all overridable per ledger):

- dead: a running rank that has sent heartbeats sends nothing for more than `dead_after_s`
  (DEAD_AFTER_S = 10 s: more than 3 missed heartbeats at the emitter's default 2 s interval).
  Ranks seen only through passive sources (no heartbeats) are never declared dead.
- stalled: no rank completes a step (or a phase, a checkpoint, a start) for longer than
  max(STALL_FACTOR x median recent step time, STALL_MIN_S) = max(5 x median, 30 s) while every
  running rank's heartbeats are fresh. Phases known to be long (init, compile, checkpoint) are
  reported as themselves ("compiling", "checkpointing") with their age, not as stalls.
  Suspects: each live rank's position is (heartbeat step, heartbeat region); the majority position
  is the most common one, ties going to a position inside a collective (those ranks are waiting
  for peers) and then to the higher step; ranks at any other position are the suspects.
- slow (straggler): per rank, the median over its last WAIT_WINDOW_STEPS steady steps of the time
  per step spent waiting for peers (`wait_s` summed per step; warmup and checkpoint steps left out,
  the median ignores one-off outliers). The rank that waits least is the straggler; it is
  reported as slow when the others' median wait exceeds its wait by at least
  STRAGGLER_MIN_SKEW_FRACTION (20 %) of the median step time.
- throughput: tokens / step time over the recent steady steps of the lowest rank present (not
  dead), so the whole-job `tokens` figure is never counted once per rank. Steps taken while any
  phase other than steady is open on that rank (warmup, compile, checkpoint, probe) are excluded.
- verdict precedence: no-data; failed (a rank errored or ended failed/aborted since its latest
  start); finished (every rank ended with success); dead; checkpointing / compiling (an open long
  phase); stalled; compiling (warmup still open); slow; steady.
- cold compile: time in compile phases not marked as persistent-cache hits (lowest rank).
- restart from checkpoint: from the lowest rank's run_start with restart > 0 to its first step,
  with the checkpoint load time and the steps redone (last step before the restart minus the
  checkpoint's step).

Memory: per-rank and per-op state plus deques with a maxlen; nothing grows with run length.
"""

import math
from collections import Counter, deque
from dataclasses import dataclass, field, replace
from statistics import median
from typing import Callable, Literal

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

Verdict = Literal["compiling", "checkpointing", "steady", "slow", "stalled", "dead", "finished", "failed", "no-data"]
ChipUtilisation = Callable[[str, int], float | None]  # (host, chip) -> latest utilisation %, or None

DEAD_AFTER_S = 10.0
STALL_FACTOR = 5.0
STALL_MIN_S = 30.0
STRAGGLER_MIN_SKEW_FRACTION = 0.2
STEP_WINDOW = 256
COLLECTIVE_WINDOW = 1024
WAIT_WINDOW_STEPS = 32
MIN_WAIT_STEPS = 5  # fewer steps of wait data say nothing about a straggler
TIMELINE_SPANS = 128
FAILURES_KEPT = 64
STALLS_KEPT = 64
RESTARTS_KEPT = 32
SAVES_KEPT = 256
LONG_PHASES = ("init", "compile", "checkpoint")
STARTUP_PHASES = ("init", "compile", "warmup")
COLLECTIVE_REGION_PREFIX = "collective"
POSITIONS_SHOWN = 3  # in a stall's reason; the suspects list has every rank


def percentile(values, q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100) of `values`; None when empty."""
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def _percentiles(values) -> dict[str, float | None]:
    values = list(values)
    return {"p50": percentile(values, 50), "p90": percentile(values, 90), "p99": percentile(values, 99)}


@dataclass
class StepSample:
    step_time_s: float
    tokens: int | None
    steady: bool


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
    steps: deque = field(default_factory=lambda: deque(maxlen=STEP_WINDOW))  # StepSample
    wait_per_step: deque = field(default_factory=lambda: deque(maxlen=WAIT_WINDOW_STEPS))  # [step, wait_s]
    error: str | None = None
    failed_ts: float | None = None


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
class Suspect:
    """A rank the diagnosis points at, with where it runs and the device evidence if known."""

    rank: int
    why: str
    host: str | None
    chip: int | None
    core: int | None
    step: int | None
    region: str | None
    region_age_s: float | None
    chip_util_pct: float | None = None
    peer_chip_util_median_pct: float | None = None


@dataclass(frozen=True)
class Straggler:
    """The rank that waits least for its peers, and by how much less than the others' median."""

    rank: int
    skew_s: float
    wait_s_by_rank: dict[int, float]  # median wait per step
    slow: bool  # skew large enough (relative to the step time) to call the job slow


@dataclass(frozen=True)
class JobDiagnosis:
    """The on-call answer: a verdict, a one-line reason, and the ranks to look at."""

    verdict: Verdict
    reason: str
    suspects: tuple[Suspect, ...] = ()
    idle_s: float | None = None  # seconds since the last progress
    stall_threshold_s: float | None = None


class JobLedger:
    """Folds job events for one run; memory is bounded whatever the run length."""

    def __init__(
        self,
        dead_after_s: float = DEAD_AFTER_S,
        stall_factor: float = STALL_FACTOR,
        stall_min_s: float = STALL_MIN_S,
        straggler_min_skew_fraction: float = STRAGGLER_MIN_SKEW_FRACTION,
    ):
        self.dead_after_s = dead_after_s
        self.stall_factor = stall_factor
        self.stall_min_s = stall_min_s
        self.straggler_min_skew_fraction = straggler_min_skew_fraction
        self.run: str | None = None
        self.run_start: RunStart | None = None  # from the lowest rank that announced itself
        self.ranks: dict[int, RankState] = {}
        self.foreign_run_events = 0
        # Wrong-typed optional fields dropped by the decoder ("step.seq_len" -> count).
        self.dropped_fields: Counter[str] = Counter()
        # Passive job logs: source id -> the log profile reading it (None: none detected yet).
        self.log_profiles: dict[str, str | None] = {}
        self.timeline: deque[PhaseSpan] = deque(maxlen=TIMELINE_SPANS)
        self.restarts: deque[Restart] = deque(maxlen=RESTARTS_KEPT)
        self.failures: deque[dict] = deque(maxlen=FAILURES_KEPT)
        self.stalls: deque[dict] = deque(maxlen=STALLS_KEPT)
        self.checkpoint_saves_s: deque[float] = deque(maxlen=SAVES_KEPT)
        self.checkpoint_saves = 0
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
        self._timeline_rank: int | None = None

    # ---- ingest ------------------------------------------------------------------------------

    def ingest(self, event: JobEvent, now_s: float) -> None:
        """Fold one event received at `now_s`. Events of another run are counted and ignored."""
        if self.run is None:
            self.run = event.run
        elif event.run != self.run:
            self.foreign_run_events += 1
            return
        self.first_received_s = now_s if self.first_received_s is None else self.first_received_s
        self.last_received_s = now_s
        self.first_event_ts = event.ts if self.first_event_ts is None else min(self.first_event_ts, event.ts)
        self.last_event_ts = event.ts if self.last_event_ts is None else max(self.last_event_ts, event.ts)
        if self._timeline_rank is None or event.rank < self._timeline_rank:
            self._timeline_rank = event.rank
        rank = self.ranks.setdefault(event.rank, RankState(event.rank))
        rank.last_seen_ts = event.ts if rank.last_seen_ts is None else max(rank.last_seen_ts, event.ts)
        on_timeline = event.rank == self._timeline_rank
        if isinstance(event, RunStart):
            self._run_start(rank, event, on_timeline)
        elif isinstance(event, Phase):
            self._phase(rank, event, on_timeline)
        elif isinstance(event, Step):
            self._step(rank, event, on_timeline)
        elif isinstance(event, Collective):
            self._collective(rank, event)
        elif isinstance(event, Checkpoint):
            self._checkpoint(rank, event, on_timeline)
        elif isinstance(event, Heartbeat):
            rank.has_heartbeats = True
            rank.heartbeat_ts, rank.heartbeat_step = event.ts, event.step
            rank.region, rank.region_since = event.region, event.region_since
        elif isinstance(event, Error):
            rank.error = rank.error or event.message
            self._fail(rank, "failed", event.ts)
            self.failures.append({"rank": event.rank, "ts": event.ts, "error": event.message})
        elif isinstance(event, RunEnd):
            if event.status == "success":
                rank.status = "finished"
            else:
                self._fail(rank, event.status, event.ts)
                self.failures.append({"rank": event.rank, "ts": event.ts, "run_end": event.status})

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
        # A new process for this rank: the previous process's phases, waits, position and failure
        # are history (kept in the timeline and failures), not its current state.
        rank.status, rank.error, rank.failed_ts = "running", None, None
        rank.open_phases.clear()
        rank.open_checkpoint = None
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
            steady = all(phase == "steady" for phase in rank.open_phases)
            rank.steps.append(StepSample(event.step_time_s, event.tokens, steady))
        if on_timeline:
            span = self._open_span("restart")
            if span is not None:
                span.end_ts = event.ts
                self.restarts[-1].first_step_ts = event.ts

    def _collective(self, rank: RankState, event: Collective) -> None:
        latencies = self.collective_latency_s.setdefault(event.op, deque(maxlen=COLLECTIVE_WINDOW))
        latencies.append(event.latency_s)
        self.collective_count[event.op] = self.collective_count.get(event.op, 0) + 1
        self.collective_bytes[event.op] = event.bytes
        if not all(phase == "steady" for phase in rank.open_phases):
            return  # start-up and checkpoint waits say nothing about a straggler
        if rank.wait_per_step and rank.wait_per_step[-1][0] == event.step:
            rank.wait_per_step[-1][1] += event.wait_s
        else:
            rank.wait_per_step.append([event.step, event.wait_s])

    def _checkpoint(self, rank: RankState, event: Checkpoint, on_timeline: bool) -> None:
        if event.state == "begin":
            rank.open_checkpoint = event  # a newer begin supersedes an interrupted one
            return
        self._note_progress(event.ts)
        began = rank.open_checkpoint
        rank.open_checkpoint = None
        if not on_timeline or began is None or began.action != event.action:
            return
        duration_s = event.ts - began.ts
        if event.action == "save":
            self.checkpoint_saves += 1
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
        if self.last_progress_ts is None or ts - self.last_progress_ts <= self.stall_min_s:
            return  # the common case, decided without the full rule (this runs for every step event)
        stall = self._stall(ts)
        if stall is None or self.dead_ranks(ts):
            return
        idle_s, threshold_s = stall
        suspects = [suspect.rank for suspect in self._position_suspects(ts)]
        self.stalls.append(
            {"begin_ts": ts - idle_s, "end_ts": ts, "duration_s": idle_s, "threshold_s": threshold_s, "suspects": suspects}
        )

    # ---- queries -----------------------------------------------------------------------------

    def reference_rank(self, now_s: float) -> int | None:
        """Lowest rank present (not dead) that has step times; throughput comes from it alone."""
        with_steps = [rank for rank in sorted(self.ranks) if self.ranks[rank].steps]
        dead = set(self.dead_ranks(now_s))
        present = [rank for rank in with_steps if rank not in dead]
        return (present or with_steps or [None])[0]

    def step_times_s(self, now_s: float) -> list[float]:
        """Recent steady step times of the reference rank (all recent steps if none is steady)."""
        rank = self.reference_rank(now_s)
        if rank is None:
            return []
        samples = self.ranks[rank].steps
        steady = [sample.step_time_s for sample in samples if sample.steady]
        return steady or [sample.step_time_s for sample in samples]

    def throughput_tokens_per_s(self, now_s: float) -> float | None:
        """Steady-state tokens/s of the whole job, from the reference rank's recent steady steps."""
        rank = self.reference_rank(now_s)
        if rank is None:
            return None
        samples = [s for s in self.ranks[rank].steps if s.steady and s.tokens is not None]
        seconds = sum(sample.step_time_s for sample in samples)
        return sum(sample.tokens for sample in samples) / seconds if seconds > 0 else None

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

    def diagnose(self, now_s: float, chip_util_pct: ChipUtilisation | None = None) -> JobDiagnosis:
        """Verdict for on-call at `now_s`, with the ranks to look at (and their chips' utilisation)."""
        if not self.ranks:
            return JobDiagnosis("no-data", "no job events yet")
        running = [rank for rank in self.ranks.values() if rank.status == "running"]
        failed = [rank for rank in self.ranks.values() if rank.status in ("failed", "aborted")]
        dead = self.dead_ranks(now_s)
        dead_suspects = tuple(
            self._suspect(self.ranks[rank], f"no event for {now_s - self.ranks[rank].last_seen_ts:.0f} s", now_s)
            for rank in dead
        )
        if failed:
            first = min(failed, key=lambda rank: rank.failed_ts)
            what = f"error: {first.error}" if first.error else f"run ended {first.status}"
            reason = f"{len(failed)} rank(s) failed; first rank {first.rank}: {what}"
            if dead:  # a rank killed outright (OOM killer, SIGKILL) reports nothing: name it too
                reason += f"; rank(s) {', '.join(map(str, dead))} went silent without ending"
            suspects = dead_suspects + tuple(self._suspect(rank, rank.error or rank.status, now_s) for rank in failed)
            return JobDiagnosis("failed", reason, suspects)
        if not running:
            return JobDiagnosis("finished", f"all {len(self.ranks)} ranks ended with success")
        if dead:
            return JobDiagnosis("dead", f"{len(dead)} rank(s) silent for > {self.dead_after_s:.0f} s", dead_suspects)

        open_long = self._open_long_phase(running, now_s)
        if open_long is not None:
            return open_long

        stall = self._stall(now_s)
        if stall is not None:
            idle_s, threshold_s = stall
            suspects = self._with_device_evidence(self._position_suspects(now_s), chip_util_pct)
            where = self._majority_text(now_s)
            reason = f"no progress for {idle_s:.0f} s (threshold {threshold_s:.0f} s); {where}"
            return JobDiagnosis("stalled", reason, suspects, idle_s, threshold_s)

        starting = [rank for rank in running if any(phase in STARTUP_PHASES for phase in rank.open_phases)]
        if starting:
            phases = sorted({phase for rank in starting for phase in rank.open_phases if phase in STARTUP_PHASES})
            return JobDiagnosis("compiling", f"starting up: {', '.join(phases)} open on {len(starting)} rank(s)")

        straggler = self.straggler(now_s)
        if straggler is not None and straggler.slow:
            suspect = self._suspect(self.ranks[straggler.rank], f"waits {straggler.skew_s * 1e3:.0f} ms/step less than peers", now_s)
            suspects = self._with_device_evidence((suspect,), chip_util_pct)
            return JobDiagnosis("slow", f"straggler rank {straggler.rank}", suspects)
        return JobDiagnosis("steady", f"{len(running)} rank(s) stepping")

    def summary(self, now_s: float) -> dict:
        """The receipt's job section (JSON-ready)."""
        info = self.run_start
        diagnosis = self.diagnose(now_s)
        step_times = self.step_times_s(now_s)
        throughput = self.throughput_tokens_per_s(now_s)
        straggler = self.straggler(now_s)
        statuses = [rank.status for rank in self.ranks.values()]
        return {
            "run": self.run,
            "verdict": diagnosis.verdict,
            "reason": diagnosis.reason,
            "ranks": {
                "seen": len(self.ranks),
                "world_size": info.world_size if info else None,
                "hosts": len({rank.host for rank in self.ranks.values() if rank.host}),
                "running": statuses.count("running"),
                "finished": statuses.count("finished"),
                "failed": statuses.count("failed") + statuses.count("aborted"),
                "dead": len(self.dead_ranks(now_s)),
            },
            "backend": info.backend if info else None,
            "model": info.model.model_dump() if info else None,
            "precision": info.precision if info else None,
            "global_batch": info.global_batch if info else None,
            "micro_batch": info.micro_batch if info else None,
            "seq_len": info.seq_len if info else None,
            "parallel": info.parallel.model_dump() if info else None,
            "lnc": info.lnc if info else None,
            "versions": dict(info.versions) if info else None,
            "cold_compile_s": self.cold_compile_s if self.cold_compiles else None,
            "cold_compiles": self.cold_compiles,
            "compile_cache_hits": self.compile_cache_hits,
            "throughput": None
            if not step_times
            else {
                "tokens_per_s": throughput,
                "from_rank": self.reference_rank(now_s),
                "steps_in_window": len(step_times),
                "step_time_s": _percentiles(step_times),
            },
            "checkpoint_saves": {"count": self.checkpoint_saves, "save_s": _percentiles(self.checkpoint_saves_s)},
            "restarts": [
                {
                    "restart": r.restart,
                    "from_step": r.from_step,
                    "steps_redone": None
                    if r.from_step is None or r.last_step_before is None
                    else max(0, r.last_step_before - r.from_step),
                    "checkpoint_load_s": r.checkpoint_load_s,
                    "restart_to_first_step_s": None if r.first_step_ts is None else r.first_step_ts - r.ts,
                }
                for r in self.restarts
            ],
            "collectives": {
                op: {
                    "count": self.collective_count[op],
                    "bytes": self.collective_bytes[op],
                    "latency_s": _percentiles(latencies),
                }
                for op, latencies in sorted(self.collective_latency_s.items())
            }
            or "unavailable: needs the in-job emitter",
            "wait_skew": None
            if straggler is None
            else {
                "least_waiting_rank": straggler.rank,
                "skew_s": straggler.skew_s,
                "slow": straggler.slow,
                "wait_s_per_step_by_rank": {str(rank): wait for rank, wait in sorted(straggler.wait_s_by_rank.items())},
            },
            "failures": sorted(self.failures, key=lambda failure: failure["ts"]),
            "stalls": list(self.stalls) + self._ongoing_stall(diagnosis, now_s),
            "phases": [
                {"phase": span.phase, "begin_ts": span.begin_ts, "end_ts": span.end_ts, "duration_s": span.duration_s}
                for span in self.timeline
            ],
            "observed": {
                "first_event_ts": self.first_event_ts,
                "last_event_ts": self.last_event_ts,
                "first_received_s": self.first_received_s,
                "last_received_s": self.last_received_s,
            },
            "foreign_run_events": self.foreign_run_events,
            "dropped_fields": dict(sorted(self.dropped_fields.items())),
            "log_profiles": dict(sorted(self.log_profiles.items())),
        }

    @staticmethod
    def _ongoing_stall(diagnosis: JobDiagnosis, now_s: float) -> list[dict]:
        if diagnosis.verdict != "stalled":
            return []
        return [
            {
                "begin_ts": now_s - diagnosis.idle_s,
                "end_ts": None,
                "duration_s": diagnosis.idle_s,
                "threshold_s": diagnosis.stall_threshold_s,
                "suspects": [suspect.rank for suspect in diagnosis.suspects],
            }
        ]

    # ---- rules -------------------------------------------------------------------------------

    def dead_ranks(self, now_s: float) -> list[int]:
        """Running ranks that heartbeat but have sent nothing for more than `dead_after_s`."""
        return [
            rank.rank
            for rank in sorted(self.ranks.values(), key=lambda rank: rank.rank)
            if rank.status == "running" and rank.has_heartbeats and now_s - rank.last_seen_ts > self.dead_after_s
        ]


    def _stall(self, now_s: float) -> tuple[float, float] | None:
        """(seconds without progress, threshold) when the stall rule holds, else None."""
        if self.last_progress_ts is None:
            return None
        running = [rank for rank in self.ranks.values() if rank.status == "running"]
        if any(self._long_phase(rank) for rank in running):
            return None
        step_times = self.step_times_s(now_s)
        threshold_s = max(self.stall_factor * median(step_times), self.stall_min_s) if step_times else self.stall_min_s
        idle_s = now_s - self.last_progress_ts
        return (idle_s, threshold_s) if idle_s > threshold_s else None

    @staticmethod
    def _long_phase(rank: RankState) -> tuple[str, float] | None:
        """(phase, begin ts) of an open phase known to run long, checkpoints first."""
        if rank.open_checkpoint is not None:
            return "checkpoint", rank.open_checkpoint.ts
        return next(((phase, ts) for phase, ts in rank.open_phases.items() if phase in LONG_PHASES), None)

    def _open_long_phase(self, running: list[RankState], now_s: float) -> JobDiagnosis | None:
        open_long = [found for rank in running if (found := self._long_phase(rank))]
        if not open_long:
            return None
        checkpointing = [found for found in open_long if found[0] == "checkpoint"]
        shown = checkpointing or open_long
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

    def _majority(self, positions: dict[tuple[int, str], list[int]]) -> tuple[int, str] | None:
        if not positions:
            return None
        return max(
            positions,
            key=lambda position: (
                len(positions[position]),
                position[1].startswith(COLLECTIVE_REGION_PREFIX),
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

    def _suspect(self, rank: RankState, why: str, now_s: float) -> Suspect:
        return Suspect(
            rank=rank.rank,
            why=why,
            host=rank.host,
            chip=rank.chip,
            core=rank.core,
            step=rank.heartbeat_step if rank.heartbeat_step is not None else rank.last_step,
            region=rank.region,
            region_age_s=None if rank.region_since is None else now_s - rank.region_since,
        )

    def _with_device_evidence(
        self, suspects: tuple[Suspect, ...], chip_util_pct: ChipUtilisation | None
    ) -> tuple[Suspect, ...]:
        """Add each suspect's chip utilisation and the median of the other chips in the job."""
        if chip_util_pct is None:
            return suspects
        chips = {(rank.host, rank.chip) for rank in self.ranks.values() if rank.host is not None and rank.chip is not None}
        with_evidence = []
        for suspect in suspects:
            if suspect.host is None or suspect.chip is None:
                with_evidence.append(suspect)
                continue
            peers = [chip_util_pct(host, chip) for host, chip in chips if (host, chip) != (suspect.host, suspect.chip)]
            peers = [value for value in peers if value is not None]
            with_evidence.append(
                replace(
                    suspect,
                    chip_util_pct=chip_util_pct(suspect.host, suspect.chip),
                    peer_chip_util_median_pct=median(peers) if peers else None,
                )
            )
        return tuple(with_evidence)
