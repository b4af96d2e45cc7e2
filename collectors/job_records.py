"""The typed records of `trnwatch.job/1` lines that the ledger folds, decoded by msgspec.

The contract is collectors/job_events.py (its pydantic models give the JSON Schema, build the
passive sources' events and word the errors); these Structs mirror it field for field
(tests/test_job_records.py checks both), so one typed decode turns a line's bytes into the
record the ledger folds (`decode_record`), as the neuron-monitor path does. A line msgspec
refuses is not rejected here: `decode_job_line` reads it again by the contract, which drops a
wrong-typed optional field, accepts a `NaN` loss (not JSON, so msgspec refuses it) and words
what is wrong; it builds the same record from what it accepted (`record_of`).

The bounds are the contract's: counts >= 0, timing fields finite (a float past the largest
double, `1e999`, decodes as infinity, which the bound refuses), degrees >= 1. Built by keyword,
a Struct is not validated (tests build records that way).
"""

from typing import Annotated, ClassVar, Final, Literal

import msgspec
from pydantic import BaseModel

_MAX_FLOAT: Final = 1.7976931348623157e308
FiniteSeconds = Annotated[float, msgspec.Meta(ge=0, le=_MAX_FLOAT)]
UnixSeconds = Annotated[float, msgspec.Meta(ge=-_MAX_FLOAT, le=_MAX_FLOAT)]
Count = Annotated[int, msgspec.Meta(ge=0)]
Degree = Annotated[int, msgspec.Meta(ge=1)]
PhaseName = Literal["init", "compile", "warmup", "steady", "checkpoint", "probe", "eval"]
BeginEnd = Literal["begin", "end"]


# gc=False: a record is a tree of frozen values (JSON has no cycles): the collector never walks it.
class _Part(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    pass


class ModelInfo(_Part, frozen=True):
    name: str
    params: Count


class Parallelism(_Part, frozen=True):
    tp: Degree
    pp: Degree
    dp: Degree


class _Event(msgspec.Struct, frozen=True, gc=False, kw_only=True, tag_field="event"):
    event: ClassVar[str]  # the line's `event`: the Struct's tag
    v: Literal["trnwatch.job/1"]
    ts: UnixSeconds
    run: str
    rank: Count


class RunStart(_Event, frozen=True, tag="run_start"):
    event: ClassVar[str] = "run_start"
    world_size: Degree
    host: str
    pid: Count
    local_rank: Count
    backend: Literal["neuron", "cpu"]
    core: Count | None
    chip: Count | None
    model: ModelInfo
    precision: str
    global_batch: Degree
    micro_batch: Degree
    seq_len: Degree
    parallel: Parallelism
    versions: dict[str, str]
    restart: Count
    lnc: Degree | None = None
    start_ticks: Count | None = None  # /proc/PID/stat field 22 (collectors/job_events.py RunStart)


class Phase(_Event, frozen=True, tag="phase"):
    event: ClassVar[str] = "phase"
    phase: PhaseName
    state: BeginEnd
    cache: Literal["hit", "miss"] | None = None


class Step(_Event, frozen=True, tag="step"):
    event: ClassVar[str] = "step"
    step: Count
    step_time_s: FiniteSeconds | None
    compute_s: FiniteSeconds | None
    tokens: Count | None
    loss: float | None
    seq_len: Degree | None = None
    tokens_per_s_per_device: FiniteSeconds | None = None


class Collective(_Event, frozen=True, tag="collective"):
    event: ClassVar[str] = "collective"
    op: str
    bytes: Count
    latency_s: FiniteSeconds
    wait_s: FiniteSeconds
    step: Count


class Checkpoint(_Event, frozen=True, tag="checkpoint"):
    event: ClassVar[str] = "checkpoint"
    action: Literal["save", "load"]
    state: BeginEnd
    step: Count | None
    tag: str | None = None
    blocking: bool | None = None


class Heartbeat(_Event, frozen=True, tag="heartbeat"):
    event: ClassVar[str] = "heartbeat"
    step: Count
    region: str
    region_since: UnixSeconds
    dropped_events: Count | None = None


class Error(_Event, frozen=True, tag="error"):
    event: ClassVar[str] = "error"
    message: str
    source: Literal["job", "runtime", "launcher", "hardware"] | None = None
    exit_code: int | None = None
    signal: str | None = None
    failed_ts: UnixSeconds | None = None
    severity: Literal["fatal", "warning"] | None = None
    root_cause: bool | None = None
    chip: Count | None = None
    core: Count | None = None


class Launcher(_Event, frozen=True, tag="launcher"):
    event: ClassVar[str] = "launcher"
    action: Literal["restart", "stopped"]
    attempt: Count | None = None
    signal: str | None = None
    message: str = ""


class RunEnd(_Event, frozen=True, tag="run_end"):
    event: ClassVar[str] = "run_end"
    status: Literal["success", "failed", "aborted"]


JobRecord = RunStart | Phase | Step | Collective | Checkpoint | Heartbeat | Error | RunEnd | Launcher
RECORD_TYPES: Final[dict[str, type[_Event]]] = {
    cls.event: cls for cls in (RunStart, Phase, Step, Collective, Checkpoint, Heartbeat, Error, RunEnd, Launcher)
}
_DECODER: Final = msgspec.json.Decoder(JobRecord)
decode_record = _DECODER.decode  # str or bytes -> a record; raises msgspec.ValidationError / DecodeError
DecodeFailed: Final = (msgspec.ValidationError, msgspec.DecodeError)


def record_of(event: BaseModel) -> JobRecord:
    """The record of an event the contract's pydantic model accepted (the slow path's answer)."""
    cls = RECORD_TYPES[event.event]  # type: ignore[attr-defined]
    fields = {name: getattr(event, name) for name in cls.__struct_fields__}
    if cls is RunStart:
        fields["model"] = ModelInfo(**fields["model"].model_dump())
        fields["parallel"] = Parallelism(**fields["parallel"].model_dump())
    return cls(**fields)  # type: ignore[return-value]
