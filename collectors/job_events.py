"""Job telemetry contract `trnwatch.job/1`: one JSON object per line, one file per rank.

Every event carries `v`, `ts` (unix seconds on the job host), `run`, `rank` and `event`; the rest
depends on `event`. Wrong types are rejected (strict: "3" is not a step number, `true` is not a
rank).

Changes within /1 are additive, and three rules keep old and new emitters working together:

1. Every field not in the first published list (issue 4's list, as of commit 9d93a37) is
   optional: `run_start.lnc`, `phase.cache`, `step.seq_len`, `checkpoint.tag`,
   `checkpoint.blocking`, `heartbeat.dropped_events`, `error.source`, `error.exit_code`,
   `error.signal`, `error.failed_ts`, `step.tokens_per_s_per_device`, `error.severity`. An
   emitter written to the first list loses nothing.
2. Unknown fields are ignored (a newer emitter may add some).
3. A wrong-typed optional field costs that field, never the event: `decode_job_line` drops it
   (the event keeps its default, null) and names it, and the ledger counts it. A wrong-typed
   field of the first list still rejects the line: without it the event means nothing.

Timing fields must be finite numbers. `loss` may be NaN or Infinity (Python's json writes them as
bare `NaN` / `Infinity`) because a diverging loss is data the monitor must show, not a bad line.

Some fields are nullable because a source cannot always know them: `step.step_time_s`,
`step.tokens`, `checkpoint.step` (passive sources: the job's log, its checkpoint directory) and
`step.compute_s` (passive sources, and XLA jobs whose collectives run inside the step graph).
What the optional fields mean: `phase.cache` (compile phases: persistent-cache hit or miss),
`checkpoint.tag`, `checkpoint.blocking` (absent or null: a synchronous save that blocks steps;
false: a background save during which steps go on), `heartbeat.dropped_events` (events the
emitter had to drop because its queue was full), `error.source` (who reported it: the job, the
Neuron runtime or the launcher), `error.exit_code` / `error.signal` (how the process ended, when
known), `error.failed_ts` (unix s when the failure happened, if the line says, else `ts`),
`step.seq_len` (the step's sequence length when it varies), `step.tokens_per_s_per_device`
(tokens/s per device as a passive log reports it, TorchTitan's `tps`; never the job's rate),
`error.severity` (`fatal`, the default when absent or null: the rank failed; `warning`: a
non-fatal condition the rank goes on after, such as the Neuron collectives' `CCOM WARN ...
retrying`, counted and kept as evidence but never a failure; a monitor older than this field
reads every error as fatal), `error.root_cause` (true: the launcher named this failure the first
it observed, torchrun's "Root Cause (first observed failure)"), `error.chip` / `error.core` (the
Neuron device and core the error names: a runtime's device-OOM `on ND 0:NC 4`, a hardware error's
`nd-id=0 nc-id=0`). `error.source` `hardware` (added within /1; an older monitor drops the field):
the device reported a hardware error (NEURON_HW_ERR).

The `launcher` event (added within /1; a monitor older than it rejects the line and counts it)
is what a launcher did to every worker at once, as passive sources read it from the launcher's
own log (the in-job emitter never writes it): `restart` (it started attempt `attempt` of the
workers after a failure; torchrun --max-restarts) or `stopped` (the launcher itself was ended by
`signal` and stopped the workers). Its `rank` is the lowest rank: it concerns every rank.
"""

import json
from dataclasses import dataclass
from typing import Annotated, Final, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from trnwatch.collectors.job_records import DecodeFailed, JobRecord, decode_record, record_of

SCHEMA_VERSION: Final = "trnwatch.job/1"
# Source ids of the passive job sources (a job's own log, its checkpoint folder): their events'
# run id is a name the monitor gave, so they join the emitter's run instead of rejecting it.
PASSIVE_SOURCE_PREFIXES: Final = ("joblog:", "ckpt:")
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
    lnc: Annotated[int, Field(ge=1)] | None = None
    # The process's start in clock ticks after boot (/proc/PID/stat field 22, Linux): with `pid`,
    # which process the rank is (a dead rank's pid may be another process's later).
    start_ticks: Count | None = None


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
    seq_len: Annotated[int, Field(ge=1)] | None = None
    # From passive logs that report it (TorchTitan's `tps`): tokens per second per device as the
    # framework computed it; never taken for the job's rate.
    tokens_per_s_per_device: FiniteSeconds | None = None


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
    blocking: bool | None = None


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
    source: Literal["job", "runtime", "launcher", "hardware"] | None = None
    exit_code: int | None = None
    signal: str | None = None
    failed_ts: UnixSeconds | None = None
    severity: Literal["fatal", "warning"] | None = None  # absent or null: fatal
    root_cause: bool | None = None  # the launcher named it the first failure it observed
    chip: Count | None = None  # the Neuron device the error names
    core: Count | None = None  # the NeuronCore the error names


class Launcher(_EventBase):
    """What the launcher did to every worker: restarted them (attempt N), or was stopped by a signal."""

    event: Literal["launcher"]
    action: Literal["restart", "stopped"]
    attempt: Count | None = None  # restart: the attempt that starts (1 = the first restart)
    signal: str | None = None  # stopped: the signal that ended the launcher
    message: str = ""


class RunEnd(_EventBase):
    """The rank's process is ending."""

    event: Literal["run_end"]
    status: Literal["success", "failed", "aborted"]


JobEvent = Annotated[
    RunStart | Phase | Step | Collective | Checkpoint | Heartbeat | Error | RunEnd | Launcher,
    Field(discriminator="event"),
]

_JOB_EVENT = TypeAdapter(JobEvent)


class JobLineError(ValueError):
    """A line that is not a valid `trnwatch.job/1` event; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class DecodedJobLine:
    """A valid event as the record the ledger folds (collectors/job_records.py), and the
    optional fields that were dropped for a wrong type ("step.seq_len")."""

    event: JobRecord
    dropped_fields: tuple[str, ...] = ()


def _optional_fields(model: type[BaseModel]) -> frozenset[str]:
    return frozenset(name for name, info in model.model_fields.items() if not info.is_required())


_OPTIONAL_FIELDS = {  # event tag -> fields added after the first published list
    get_args(model.model_fields["event"].annotation)[0]: _optional_fields(model)
    for model in get_args(get_args(JobEvent)[0])
}


def decode_job_line(text: str | bytes) -> DecodedJobLine:
    """Decode one line into its record: one typed msgspec decode for a valid line; a line it
    refuses is read again by the contract's models, so a wrong-typed optional field is dropped
    and named, a NaN loss is kept, and anything else wrong raises `JobLineError` naming the
    first problems."""
    try:
        return DecodedJobLine(decode_record(text))
    except DecodeFailed:
        pass
    try:
        return DecodedJobLine(record_of(_JOB_EVENT.validate_json(text)))
    except ValidationError as exc:
        first_error = exc
    # Slow path, only for invalid lines: drop the optional fields that failed, then try again.
    errors = first_error.errors(include_url=False)
    tag = errors[0]["loc"][0] if errors[0]["loc"] else None
    optional = _OPTIONAL_FIELDS.get(tag, frozenset())
    bad = {error["loc"][1] for error in errors if len(error["loc"]) > 1}
    if optional and bad and bad <= optional:
        fields = json.loads(text)  # valid JSON: the tag was found
        for name in bad:
            fields.pop(name, None)
        try:
            event = _JOB_EVENT.validate_json(json.dumps(fields))
        except ValidationError:
            pass
        else:
            return DecodedJobLine(record_of(event), tuple(sorted(f"{tag}.{name}" for name in bad)))
    details = []
    for error in errors[:MAX_ERRORS_SHOWN]:
        where = ".".join(str(part) for part in error["loc"][1:])  # loc[0] is the union tag
        details.append(f"{where}: {error['msg']}" if where else error["msg"])
    more = first_error.error_count() - len(details)
    suffix = f" (+{more} more)" if more else ""
    raise JobLineError(f"bad {SCHEMA_VERSION} line: {'; '.join(details)}{suffix}")


def parse_job_line(text: str | bytes) -> JobRecord:
    """Parse one line into its record (dropping wrong-typed optional fields); raise
    `JobLineError` naming the first problem."""
    return decode_job_line(text).event


def job_event_json_schema() -> dict:
    """JSON Schema (draft 2020-12) of one `trnwatch.job/1` line."""
    schema = _JOB_EVENT.json_schema()
    schema["$id"] = SCHEMA_VERSION
    schema["title"] = "trnwatch job telemetry event"
    return schema


class JobLogStats(BaseModel):
    """What a passive log source has read so far (a "job-log" line, collectors/job_log.py): the
    profile in use (None: none detected yet), lines read and lines no rule matched."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)
    profile: str | None
    lines: int
    unparsed: int
    note: str | None = None  # the profile's word on a log that gives no steps (LogProfile.no_steps)
    error_files: dict[str, int] = {}  # torchrun `@record` error files: "read", or why not (launcher_log)


def parse_job_log_stats(text: str) -> JobLogStats:
    """A "job-log" line; raises pydantic's ValidationError (a ValueError) if it is not one."""
    return JobLogStats.model_validate_json(text)
