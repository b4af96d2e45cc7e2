"""The neuron-monitor report format: typed model and the one function that parses a line.

Field names follow the neuron-monitor user guide (see ../shared/reference/neuron-telemetry.md
section 1) and the real captures in ../shared/realworld/. The model is tolerant where real
reports vary and strict where a value would be misread:

- every group and every field may be missing or null; unknown extra fields are ignored;
- `error` strings are kept beside whatever values came with them (real reports carry zeroed
  values next to an error, so a group with an error is not trusted for figures);
- numbers must be numbers: a string where a count belongs, a bool, NaN or Infinity rejects
  the whole line (strict mode), because guessing what a malformed report meant would put a
  figure on screen nobody measured;
- byte counts and utilisation have physical bounds (bytes >= 0, 0 <= utilisation <= 100).

A rejected line is reported as `ReportRejected` with a short reason; the caller counts it
per source and the stream goes on.
"""

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

# A Trn3 Gen1 host report (16 chips, 64 logical cores, 192 vCPUs, one runtime per core) is
# about 200 KiB; 4 MiB leaves room for hosts with many loaded models while bounding what one
# bad line can cost.
MAX_LINE_BYTES = 4 * 1024 * 1024

Bytes = Annotated[int, Field(ge=0)]
Count = Annotated[int, Field(ge=0)]
Pct = Annotated[float, Field(ge=0.0, le=100.0)]
Seconds = Annotated[float, Field(ge=0.0)]
# Core and vCPU indices arrive as JSON object keys ("17"); they must read as whole numbers.
Index = Annotated[int, Field(ge=0)]


class _Model(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", allow_inf_nan=False, frozen=True)


class _Group(_Model):
    period: Seconds | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        """True when the group reported no error (an empty or absent error string)."""
        return not self.error


# --- runtime-level groups -------------------------------------------------------------------


class PhysicalCore(_Model):
    neuroncore_utilization: Pct | None = None


class CoreCounters(_Model):
    neuroncore_utilization: Pct | None = None
    flops: Annotated[float, Field(ge=0)] | None = None
    effective_flops: Annotated[float, Field(ge=0)] | None = None
    # Per-physical-core split at LNC=2: `v3d` on Trn2 (documented), `v4d` on Trn3 (assumed).
    v3d: dict[str, PhysicalCore] | None = None
    v4d: dict[str, PhysicalCore] | None = None

    @property
    def physical(self) -> dict[str, PhysicalCore]:
        """The per-physical-core breakdown under whichever key the report used."""
        return self.v4d or self.v3d or {}


class NeuronCoreCounters(_Group):
    neuroncores_in_use: dict[Index, CoreCounters] | None = None


class LatencyStats(_Model):
    total_latency: dict[str, Seconds | None] | None = None
    device_latency: dict[str, Seconds | None] | None = None


class ExecutionStats(_Group):
    error_summary: dict[str, Count] | None = None
    execution_summary: dict[str, Count] | None = None
    latency_stats: LatencyStats | None = None


class UsageBreakdown(_Model):
    host: dict[str, Bytes] | None = None
    neuroncore_memory_usage: dict[Index, dict[str, Bytes]] | None = None


class RuntimeUsedBytes(_Model):
    host: Bytes | None = None
    neuron_device: Bytes | None = None
    usage_breakdown: UsageBreakdown | None = None


class SubgraphBytes(_Model):
    host: Bytes | None = None
    neuron_device: Bytes | None = None


class Subgraph(_Model):
    memory_used_bytes: SubgraphBytes | None = None
    neuroncore_index: Count | None = None
    neuron_device_index: Count | None = None


class LoadedModel(_Model):
    name: str = ""
    uuid: str | None = None
    model_id: int | None = None
    is_running: bool | None = None
    subgraphs: dict[str, Subgraph] | None = None


class MemoryUsed(_Group):
    neuron_runtime_used_bytes: RuntimeUsedBytes | None = None
    loaded_models: list[LoadedModel] | None = None


class RuntimeVcpu(_Model):
    user: Pct | None = None
    system: Pct | None = None


class RuntimeVcpuUsage(_Group):
    vcpu_usage: RuntimeVcpu | None = None


class RuntimeReport(_Model):
    neuroncore_counters: NeuronCoreCounters | None = None
    execution_stats: ExecutionStats | None = None
    memory_used: MemoryUsed | None = None
    neuron_runtime_vcpu_usage: RuntimeVcpuUsage | None = None


class RuntimeEntry(_Model):
    pid: Count | None = None  # always sent by neuron-monitor; the Prometheus exporter carries none
    neuron_runtime_tag: str | None = None
    error: str | None = None
    report: RuntimeReport | None = None


# --- system-level groups --------------------------------------------------------------------


class DeviceEcc(_Model):
    neuron_device_index: Count
    mem_ecc_corrected: Count | None = None
    mem_ecc_uncorrected: Count | None = None
    sram_ecc_corrected: Count | None = None
    sram_ecc_uncorrected: Count | None = None


class NeuronHwCounters(_Group):
    neuron_devices: list[DeviceEcc] | None = None


class VcpuUsage(_Group):
    average_usage: dict[str, Pct] | None = None
    usage_data: dict[Index, dict[str, Pct]] | None = None
    context_switch_count: Count | None = None


class MemoryInfo(_Group):
    memory_total_bytes: Bytes | None = None
    memory_used_bytes: Bytes | None = None
    swap_total_bytes: Bytes | None = None
    swap_used_bytes: Bytes | None = None


class SystemData(_Model):
    neuron_hw_counters: NeuronHwCounters | None = None
    vcpu_usage: VcpuUsage | None = None
    memory_info: MemoryInfo | None = None


class InstanceInfo(_Model):
    instance_name: str | None = None
    instance_id: str | None = None
    instance_type: str | None = None
    instance_availability_zone: str | None = None
    instance_region: str | None = None
    # Not in the user guide; present in AWS's CloudWatch-agent neuron-monitor fixtures.
    ultraserver_id: str | None = None
    error: str | None = None


class HardwareInfo(_Model):
    neuron_device_type: str | None = None
    neuroncore_version: str | None = None
    neuron_device_count: Count | None = None
    # Absent from old-style reports: capacity is then unknown, never guessed.
    neuron_device_memory_size: Bytes | None = None
    neuroncore_per_device_count: Annotated[int, Field(ge=1)] | None = None
    logical_neuroncore_config: Annotated[int, Field(ge=1)] | None = None
    error: str | None = None


class SimulatorMark(_Model):
    """Set only by trnwatch's simulator, so simulated data can never pass as live."""

    topology: str
    host: int
    seed: int
    scenario: str


class Report(_Model):
    """One neuron-monitor report: one line of its stdout."""

    neuron_runtime_data: list[RuntimeEntry] | None = None
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


def parse_report(text: str) -> Report:
    """Parse and validate one report line; raise `ReportRejected` for anything unusable.

    Reasons: `oversize` (over MAX_LINE_BYTES), `not-json` (malformed or truncated JSON),
    `not-object` (valid JSON that is not an object), `schema` (wrong types or out-of-range
    values).
    """
    if len(text) > MAX_LINE_BYTES:  # characters >= bytes / 4, so this bound is cheap and safe
        raise ReportRejected("oversize", f"{len(text)} characters > {MAX_LINE_BYTES}")
    try:
        return Report.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        kind = first["type"]
        where = ".".join(str(p) for p in first["loc"])
        if kind == "json_invalid":
            raise ReportRejected("not-json", first["msg"]) from None
        if kind in ("model_type", "model_attributes_type") and not first["loc"]:
            raise ReportRejected("not-object", "a report must be a JSON object") from None
        raise ReportRejected("schema", f"{where}: {first['msg']}") from None
