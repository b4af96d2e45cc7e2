"""Job telemetry contract `trnwatch.job/1`: one JSON object per line, one file per rank.

Every event carries `v`, `ts` (unix seconds on the job host), `run`, `rank` and `event`; the rest
depends on `event`. Unknown extra fields are ignored (so a newer emitter can add fields), wrong
types are rejected (strict: "3" is not a step number, `true` is not a rank).

Timing fields must be finite numbers. `loss` may be NaN or Infinity (Python's json writes them as
bare `NaN` / `Infinity`) because a diverging loss is data the monitor must show, not a bad line.

Some fields are nullable because a source cannot always know them: `step.step_time_s`,
`step.tokens`, `checkpoint.step` (passive sources: the job's log, its checkpoint directory) and
`step.compute_s` (passive sources, and XLA jobs whose collectives run inside the step graph).
Optional additions:
`phase.cache` (compile phases: persistent-cache hit or miss), `checkpoint.tag`,
`heartbeat.dropped_events` (events the emitter had to drop because its queue was full).
"""

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

SCHEMA_VERSION = "trnwatch.job/1"
MAX_ERRORS_SHOWN = 3

FiniteSeconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
UnixSeconds = Annotated[float, Field(allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0)]
PhaseName = Literal["init", "compile", "warmup", "steady", "checkpoint", "probe", "eval"]
BeginEnd = Literal["begin", "end"]


class _Strict(BaseModel):
    # ser_json_inf_nan: a NaN loss must survive a round trip (sources re-serialise events).
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True, ser_json_inf_nan="constants")


class _EventBase(_Strict):
    v: Literal["trnwatch.job/1"]
    ts: UnixSeconds
    run: str
    rank: Count


class ModelInfo(_Strict):
    """What is being trained: a name and its total parameter count (all shards)."""

    name: str
    params: Count


class Parallelism(_Strict):
    """Parallel degrees; world size = tp * pp * dp."""

    tp: Annotated[int, Field(ge=1)]
    pp: Annotated[int, Field(ge=1)]
    dp: Annotated[int, Field(ge=1)]


class RunStart(_EventBase):
    """A rank's process started (restart > 0 when it resumed from a checkpoint)."""

    event: Literal["run_start"]
    world_size: Annotated[int, Field(ge=1)]
    host: str
    pid: Count
    local_rank: Count
    backend: Literal["neuron", "cpu"]
    core: Count | None
    chip: Count | None
    model: ModelInfo
    precision: str
    global_batch: Annotated[int, Field(ge=1)]
    micro_batch: Annotated[int, Field(ge=1)]
    seq_len: Annotated[int, Field(ge=1)]
    parallel: Parallelism
    versions: dict[str, str]
    restart: Count
    lnc: Annotated[int, Field(ge=1)] | None


class Phase(_EventBase):
    """The rank entered or left a phase of the run."""

    event: Literal["phase"]
    phase: PhaseName
    state: BeginEnd
    cache: Literal["hit", "miss"] | None = None


class Step(_EventBase):
    """The rank finished an optimizer step. `tokens` counts the whole job's tokens in the step."""

    event: Literal["step"]
    step: Count
    step_time_s: FiniteSeconds | None
    compute_s: FiniteSeconds | None
    tokens: Count | None
    loss: float | None


class Collective(_EventBase):
    """One timed collective on this rank: `latency_s` includes `wait_s`, the wait for peers."""

    event: Literal["collective"]
    op: str
    bytes: Count
    latency_s: FiniteSeconds
    wait_s: FiniteSeconds
    step: Count


class Checkpoint(_EventBase):
    """A checkpoint save or load began or ended."""

    event: Literal["checkpoint"]
    action: Literal["save", "load"]
    state: BeginEnd
    step: Count | None
    tag: str | None = None


class Heartbeat(_EventBase):
    """Side-thread liveness: the step the main thread works on and the region it is in."""

    event: Literal["heartbeat"]
    step: Count
    region: str
    region_since: UnixSeconds
    dropped_events: Count | None = None


class Error(_EventBase):
    """The rank hit an error (normally followed by run_end failed)."""

    event: Literal["error"]
    message: str


class RunEnd(_EventBase):
    """The rank's process is ending."""

    event: Literal["run_end"]
    status: Literal["success", "failed", "aborted"]


JobEvent = Annotated[
    Union[RunStart, Phase, Step, Collective, Checkpoint, Heartbeat, Error, RunEnd],
    Field(discriminator="event"),
]

_JOB_EVENT = TypeAdapter(JobEvent)


class JobLineError(ValueError):
    """A line that is not a valid `trnwatch.job/1` event; the message says what is wrong."""


def parse_job_line(text: str) -> JobEvent:
    """Parse one line into a typed event; raise `JobLineError` naming the first problem."""
    try:
        return _JOB_EVENT.validate_json(text)
    except ValidationError as exc:
        details = []
        for error in exc.errors(include_url=False)[:MAX_ERRORS_SHOWN]:
            where = ".".join(str(part) for part in error["loc"][1:])  # loc[0] is the union tag
            details.append(f"{where}: {error['msg']}" if where else error["msg"])
        more = exc.error_count() - len(details)
        suffix = f" (+{more} more)" if more else ""
        raise JobLineError(f"bad {SCHEMA_VERSION} line: {'; '.join(details)}{suffix}") from None


def job_event_json_schema() -> dict:
    """JSON Schema (draft 2020-12) of one `trnwatch.job/1` line."""
    schema = _JOB_EVENT.json_schema()
    schema["$id"] = SCHEMA_VERSION
    schema["title"] = "trnwatch job telemetry event"
    return schema
