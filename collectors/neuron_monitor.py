"""The neuron-monitor report format: typed model and the one function that decodes a line.

Field names follow the neuron-monitor user guide (see ../shared/reference/neuron-telemetry.md
section 1) and the real captures in ../shared/realworld/. The model (msgspec Structs: the one
schema, decoded by msgspec's typed JSON decoder, see README "Performance") is tolerant where real
reports vary and strict where a value would be misread:

- every group and every field may be missing or null; unknown extra fields are ignored;
- `error` strings are kept beside whatever values came with them (real reports carry zeroed
  values next to an error, so a group with an error is not trusted for figures);
- types are strict: a string where a count belongs, a bool, a float where an integer belongs,
  NaN or Infinity (not JSON) rejects the whole line, because guessing what a malformed report
  meant would put a figure on screen nobody measured;
- every value has a bound (collectors/limits.py): bytes and counts >= 0, 0 <= utilisation
  <= 100, sizes and indices below the limits of any real host. A value past its bound is a
  *field* rejection: it is removed as if the report had not carried it (set to null at the
  nearest place that may be null) and the rest of the report is kept (`FieldRejection`).

A rejected line is reported as `ReportRejected` with a short reason; the caller counts it per
source and the stream goes on.

Every Struct keeps a keyword constructor (`Report(neuron_runtime_data=[...])`); built that way it
is not validated, so a decoder building Reports from other data (collectors/prometheus.py) holds
its values to the same bounds itself or passes plain data through `validate_report`.
"""

import functools
from dataclasses import dataclass
from typing import Annotated, ClassVar, TypeVar, cast

import msgspec

from trnwatch.collectors import limits as L

# A Trn3 Gen1 host report (16 chips, 64 logical cores, 192 vCPUs, one runtime per core) is
# about 200 KiB; 4 MiB leaves room for hosts with many loaded models while bounding what one
# bad line can cost.
MAX_LINE_BYTES = 4 * 1024 * 1024

Bytes = Annotated[int, msgspec.Meta(ge=0, le=L.MAX_INT)]
Count = Annotated[int, msgspec.Meta(ge=0, le=L.MAX_INT)]
Id = Annotated[int, msgspec.Meta(ge=-L.MAX_INT, le=L.MAX_INT)]
Pct = Annotated[float, msgspec.Meta(ge=0.0, le=100.0)]
Seconds = Annotated[float, msgspec.Meta(ge=0.0, le=L.MAX_PERIOD_S)]
LatencyS = Annotated[float, msgspec.Meta(ge=0.0, le=L.MAX_LATENCY_S)]
Flops = Annotated[float, msgspec.Meta(ge=0.0, le=L.MAX_FLOPS)]
Text = Annotated[str, msgspec.Meta(max_length=L.MAX_TEXT_CHARS)]
# Core, device and vCPU indices; core and vCPU indices arrive as JSON object keys ("17").
CoreIndex = Annotated[int, msgspec.Meta(ge=0, le=L.MAX_CORE_INDEX)]
DeviceIndex = Annotated[int, msgspec.Meta(ge=0, lt=L.MAX_DEVICES_PER_HOST)]
VcpuIndex = Annotated[int, msgspec.Meta(ge=0, lt=L.MAX_VCPUS_PER_HOST)]
Name = Annotated[str, msgspec.Meta(max_length=L.MAX_TEXT_CHARS)]


_Value = TypeVar("_Value")
# A map of named values (counter -> count, percentile -> seconds, category -> bytes): _Named[Count].
_Named = Annotated[dict[Name, _Value], msgspec.Meta(max_length=L.MAX_NAMED_VALUES)]


# gc=False: a decoded report is a tree (JSON has no cycles) of frozen objects, so the cycle
# collector need not track its objects. Tracked, each Gen2 report added ~300 objects to the
# collector's count while the intake held a decoded batch, and the collections that followed
# cost more than the decode (issue 10: whole process 0.84x -> 1.8x `json.loads`; bench_ingest).
class _Model(msgspec.Struct, frozen=True, gc=False):
    pass


class _Group(_Model, frozen=True):
    period: Seconds | None = None
    error: Text | None = None

    @property
    def ok(self) -> bool:
        """True when the group reported no error (an empty or absent error string)."""
        return not self.error


# --- runtime-level groups -------------------------------------------------------------------


class PhysicalCore(_Model, frozen=True):
    neuroncore_utilization: Pct | None = None


PhysicalSplit = Annotated[dict[Name, PhysicalCore], msgspec.Meta(max_length=L.MAX_PHYSICAL_PER_CORE)]


class CoreCounters(_Model, frozen=True):
    neuroncore_utilization: Pct | None = None
    flops: Flops | None = None
    effective_flops: Flops | None = None
    # Per-physical-core split at LNC=2: `v3d` on Trn2 (documented), `v4d` on Trn3 (assumed).
    v3d: PhysicalSplit | None = None
    v4d: PhysicalSplit | None = None

    @property
    def physical(self) -> dict[str, PhysicalCore]:
        """The per-physical-core breakdown under whichever key the report used."""
        return self.v4d or self.v3d or {}


class NeuronCoreCounters(_Group, frozen=True):
    neuroncores_in_use: (
        Annotated[dict[CoreIndex, CoreCounters], msgspec.Meta(max_length=L.MAX_CORE_INDEX + 1)] | None
    ) = None


class LatencyStats(_Model, frozen=True):
    total_latency: _Named[LatencyS | None] | None = None
    device_latency: _Named[LatencyS | None] | None = None


class ExecutionStats(_Group, frozen=True):
    error_summary: _Named[Count] | None = None
    execution_summary: _Named[Count] | None = None
    latency_stats: LatencyStats | None = None


class UsageBreakdown(_Model, frozen=True):
    host: _Named[Bytes] | None = None
    # A core's categories may be null: that core's memory is unknown (also where a value in it
    # was past its bound), so its chip has no HBM figure for that report.
    neuroncore_memory_usage: (
        Annotated[dict[CoreIndex, _Named[Bytes] | None], msgspec.Meta(max_length=L.MAX_CORE_INDEX + 1)] | None
    ) = None


class RuntimeUsedBytes(_Model, frozen=True):
    host: Bytes | None = None
    neuron_device: Bytes | None = None
    usage_breakdown: UsageBreakdown | None = None


class SubgraphBytes(_Model, frozen=True):
    host: Bytes | None = None
    neuron_device: Bytes | None = None


class Subgraph(_Model, frozen=True):
    memory_used_bytes: SubgraphBytes | None = None
    neuroncore_index: CoreIndex | None = None
    neuron_device_index: DeviceIndex | None = None


class LoadedModel(_Model, frozen=True):
    name: Annotated[str, msgspec.Meta(max_length=L.MAX_MODEL_NAME_CHARS)] = ""
    uuid: Text | None = None
    model_id: Id | None = None
    is_running: bool | None = None
    subgraphs: Annotated[dict[Name, Subgraph], msgspec.Meta(max_length=L.MAX_SUBGRAPHS)] | None = None


class MemoryUsed(_Group, frozen=True):
    neuron_runtime_used_bytes: RuntimeUsedBytes | None = None
    loaded_models: Annotated[list[LoadedModel], msgspec.Meta(max_length=L.MAX_LOADED_MODELS)] | None = None


class RuntimeVcpu(_Model, frozen=True):
    user: Pct | None = None
    system: Pct | None = None


class RuntimeVcpuUsage(_Group, frozen=True):
    vcpu_usage: RuntimeVcpu | None = None


class RuntimeReport(_Model, frozen=True):
    neuroncore_counters: NeuronCoreCounters | None = None
    execution_stats: ExecutionStats | None = None
    memory_used: MemoryUsed | None = None
    neuron_runtime_vcpu_usage: RuntimeVcpuUsage | None = None


class RuntimeEntry(_Model, frozen=True):
    # Always sent by neuron-monitor; the Prometheus exporter carries none.
    pid: Annotated[int, msgspec.Meta(ge=0, le=L.MAX_PID)] | None = None
    neuron_runtime_tag: Annotated[str, msgspec.Meta(max_length=L.MAX_TAG_CHARS)] | None = None
    error: Text | None = None
    report: RuntimeReport | None = None


# --- system-level groups --------------------------------------------------------------------


class DeviceEcc(_Model, frozen=True):
    neuron_device_index: DeviceIndex
    mem_ecc_corrected: Count | None = None
    mem_ecc_uncorrected: Count | None = None
    sram_ecc_corrected: Count | None = None
    sram_ecc_uncorrected: Count | None = None


class NeuronHwCounters(_Group, frozen=True):
    neuron_devices: Annotated[list[DeviceEcc], msgspec.Meta(max_length=L.MAX_DEVICES_PER_HOST)] | None = None


class VcpuUsage(_Group, frozen=True):
    average_usage: _Named[Pct] | None = None
    usage_data: Annotated[dict[VcpuIndex, _Named[Pct]], msgspec.Meta(max_length=L.MAX_VCPUS_PER_HOST)] | None = None
    context_switch_count: Count | None = None


class MemoryInfo(_Group, frozen=True):
    memory_total_bytes: Bytes | None = None
    memory_used_bytes: Bytes | None = None
    swap_total_bytes: Bytes | None = None
    swap_used_bytes: Bytes | None = None


class SystemData(_Model, frozen=True):
    neuron_hw_counters: NeuronHwCounters | None = None
    vcpu_usage: VcpuUsage | None = None
    memory_info: MemoryInfo | None = None


class InstanceInfo(_Model, frozen=True):
    instance_name: Text | None = None
    instance_id: Text | None = None
    instance_type: Text | None = None
    instance_availability_zone: Text | None = None
    instance_region: Text | None = None
    # Not in the user guide; present in AWS's CloudWatch-agent neuron-monitor fixtures.
    ultraserver_id: Text | None = None
    error: Text | None = None


class HardwareInfo(_Model, frozen=True):
    neuron_device_type: Text | None = None
    neuroncore_version: Text | None = None
    neuron_device_count: Annotated[int, msgspec.Meta(ge=0, le=L.MAX_DEVICES_PER_HOST)] | None = None
    # Absent from old-style reports: capacity is then unknown, never guessed.
    neuron_device_memory_size: Annotated[int, msgspec.Meta(ge=0, le=L.MAX_DEVICE_MEMORY_BYTES)] | None = None
    neuroncore_per_device_count: Annotated[int, msgspec.Meta(ge=1, le=L.MAX_CORES_PER_DEVICE)] | None = None
    logical_neuroncore_config: Annotated[int, msgspec.Meta(ge=1, le=L.MAX_LNC)] | None = None
    error: Text | None = None


class SimulatorMark(_Model, frozen=True):
    """Set only by trnwatch's simulator, so simulated data can never pass as live."""

    topology: Text
    host: Annotated[int, msgspec.Meta(ge=0, lt=L.MAX_HOSTS)]
    seed: Id
    scenario: Text


class Report(_Model, frozen=True):
    """One neuron-monitor report: one line of its stdout."""

    # Counts are running totals declared by the source (a Prometheus exporter's counters), so no
    # reading is inferred (ledger/counters.py); neuron-monitor's own reports declare nothing.
    declared_counters: ClassVar[bool] = False

    neuron_runtime_data: Annotated[list[RuntimeEntry], msgspec.Meta(max_length=L.MAX_RUNTIMES_PER_REPORT)] | None = None
    system_data: SystemData | None = None
    instance_info: InstanceInfo | None = None
    neuron_hardware_info: HardwareInfo | None = None
    trnwatch_simulator: SimulatorMark | None = None


class ReportRejected(ValueError):
    """A line that is not a usable neuron-monitor report; `reason` is a short counter key."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class FieldRejection:
    """One value of a kept report that was past its bound and removed.

    `field` is its place in the schema with indices and keys left out (a bounded set of names,
    e.g. `neuron_runtime_data[].report.neuroncore_counters.neuroncores_in_use{}.neuroncore_utilization`);
    `detail` says where exactly and why, for people."""

    field: str
    detail: str


_DECODER = msgspec.json.Decoder(Report)
_ENCODER = msgspec.json.Encoder()


def decode_report(text: str) -> tuple[Report, list[FieldRejection]]:
    """Decode and validate one report line; raise `ReportRejected` for anything unusable.

    Returns the report and the values removed from it for being past their bound (usually
    none: that check costs nothing unless a bound is crossed).

    Reasons: `oversize` (over MAX_LINE_BYTES), `not-json` (malformed or truncated JSON, NaN,
    Infinity, nesting too deep), `not-object` (valid JSON that is not an object), `schema`
    (wrong types, or a missing required field).
    """
    if len(text) > MAX_LINE_BYTES:  # characters >= bytes / 4, so this bound is cheap and safe
        raise ReportRejected("oversize", f"{len(text)} characters > {MAX_LINE_BYTES}")
    try:
        return _DECODER.decode(text), []
    except msgspec.ValidationError:
        pass  # a type or a bound: decoded again below, bound by bound
    except (msgspec.DecodeError, RecursionError) as exc:
        raise ReportRejected("not-json", str(exc)[:200]) from None
    try:
        raw = msgspec.json.decode(text)
    except (msgspec.DecodeError, RecursionError) as exc:
        # An integer of thousands of digits is JSON, but no number trnwatch could read.
        reason = "schema" if "Integer value out of range" in str(exc) else "not-json"
        raise ReportRejected(reason, str(exc)[:200]) from None
    if not isinstance(raw, dict):
        raise ReportRejected("not-object", "a report must be a JSON object")
    rejections: list[FieldRejection] = []
    marked = raw.get("trnwatch_simulator") is not None
    _prune_struct(raw, _report_type(), "", "", rejections)
    if marked and "trnwatch_simulator" not in raw:
        # The mark says "simulated": a report that carries one we cannot read is not read at
        # all, or its figures would pass as live once the mark was dropped like a bad field.
        detail = next(r.detail for r in rejections if r.field.startswith("trnwatch_simulator"))
        raise ReportRejected("schema", f"simulator mark unreadable ({detail}); the report is not read as live")
    try:
        return _DECODER.decode(_ENCODER.encode(raw)), rejections
    except msgspec.ValidationError as exc:
        raise ReportRejected("schema", str(exc)[:200]) from None


def validate_report(obj: dict) -> Report:
    """A Report from Python objects built by another decoder (the Prometheus one), held to the
    same schema and bounds; `ReportRejected("schema", ...)` if any value is off."""
    try:
        return msgspec.convert(obj, Report)
    except msgspec.ValidationError as exc:
        raise ReportRejected("schema", str(exc)[:200]) from None


def report_json_schema() -> dict:
    """JSON Schema of the neuron-monitor report as trnwatch reads it (types and bounds)."""
    return msgspec.json.schema(Report)


# --- bounds, value by value (only on a line that crossed one) ----------------------------------
#
# Walks the plain decoded JSON along the schema's own type information (msgspec.inspect), so
# the bounds are stated once, in the annotations above. A value past its bound is removed and
# noted, at the nearest place that can do without it: an optional field (left out, so it takes
# its default), or a nullable map value (set to null). A map or list is never silently
# shortened: where none of its entries may be null, the whole map or list goes. Type errors are left for
# the typed decoder to reject the line with.


@functools.cache
def _report_type():
    return msgspec.inspect.type_info(Report)  # built on the first line that crosses a bound


_REJECT = object()  # returned for a value that must go (its container decides where to put null)


def _nullable(t) -> bool:
    return isinstance(t, msgspec.inspect.UnionType) and any(isinstance(u, msgspec.inspect.NoneType) for u in t.types)


def _shown(value: int | float) -> str:
    if isinstance(value, int) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"  # str() of a huge int is itself costly
    return repr(value)


def _bound_problem(value, t) -> str | None:
    """Why `value` is past the bounds of scalar type `t` (None if within, or not this type)."""
    I = msgspec.inspect  # noqa: E741 (a namespace, read as I.IntType, never a number)
    if isinstance(t, (I.IntType, I.FloatType)) and isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(t, I.IntType) and not isinstance(value, int):
            return None  # a type error
        for bound, ok in (
            (t.ge, lambda b: value >= b),
            (t.gt, lambda b: value > b),
            (t.le, lambda b: value <= b),
            (t.lt, lambda b: value < b),
        ):
            if bound is not None and not ok(bound):
                return f"{_shown(value)} is out of range"
    elif isinstance(t, I.StrType) and isinstance(value, str) and t.max_length is not None and len(value) > t.max_length:
        return f"{len(value)} characters > {t.max_length}"
    return None


def _prune(value, t, field: str, where: str, out: list[FieldRejection]):
    """`value` with out-of-bound parts removed, or _REJECT when `value` itself must go."""
    I = msgspec.inspect  # noqa: E741 (a namespace, read as I.IntType, never a number)
    if isinstance(t, I.UnionType):
        if value is None:
            return None
        inner = [u for u in t.types if not isinstance(u, I.NoneType)]
        return _prune(value, inner[0], field, where, out) if len(inner) == 1 else value
    if isinstance(t, I.StructType):
        if isinstance(value, dict) and _prune_struct(value, t, field, where, out) is _REJECT:
            return _REJECT
        return value
    if isinstance(t, (I.DictType, I.ListType)):
        if not isinstance(value, dict if isinstance(t, I.DictType) else list):
            return value
        if t.max_length is not None and len(value) > t.max_length:
            out.append(FieldRejection(field, f"{where}: {len(value)} entries > {t.max_length}"))
            return _REJECT
        if isinstance(t, I.DictType):
            return _prune_dict(cast(dict, value), t, field, where, out)  # a dict: checked above
        for i, item in enumerate(value):
            if _prune(item, t.item_type, field + "[]", f"{where}[{i}]", out) is _REJECT:
                return _REJECT
        return value
    problem = _bound_problem(value, t)
    if problem is not None:
        out.append(FieldRejection(field, f"{where}: {problem}"))
        return _REJECT
    return value


def _prune_struct(obj: dict, t, field: str, where: str, out: list[FieldRejection]):
    for f in t.fields:
        if f.encode_name not in obj:
            continue
        name = f"{field}.{f.encode_name}" if field else f.encode_name
        spot = f"{where}.{f.encode_name}" if where else f.encode_name
        if _prune(obj[f.encode_name], f.type, name, spot, out) is _REJECT:
            if f.required:
                return _REJECT  # the object it belongs to goes with it
            del obj[f.encode_name]  # as if not reported: the field's default (None, "")
    return obj


def _prune_dict(obj: dict, t, field: str, where: str, out: list[FieldRejection]):
    for key in list(obj):
        spot = f"{where}[{key[:40]!r}]"
        if isinstance(t.key_type, msgspec.inspect.IntType) and key.isdigit() and key.isascii():
            problem = (
                _bound_problem(int(key), t.key_type) if len(key) <= 40 else f"of {len(key)} digits is out of range"
            )
            if problem is not None:
                out.append(FieldRejection(field + "{}", f"{spot}: key {problem}"))
                return _REJECT  # the entry cannot be placed: the whole map is unknown
        if _prune(obj[key], t.value_type, field + "{}", spot, out) is _REJECT:
            if not _nullable(t.value_type):
                return _REJECT
            obj[key] = None
    return obj
