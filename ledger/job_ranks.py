"""One rank of a job as the job ledger holds it: its latest process's state and recent steps.

Plain state, folded by `ledger/job.py`; the steady-state rules over it are in
`ledger/job_steady.py`, the failure and blame rules in `ledger/job_blame.py`.
"""

from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from trnwatch.collectors.job_events import Checkpoint

STEP_WINDOW = 256
WAIT_WINDOW_STEPS = 32
STARTUP_LONG_PHASES = ("init", "compile")
CHECKPOINT_REGION = "checkpoint"

StepKind = Literal["steady", "open", "other", "late"]  # open: no phase open


@dataclass(slots=True)
class StepSample:
    step: int
    ts: float
    step_time_s: float
    tokens: int | None
    kind: StepKind
    open_index: int  # how many steps with no phase open this process took before this one
    tokens_per_s_per_device: float | None = None  # as a passive log reports it (TorchTitan's tps)


RankStatus = Literal["running", "finished", "failed", "aborted"]


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
    status: RankStatus = "running"
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
