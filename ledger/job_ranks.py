"""One rank of a job as the job ledger holds it: its latest process's state and recent steps.

Plain state, folded by `ledger/job.py`; the steady-state rules over it are in
`ledger/job_steady.py`, the failure and blame rules in `ledger/job_blame.py`.
"""

from bisect import bisect_left, insort
from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from trnwatch.collectors.job_records import Checkpoint

STEP_WINDOW = 256
WAIT_WINDOW_STEPS = 32
STARTUP_LONG_PHASES = ("init", "compile")
CHECKPOINT_REGION = "checkpoint"
COLLECTIVE_REGION_PREFIX = "collective"  # a heartbeat region "collective:<op>": the rank waits on its peers

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


class WaitWindow:
    """A rank's wait for peers per step, (step, wait_s), over its last WAIT_WINDOW_STEPS steps,
    with the same waits kept sorted beside them: the median is read at every refresh for every
    rank (the straggler rule), so it is kept ready as each collective folds, not sorted then."""

    __slots__ = ("steps", "_sorted_s")

    def __init__(self) -> None:
        self.steps: deque[tuple[int, float]] = deque(maxlen=WAIT_WINDOW_STEPS)
        self._sorted_s: list[float] = []

    def add(self, step: int, wait_s: float) -> None:
        """Add one collective's wait to its step: the newest step's total, or a new step (the
        oldest leaves the window when it is full)."""
        if self.steps and self.steps[-1][0] == step:
            total_s = self.steps[-1][1]
            self._drop(total_s)
            wait_s += total_s
            self.steps[-1] = (step, wait_s)
        else:
            if len(self.steps) == self.steps.maxlen:
                self._drop(self.steps[0][1])
            self.steps.append((step, wait_s))
        insort(self._sorted_s, wait_s)

    def _drop(self, wait_s: float) -> None:
        del self._sorted_s[bisect_left(self._sorted_s, wait_s)]

    def clear(self) -> None:
        self.steps.clear()
        self._sorted_s.clear()

    def __len__(self) -> int:
        return len(self.steps)

    def median_s(self) -> float:
        """`statistics.median` of the window's waits (the mean of the middle two when even)."""
        n = len(self._sorted_s)
        if n % 2:
            return self._sorted_s[n // 2]
        return (self._sorted_s[n // 2 - 1] + self._sorted_s[n // 2]) / 2


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
    start_ticks: int | None = None  # the pid's process's start (run_start), so a reused pid is told apart
    pid_ts: float | None = None  # when its run_start said the pid was running
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
    wait_per_step: WaitWindow = field(default_factory=WaitWindow)
    error: str | None = None
    failed_ts: float | None = None
    warnings: int = 0  # non-fatal errors since its latest start
    last_warning: str | None = None
    started_ts: float | None = None  # its latest process's start (run_start), else its first event
    pause_left_ts: dict[str, float] = field(default_factory=dict)  # pause kind -> when it last left one
    compile_ended_ts: float | None = None  # its latest compile's end (a cold compile or a cache hit)
    left_collective: str | None = None  # the collective region its heartbeats last left (this process)

    def stepped_since_start(self) -> bool:
        """True once its latest process has taken a step."""
        return self.last_step_ts is not None and (self.started_ts is None or self.last_step_ts >= self.started_ts)

    def in_collective(self) -> bool:
        """True while its heartbeats say it is in a collective (waiting on its peers)."""
        return self.has_heartbeats and self.region is not None and self.region.startswith(COLLECTIVE_REGION_PREFIX)

    def blocking_pause(self) -> tuple[str, float] | None:
        """(phase, since) of an open pause that explains no steps: a blocking checkpoint first."""
        if self.open_checkpoint is not None and self.open_checkpoint.blocking is not False:
            return "checkpoint", self.open_checkpoint.ts
        if "checkpoint" in self.open_phases:
            return "checkpoint", self.open_phases["checkpoint"]
        if self.region == CHECKPOINT_REGION and self.region_since is not None:
            return "checkpoint", self.region_since
        if not self.open_phases:  # most ranks, most of the time: nothing open
            return None
        return next(((phase, ts) for phase, ts in self.open_phases.items() if phase in STARTUP_LONG_PHASES), None)
