"""The receipt's and snapshot's job section, typed: what `JobLedger.summary(now_s)` returns.

Every key is a field of a pydantic model here, so `trnwatch schema receipt` shows all of them.
The models hold figures the job ledger computed; they compute nothing themselves.
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict

from trnwatch.collectors.job_events import ModelInfo, Parallelism

Verdict = Literal[
    "no-data",
    "starting",
    "compiling",
    "checkpointing",
    "steady",
    "slow",
    "late",
    "stalled",
    "dead",
    "failed",
    "aborted",
    "finished",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Percentiles(_Model):
    """Nearest-rank percentiles (seconds); null when there was no sample."""

    p50: float | None
    p90: float | None
    p99: float | None


class SuspectEvidence(_Model):
    """Why a rank is named: the rule's words, its heartbeat, its chip against its peers, its error."""

    why: str
    heartbeat_age_s: float | None  # seconds since its latest heartbeat
    region_age_s: float | None  # seconds it has been in `region`
    chip_util_pct: float | None  # its chip's latest utilisation (device telemetry), if joined
    peer_chip_util_median_pct: float | None  # median of the job's other chips
    error: str | None  # its error line (job, runtime or launcher), if any
    warnings: int = 0  # non-fatal errors it reported (runtime warnings), never a failure
    last_warning: str | None = None  # the latest of them


class Suspect(_Model):
    """A rank to look at, where it runs (as the job reports it) and the evidence."""

    rank: int
    host: str | None
    chip: int | None
    core: int | None
    region: str | None  # heartbeat region (`dataloader`, `collective:all_reduce`, ...)
    step: int | None  # the step it works on (heartbeat), else its last step
    evidence: SuspectEvidence
    # Its process: the pid this host's rank-process pass found (else its run_start's), and the
    # state that pass read (running, sleeping, stopped, disk-wait, zombie, other); null when unknown.
    pid: int | None = None
    process_state: str | None = None


class RankCounts(_Model):
    """running + finished + failed + dead + unknown = world_size (when the world size is known)."""

    seen: int
    world_size: int | None
    hosts: int
    running: int
    finished: int
    failed: int  # ended failed or aborted, or reported an error, since its latest start
    dead: int  # silent past the dead threshold, or gone without a word while its peers failed
    unknown: int  # ranks of the world size never heard from


class Thresholds(_Model):
    """The rules' thresholds at the time judged (seconds)."""

    late_s: float  # max(late factor x p99 of recent steady step times, late_after_s)
    stall_s: float  # max(stall factor x median of recent steady step times, stall_after_s)
    dead_after_s: float
    late_after_s: float  # the configured floors (--late-after, --stall-after)
    stall_after_s: float


class Throughput(_Model):
    """Steady-state figures over steady steps only, of one rank (so the job's tokens count once).

    Steady begins at an explicit `steady` phase (`boundary` "explicit"), else after the warm-up
    inferred from step times ("inferred"). Steps in other phases, during a blocking checkpoint or
    ending a stall are left out, so no stalled, checkpoint or restart time is averaged in.
    """

    tokens_per_s: float | None
    from_rank: int
    boundary: Literal["explicit", "inferred"]
    warmup_steps: int  # steps before the steady boundary (this rank's latest process)
    steps_in_window: int  # steady steps the figures cover
    first_step: int
    last_step: int
    begin_ts: float  # start of the first covered step (job clock)
    end_ts: float  # end of the last covered step
    steady_s: float  # sum of the covered steps' times (the time tokens/s is averaged over)
    excluded_steps: int  # recent steps left out (warm-up, other phases, checkpoint, stall)
    last_step_age_s: float  # seconds from the last covered step to the time judged
    step_time_s: Percentiles
    # The median over the same steps of the rate a passive log reports per device (TorchTitan's
    # `tps`: local tokens / (time x non-data-parallel size)); not the job's rate; null if none.
    tokens_per_s_per_device: float | None = None


class CheckpointSaves(_Model):
    count: int
    background: int  # saves with blocking=false (steps go on during them)
    save_s: Percentiles


class RestartEntry(_Model):
    restart: int
    from_step: int | None
    steps_redone: int | None
    checkpoint_load_s: float | None
    restart_to_first_step_s: float | None


class CollectiveEntry(_Model):
    count: int
    bytes: int
    latency_s: Percentiles


class WaitSkew(_Model):
    least_waiting_rank: int
    skew_s: float
    slow: bool
    wait_s_per_step_by_rank: dict[str, float]


class Failure(_Model):
    """A rank's failure report. `role` is "first" for the one that failed first in time (the
    cause FAILED names), "consequence" for the ones after it."""

    rank: int
    ts: float  # when it failed (the report's failed_ts, else its ts; a silent rank: its last event)
    role: Literal["first", "consequence"]
    kind: Literal["error", "run_end", "silent"]
    error: str | None
    run_end: str | None
    source: str | None
    exit_code: int | None
    signal: str | None


class WarningEntry(_Model):
    """A non-fatal error a rank reported (`error` with severity `warning`): evidence, not a failure."""

    rank: int
    ts: float
    source: str | None
    message: str


class Warnings(_Model):
    """Non-fatal errors (runtime warnings such as a retried collective timeout): how many, on how
    many ranks, and the latest few; they never change the verdict."""

    count: int
    ranks: int
    latest: list[WarningEntry]


# What a stall was: no progress past the stall threshold, or a pause past its limit (ledger/job_pauses.py).
StallCause = Literal["no-progress", "checkpoint", "compile", "bootstrap"]


class Stall(_Model):
    begin_ts: float
    end_ts: float | None  # null while ongoing at the time judged
    duration_s: float
    threshold_s: float  # the stall threshold, or the pause's limit
    suspects: list[Suspect]
    cause: StallCause = "no-progress"


class PhaseEntry(_Model):
    phase: str
    begin_ts: float
    end_ts: float | None
    duration_s: float | None


class Observed(_Model):
    first_event_ts: float | None
    last_event_ts: float | None
    first_received_s: float | None
    last_received_s: float | None


class SourceSteps(_Model):
    """What one source told of the run's steps: the highest, how many, and its losses."""

    last_step: int | None
    steps: int
    losses: int
    last_loss: float | None
    last_loss_step: int | None


class LossPoint(_Model):
    """One step's loss: the most precise value told, each source's, and whether they agree (to
    the console's 4 significant digits)."""

    step: int
    loss: float
    by_source: dict[str, float]
    agree: bool


class Progress(_Model):
    """The run's progress joined across sources (ledger/job_progress.py)."""

    last_step: int | None  # the highest step any source told
    last_step_source: str | None
    sources: dict[str, SourceSteps]
    losses: list[LossPoint]  # the newest steps with a loss, in step order
    losses_disagreeing: int  # of those, the steps whose sources disagree


class RankProcessRow(_Model):
    """A rank's process on this host as the latest pass read it (collectors/rank_processes.py)."""

    rank: int
    local_rank: int | None
    host: str
    pid: int
    ppid: int
    state: Literal["running", "sleeping", "stopped", "disk-wait", "zombie", "other"]
    state_for_s: float  # since the first pass that read it in this state
    cpu_pct: float | None  # CPU share between its last two passes (100 = one core); null until seen twice
    rss_bytes: int
    via: Literal["stdout", "launcher", "job-dir"]  # how it was tied to the job
    seen_at: float  # unix s of the latest pass that read it


class JobSection(_Model):
    """The job scope judged at one moment (the receipt: the window's end)."""

    run: str | None
    verdict: Verdict
    reason: str
    suspects: list[Suspect]  # first suspect first; empty when the verdict is steady
    ranks: RankCounts
    thresholds: Thresholds
    backend: str | None
    model: ModelInfo | None
    precision: str | None
    global_batch: int | None
    micro_batch: int | None
    seq_len: int | None
    parallel: Parallelism | None
    lnc: int | None
    versions: dict[str, str] | None
    cold_compile_s: float | None
    cold_compiles: int
    compile_cache_hits: int
    throughput: Throughput | None
    checkpoint_saves: CheckpointSaves
    restarts: list[RestartEntry]
    collectives: dict[str, CollectiveEntry] | Literal["unavailable: needs the in-job emitter"]
    wait_skew: WaitSkew | None
    failures: list[Failure]
    warnings: Warnings
    stalls: list[Stall]
    phases: list[PhaseEntry]
    observed: Observed
    dropped_fields: dict[str, int]  # wrong-typed optional fields dropped by the decoder
    log_profiles: dict[str, str | None]  # passive job log source -> the log profile reading it
    # which source gave what: "job-dir" (the emitter's rank files) or a passive source's id
    # (joblog:..., ckpt:...) -> events folded from it by kind
    sources: dict[str, dict[str, int]] = {}
    progress: Progress | None = None  # steps and losses by source, joined
    # The job's rank processes on this host (empty: none found, or --no-rank-processes), by rank.
    processes: list[RankProcessRow] = []
