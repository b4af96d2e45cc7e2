"""Prometheus answers as typed records: one `ExporterReport` (a neuron-monitor `Report`, built
directly by keyword) per host, so they reach the ledger by the one fold path.

Two line kinds carry them (collectors/lines.py), both raw enough that a recording replays exactly:

- "prometheus": one scrape of an exporter's /metrics, as JSON
  `{"url": URL, "interval_s": S, "body": "<exposition text>"}`; the body is read by
  collectors/prometheus_text.py (the samples prometheus_client's parser gives, at a tenth of
  its cost; only the families read below);
- "promql": one host's answers to one refresh of the server's PromQL query set
  (collectors/prometheus_sources.py), as JSON `{"interval_s": S, "eval_s": T, "instance_id": ID,
  "samples": [[name, {labels}, "value"], ...]}` (values as the API wrote them), or
  `{"unreadable": why}` for a refresh whose answers could not be split, `{"series_dropped": N}`
  for a refresh past its series bound.

A line gives one record per `instance_id` label (hosts are identified by it), each checked on its
own: one malformed host never takes the others down with it. Every count and index read from a
label is bounded (collectors/limits.py), and a label past its bound rejects its host. A sample
value past its bound is removed alone, by the neuron-monitor decoder's rule (a nullable figure
becomes null, a counter map goes whole) and listed in the record's `rejected_fields` under the
same field name. Nothing in a line can raise out of `parse_prometheus_line`.

How the vendor exporter's series (neuron-monitor-prometheus.py; neuron-telemetry.md section 2.1)
map back to report fields, labels R = instance labels + runtime_tag:

| series                                             | report field                                           |
|----------------------------------------------------|--------------------------------------------------------|
| instance_info{I}                                   | instance_info (availability_zone, region renamed back)  |
| neuron_hardware_info{neuron_device_count,neuroncore_per_device_count,neuron_device_memory_size} | (same name) |
| neuroncore_utilization_ratio{R, neuroncore}        | neuroncores_in_use[core].neuroncore_utilization x 100   |
| neuroncore_memory_usage_<category>{R, neuroncore}  | usage_breakdown.neuroncore_memory_usage[core][category] |
| neuron_runtime_memory_used_bytes{R, memory_location} | neuron_runtime_used_bytes.host / .neuron_device       |
| neuron_runtime_vcpu_usage_ratio{R, usage_type}     | neuron_runtime_vcpu_usage.vcpu_usage x 100              |
| execution_errors_total{R, error_type}              | execution_stats.error_summary                           |
| execution_status_total{R, status_type}             | execution_stats.execution_summary                       |
| execution_latency_seconds{R, percentile}           | execution_stats.latency_stats.total_latency             |
| hardware_ecc_events_total{I, event_type, neuron_device_index} | neuron_hw_counters.neuron_devices              |
| system_vcpu_usage_ratio{I, usage_type}             | vcpu_usage.average_usage user / system x 100, idle = 100 - both |
| system_memory_*_bytes, system_swap_*_bytes         | memory_info                                             |
| trnwatch_simulator_info{topology, host, seed, scenario} | trnwatch_simulator (trnwatch's simulator only)     |

Readings decided here, from the exporter's code and real scrapes:
- What the exporter does not carry stays None, so views show it as unavailable, never zero:
  flops, the per-physical-core split, device latency, loaded models, per-vCPU usage, context
  switches. The exporter carries no pid either: runtimes are keyed by tag, with no pid.
- Group periods are the source's poll interval (scrape or query interval): the figures are only as
  fresh as that, and staleness is judged against it.
- The exporter removes every runtime series when no runtime runs, so a host with no runtime_tag
  series has no runtime: utilisation 0, HBM 0, as neuron-monitor's empty runtime list reads.
- Counters are the exporter's running totals (it adds each report's counts), passed on as they
  are; the ledger's counter rule reads their series (ledger/counters.py).
- The server's query set sums the five per-core categories in PromQL (5x fewer series at
  cluster scale): such a core's breakdown has the one category `total`.
- A device total with no `event_type` label (server mode) stands for all four ECC counters; the
  counters that are not listed beside it are zero. A device with a non-zero total but no listed
  counter (cannot happen within one evaluation time) gives no ECC figure.
"""

from collections.abc import Iterator, Sized
from itertools import groupby
from operator import itemgetter
from typing import ClassVar, TypeVar

import msgspec

from trnwatch.collectors import prometheus_text
from trnwatch.collectors.limits import (
    MAX_CORE_INDEX,
    MAX_CORES_PER_DEVICE,
    MAX_DEVICE_MEMORY_BYTES,
    MAX_DEVICES_PER_HOST,
    MAX_HOSTS,
    MAX_INT,
    MAX_LATENCY_S,
    MAX_LNC,
    MAX_NAMED_VALUES,
    MAX_PERIOD_S,
    MAX_RUNTIMES_PER_REPORT,
    MAX_TAG_CHARS,
    MAX_TEXT_CHARS,
)
from trnwatch.collectors.neuron_monitor import (
    MAX_LINE_BYTES,
    CoreCounters,
    DeviceEcc,
    ExecutionStats,
    FieldRejection,
    HardwareInfo,
    InstanceInfo,
    LatencyStats,
    MemoryInfo,
    MemoryUsed,
    NeuronCoreCounters,
    NeuronHwCounters,
    Report,
    ReportRejected,
    RuntimeEntry,
    RuntimeReport,
    RuntimeUsedBytes,
    RuntimeVcpu,
    RuntimeVcpuUsage,
    SimulatorMark,
    SystemData,
    UsageBreakdown,
    VcpuUsage,
)

PROMETHEUS_KINDS = ("prometheus", "promql")
# A scrape body may be larger than one neuron-monitor line: a Gen1 host's exposition with long
# runtime tags is ~1 MiB.
MAX_BODY_BYTES = 4 * MAX_LINE_BYTES

INSTANCE_LABELS = {  # exporter label -> instance_info field
    "instance_name": "instance_name",
    "instance_id": "instance_id",
    "instance_type": "instance_type",
    "availability_zone": "instance_availability_zone",
    "region": "instance_region",
    "subnet_id": "subnet_id",
    # Only in one unconfirmed variant of the exporter (neuron-telemetry.md section 2.1).
    "ultraserver_id": "ultraserver_id",
}
# Hardware-info labels read as whole numbers, with the bound each must keep (collectors/limits.py).
HARDWARE_LABELS = {
    "neuron_device_count": MAX_DEVICES_PER_HOST,
    "neuroncore_per_device_count": MAX_CORES_PER_DEVICE,
    "neuron_device_memory_size": MAX_DEVICE_MEMORY_BYTES,
    "logical_neuroncore_config": MAX_LNC,
}
HARDWARE_TEXT_LABELS = ("neuron_device_type", "neuroncore_version")
UTILIZATION = "neuroncore_utilization_ratio"
MEMORY_PREFIX = "neuroncore_memory_usage_"
ECC_EVENTS = ("mem_ecc_corrected", "mem_ecc_uncorrected", "sram_ecc_corrected", "sram_ecc_uncorrected")
SIMULATOR_INFO = "trnwatch_simulator_info"
# Families read from a scrape; the rest (python_*, process_*, *_created) is only skipped over.
READ_PREFIXES = ("neuroncore_", "neuron_", "execution_", "hardware_ecc_", "system_", "instance_info", SIMULATOR_INFO)
# Digits of a label read as a whole number: enough for every bound above, and int() of a longer
# text would cost time (and beyond 4300 digits raise) for nothing.
_MAX_LABEL_DIGITS = 16

Sample = prometheus_text.Sample


class ExporterReport(Report, frozen=True):
    """A host's Report built from exporter series: the typed record the ledger folds.

    Its counts are the exporter's running totals (`declared_counters`), and it carries what the
    ledger needs to tell the exporter's leftover gauges (ledger/exporter_gauges.py):
    `utilization` per (runtime tag, core) as the exporter serves it, and `others_digest`, a hash
    of every other value of the host, which changes whenever the exporter took a new report.
    """

    declared_counters: ClassVar[bool] = True
    utilization: dict[tuple[str, int], float] = msgspec.field(default_factory=dict)
    others_digest: int = 0
    # Values removed for being past their bound, counted by the ledger as a neuron-monitor line's are.
    rejected_fields: tuple[FieldRejection, ...] = ()


def _build(model, **fields):
    """A typed record by keyword, without a detour through neuron-monitor dicts. A Struct's
    constructor checks nothing: every value given here was checked by this module against the
    bounds the model's annotations state (collectors/limits.py)."""
    return model(**fields)


def _count(value: float) -> int | None:
    """A count or byte figure, or None if `value` is not one (fractional, negative, past MAX_INT)."""
    return int(value) if 0 <= value <= MAX_INT and value == int(value) else None


def _pct(ratio: float) -> float | None:
    """A 0-1 ratio as a percentage, or None if it is not one."""
    pct = ratio * 100.0
    if 0.0 <= pct <= 100.0:
        return pct
    # ratio x 100 can land a hair above 100 in floating point; anything further is bad data.
    return 100.0 if 100.0 < pct <= 100.0 + 1e-6 else None


def _seconds(value: float) -> float | None:
    return value if 0 <= value <= MAX_LATENCY_S else None


def _label_int(labels: dict[str, str], name: str, what: str, bound: int) -> int:
    text = labels.get(name, "")
    if not (type(text) is str and 0 < len(text) <= _MAX_LABEL_DIGITS and text.isascii() and text.isdigit()):
        raise ReportRejected("schema", f"{what}: label {name}={str(text)[:40]!r} is not a whole number")
    value = int(text)
    if value > bound:
        raise ReportRejected("schema", f"{what}: label {name}={value} is beyond the bound {bound}")
    return value


def _text(labels: dict[str, str], name: str, what: str, max_chars: int = MAX_TEXT_CHARS) -> str | None:
    text = labels.get(name)
    if text is not None and (type(text) is not str or len(text) > max_chars):
        raise ReportRejected("schema", f"{what}: label {name} is not text of at most {max_chars} characters")
    return text


_Sized = TypeVar("_Sized", bound=Sized)


def _named(values: _Sized, what: str) -> _Sized:
    if len(values) > MAX_NAMED_VALUES:
        raise ReportRejected("schema", f"{what}: more than {MAX_NAMED_VALUES} named values")
    return values


# Where a removed value sits in the neuron-monitor report (the field names of FieldRejection, as
# collectors/neuron_monitor.py names them for the same value in a neuron-monitor line).
_RUNTIME_FIELD = "neuron_runtime_data[].report."
_UTIL_FIELD = _RUNTIME_FIELD + "neuroncore_counters.neuroncores_in_use{}.neuroncore_utilization"
_USED_FIELD = _RUNTIME_FIELD + "memory_used.neuron_runtime_used_bytes."
_CORE_MEMORY_FIELD = _USED_FIELD + "usage_breakdown.neuroncore_memory_usage{}{}"
_EXECUTION_FIELD = _RUNTIME_FIELD + "execution_stats."
_VCPU_FIELD = _RUNTIME_FIELD + "neuron_runtime_vcpu_usage.vcpu_usage."
_ECC_FIELD = "system_data.neuron_hw_counters.neuron_devices[]"
RUNTIME_VCPU_FIELDS = ("user", "system")
USED_LOCATIONS = ("host", "neuron_device")


class _Runtime:
    """One runtime tag's series while a host's samples are read. A value removed for being past
    its bound is None where its field may be null (a core's utilisation or memory, a latency
    percentile), and absent elsewhere; a counter map with a removed value goes as a whole."""

    __slots__ = ("util", "memory", "used", "vcpu", "errors", "status", "latency", "maps_removed")

    def __init__(self) -> None:
        self.util: dict[int, float | None] = {}
        self.memory: dict[int, dict[str, int] | None] = {}
        self.used: dict[str, int] = {}
        self.vcpu: dict[str, float] = {}
        self.errors: dict[str, int] = {}
        self.status: dict[str, int] = {}
        self.latency: dict[str, float | None] = {}
        self.maps_removed: set[str] = set()  # "errors", "status"


class _HostSeries:
    """One host's exporter series read into report groups, value by value."""

    def __init__(self) -> None:
        self.identity: dict[str, str] | None = None
        self.hardware: HardwareInfo | None = None
        self.simulator: SimulatorMark | None = None
        self.runtimes: dict[str, _Runtime] = {}
        self.ecc_by_type: dict[int, dict[str, int]] = {}
        self.ecc_totals: dict[int, int | None] = {}  # None: the total was past its bound
        self.average_usage: dict[str, float] | None = {}  # None: a value was past its bound
        self.memory_info: dict[str, int] = {}
        self.others: list[float] = []
        self.cores: dict[str, int] = {}  # neuroncore label text -> index, checked once per host
        self.rejected: list[FieldRejection] = []

    def reject(self, field: str, name: str, labels: dict[str, str], value: float) -> None:
        """Note a value removed for being past its bound (or not the kind of number its field holds)."""
        where = ",".join(f"{k}={str(v)[:40]}" for k, v in labels.items() if k not in INSTANCE_LABELS)
        self.rejected.append(FieldRejection(field, f"{name}{{{where[:120]}}}: {value!r} is out of range"))

    def runtime(self, labels: dict[str, str], what: str) -> _Runtime:
        tag = labels.get("runtime_tag")
        found = self.runtimes.get(tag) if type(tag) is str else None
        if found is not None:  # a tag already checked
            return found
        tag = _text(labels, "runtime_tag", what, MAX_TAG_CHARS) or ""
        found = self.runtimes.get(tag)
        if found is None:
            if len(self.runtimes) >= MAX_RUNTIMES_PER_REPORT:
                raise ReportRejected("schema", f"{what}: more than {MAX_RUNTIMES_PER_REPORT} runtimes")
            found = self.runtimes[tag] = _Runtime()
        return found

    def core(self, labels: dict[str, str], what: str) -> int:
        text = labels.get("neuroncore")
        core = self.cores.get(text) if type(text) is str else None
        if core is None:
            core = _label_int(labels, "neuroncore", what, MAX_CORE_INDEX)
            self.cores[labels["neuroncore"]] = core  # read as a core index: the label is there
        return core

    def read(self, name: str, run: Iterator[Sample]) -> None:
        """A run of samples of one series `name` (consecutive in the host's samples)."""
        if name == UTILIZATION:
            for _, labels, value in run:
                pct = _pct(value)
                if pct is None:
                    self.reject(_UTIL_FIELD, name, labels, value)
                self.runtime(labels, name).util[self.core(labels, name)] = pct
        elif name.startswith(MEMORY_PREFIX):
            category = name[len(MEMORY_PREFIX) :]
            for _, labels, value in run:
                self.others.append(value)
                memory = self.runtime(labels, name).memory
                core = self.core(labels, name)
                n = _count(value)
                if n is None:
                    self.reject(_CORE_MEMORY_FIELD, name, labels, value)
                    memory[core] = None  # this core's memory is unknown, so is its chip's
                else:
                    categories = memory.setdefault(core, {})
                    if categories is not None:
                        categories[category] = n
        elif name in _RUNTIME_FAMILIES:
            self.runtime_values(name, run)
        else:
            for _, labels, value in run:
                self.others.append(value)
                self.system_value(name, labels, value)

    def system_value(self, name: str, labels: dict[str, str], value: float) -> None:
        """A sample of a host-wide series: ECC, vCPU, memory, identity."""
        if name == "hardware_ecc_events_total":
            self.ecc(labels, value)
        elif name == "system_vcpu_usage_ratio":
            usage_type = _text(labels, "usage_type", name) or ""
            pct = _pct(value)
            if pct is None:
                self.reject("system_data.vcpu_usage.average_usage{}", name, labels, value)
                self.average_usage = None
            elif self.average_usage is not None:
                self.average_usage[usage_type] = pct
        elif name.startswith(("system_memory_", "system_swap_")) and name.endswith("_bytes"):
            field = name[len("system_") :]
            n = _count(value)
            if n is not None:
                self.memory_info[field] = n
            elif field in MemoryInfo.__struct_fields__:
                self.reject(f"system_data.memory_info.{field}", name, labels, value)
        else:
            self.identity_series(name, labels)

    def runtime_values(self, name: str, run: Iterator[Sample]) -> None:
        label, what, check, field, optional = _RUNTIME_FAMILIES[name]
        for _, labels, value in run:
            self.others.append(value)
            runtime = self.runtime(labels, name)
            values = getattr(runtime, what)
            key = _text(labels, label, name) or ""
            checked = check(value)
            if checked is not None:
                values[key] = checked
            elif optional is not None:  # optional fields of the report (others are not read): left out
                if key in optional:
                    self.reject(field + key, name, labels, value)
            else:
                self.reject(field, name, labels, value)
                if what == "latency":
                    values[key] = None  # a nullable map value
                else:
                    runtime.maps_removed.add(what)  # a counter map goes whole

    def ecc(self, labels: dict[str, str], value: float) -> None:
        name = "hardware_ecc_events_total"
        device = _label_int(labels, "neuron_device_index", name, MAX_DEVICES_PER_HOST - 1)
        event = _text(labels, "event_type", name)
        n = _count(value)
        if event is None:  # a device's total (server mode)
            if n is None:
                self.reject(_ECC_FIELD, name, labels, value)
            self.ecc_totals[device] = n
        elif n is not None:
            self.ecc_by_type.setdefault(device, {})[event] = n
        elif event in ECC_EVENTS:
            self.reject(f"{_ECC_FIELD}.{event}", name, labels, value)

    def identity_series(self, name: str, labels: dict[str, str]) -> None:
        if name == "instance_info" or (name == "neuron_hardware_info" and self.identity is None):
            self.identity = labels
        if name == "neuron_hardware_info":
            fields: dict[str, int | str | None] = {
                field: _label_int(labels, field, name, bound)
                for field, bound in HARDWARE_LABELS.items()
                if field in labels
            }
            fields.update({field: _text(labels, field, name) for field in HARDWARE_TEXT_LABELS if field in labels})
            for field in ("neuroncore_per_device_count", "logical_neuroncore_config"):
                if fields.get(field) == 0:
                    raise ReportRejected("schema", f"{name}: label {field}=0")
            self.hardware = _build(HardwareInfo, **fields, error="")
        elif name == SIMULATOR_INFO:
            seed = _text(labels, "seed", name) or ""
            if not (len(seed) <= 19 and seed.lstrip("-").isascii() and seed.lstrip("-").isdigit()):
                raise ReportRejected("schema", f"{name}: label seed={seed[:40]!r} is not a number")
            self.simulator = _build(
                SimulatorMark,
                topology=_text(labels, "topology", name) or "",
                host=_label_int(labels, "host", name, MAX_HOSTS - 1),
                seed=int(seed),
                scenario=_text(labels, "scenario", name) or "",
            )


# Runtime series keyed by one label: series -> (label, _Runtime map, check, removed field, the
# optional fields read from it, or None for a map).
_RUNTIME_FAMILIES = {
    "neuron_runtime_memory_used_bytes": ("memory_location", "used", _count, _USED_FIELD, USED_LOCATIONS),
    "neuron_runtime_vcpu_usage_ratio": ("usage_type", "vcpu", _pct, _VCPU_FIELD, RUNTIME_VCPU_FIELDS),
    "execution_errors_total": ("error_type", "errors", _count, _EXECUTION_FIELD + "error_summary{}", None),
    "execution_status_total": ("status_type", "status", _count, _EXECUTION_FIELD + "execution_summary{}", None),
    "execution_latency_seconds": (
        "percentile",
        "latency",
        _seconds,
        _EXECUTION_FIELD + "latency_stats.total_latency{}",
        None,
    ),
}


def host_report(instance_id: str, samples: list[Sample], interval_s: float | None) -> ExporterReport:
    """One host's typed record from its exporter series (name, labels, value).

    A value past its bound (a utilisation of 100.01%, negative bytes) is removed alone and noted
    in `rejected_fields`, as the neuron-monitor decoder removes it (a `FieldRejection` named by
    the same report field); `ReportRejected` (reason `schema`) if a label is unusable or beyond
    its bound."""
    host = _HostSeries()
    for name, run in groupby(samples, key=itemgetter(0)):
        host.read(name, run)
    identity = host.identity
    if identity is None and samples:
        identity = samples[0][1]  # scrape series all carry the instance labels
    runtimes = host.runtimes
    utilization = {(tag, core): pct for tag, r in runtimes.items() for core, pct in r.util.items() if pct is not None}
    return _build(
        ExporterReport,
        neuron_runtime_data=[_runtime_entry(tag, r, interval_s) for tag, r in runtimes.items()],
        system_data=_system_data(host, interval_s),
        instance_info=_instance_info(identity, instance_id),
        neuron_hardware_info=host.hardware,
        trnwatch_simulator=host.simulator,
        utilization=utilization,
        others_digest=hash(tuple(host.others)),
        rejected_fields=tuple(host.rejected),
    )


def _instance_info(labels: dict[str, str] | None, instance_id: str) -> InstanceInfo:
    fields = {
        field: _text(labels or {}, label, "instance labels")
        for label, field in INSTANCE_LABELS.items()
        if label in (labels or {}) and field in InstanceInfo.__struct_fields__
    }
    fields["instance_id"] = instance_id
    return _build(InstanceInfo, **fields, error="")


def _runtime_entry(tag: str, r: _Runtime, interval_s: float | None) -> RuntimeEntry:
    named: tuple[Sized, ...] = (r.used, r.vcpu, r.errors, r.status, r.latency, *filter(None, r.memory.values()))
    for values in named:
        _named(values, f"runtime {tag[:40]!r}")
    groups: dict = {}
    if r.util:
        groups["neuroncore_counters"] = _build(
            NeuronCoreCounters,
            period=interval_s,
            error="",
            neuroncores_in_use={core: _build(CoreCounters, neuroncore_utilization=pct) for core, pct in r.util.items()},
        )
    if r.memory or r.used:
        breakdown = _build(UsageBreakdown, neuroncore_memory_usage=r.memory) if r.memory else None
        used = _build(
            RuntimeUsedBytes,
            host=r.used.get("host"),
            neuron_device=r.used.get("neuron_device"),
            usage_breakdown=breakdown,
        )
        groups["memory_used"] = _build(MemoryUsed, period=interval_s, error="", neuron_runtime_used_bytes=used)
    if r.errors or r.status or r.latency:
        groups["execution_stats"] = _build(
            ExecutionStats,
            period=interval_s,
            error="",
            error_summary=None if "errors" in r.maps_removed else r.errors or None,
            execution_summary=None if "status" in r.maps_removed else r.status or None,
            latency_stats=_build(LatencyStats, total_latency=r.latency or None, device_latency=None),
        )
    if r.vcpu:
        vcpu = _build(RuntimeVcpu, **{k: v for k, v in r.vcpu.items() if k in ("user", "system")})
        groups["neuron_runtime_vcpu_usage"] = _build(RuntimeVcpuUsage, period=interval_s, error="", vcpu_usage=vcpu)
    return _build(RuntimeEntry, pid=None, neuron_runtime_tag=tag, error="", report=_build(RuntimeReport, **groups))


def _system_data(host: _HostSeries, interval_s: float | None) -> SystemData:
    devices = []
    ecc_by_type, ecc_totals = host.ecc_by_type, host.ecc_totals
    for device in sorted(set(ecc_by_type) | set(ecc_totals)):
        counts = ecc_by_type.get(device, {})
        if device in ecc_totals:
            total = ecc_totals[device]
            if total is None or sum(counts.values()) != total:
                continue  # listed counters do not add up to the total: no figure rather than a wrong one
            counts = {event: counts.get(event, 0) for event in ECC_EVENTS}
        devices.append(
            _build(
                DeviceEcc,
                neuron_device_index=device,
                **{event: n for event, n in counts.items() if event in ECC_EVENTS},
            )
        )
    groups: dict = {}
    if devices:
        groups["neuron_hw_counters"] = _build(NeuronHwCounters, period=interval_s, error="", neuron_devices=devices)
    usage = dict(_named(host.average_usage or {}, "system_vcpu_usage_ratio"))
    if "user" in usage and "system" in usage:
        # The exporter folds nice into user and io_wait/irq/soft_irq into system: what is left is idle.
        usage["idle"] = max(0.0, 100.0 - usage["user"] - usage["system"])
    # Always present: its period tells the ledger how often this host's figures are refreshed.
    groups["vcpu_usage"] = _build(VcpuUsage, period=interval_s, error="", average_usage=usage or None)
    if host.memory_info:
        groups["memory_info"] = _build(
            MemoryInfo,
            period=interval_s,
            error="",
            **{k: v for k, v in host.memory_info.items() if k in MemoryInfo.__struct_fields__},
        )
    return _build(SystemData, **groups)


# --- line kinds ---------------------------------------------------------------------------------


def scrape_samples(body: str) -> list[Sample]:
    """Samples of the families read here, in text order; `ExpositionError` if malformed."""
    return prometheus_text.samples(body, READ_PREFIXES)


def _group_by_instance(samples: list[Sample]) -> dict[str, list[Sample]]:
    hosts: dict[str, list[Sample]] = {}
    for sample in samples:
        instance_id = sample[1].get("instance_id")
        if instance_id is not None:
            hosts.setdefault(instance_id, []).append(sample)
    return hosts


def _reports(hosts: dict[str, list[Sample]], interval_s: float | None) -> list[ExporterReport | ReportRejected]:
    out: list[ExporterReport | ReportRejected] = []
    for instance_id, samples in hosts.items():
        try:
            out.append(host_report(instance_id, samples, interval_s))
        except ReportRejected as exc:
            out.append(exc)
    return out


def _interval(doc: dict) -> float | None:
    interval = doc.get("interval_s")
    if isinstance(interval, (int, float)) and not isinstance(interval, bool) and 0 < interval <= MAX_PERIOD_S:
        return float(interval)
    return None


def parse_prometheus_line(kind: str, text: str) -> list[ExporterReport | ReportRejected]:
    """The typed records one "prometheus" or "promql" line holds (one per host, or its rejection).

    A line that is unusable as a whole gives a single `ReportRejected`: `oversize`, `not-json`,
    `not-object`, `not-exposition` (a body that is not the text format), `unreadable-answer` (a
    server answer the source could not split, recorded as such), `series-over-limit` (a refresh
    that dropped series past its bound) or `schema`. A scrape with no
    host series yet (an exporter that has not had a report) gives no record and no rejection.
    Nothing raises: an unforeseen failure of one line is its rejection (`undecodable`).
    """
    try:
        return _parse_line(kind, text)
    except ReportRejected as exc:
        return [exc]
    except Exception as exc:  # noqa: BLE001 - one line must never end its source
        return [ReportRejected("undecodable", f"{type(exc).__name__}: {str(exc)[:160]}")]


def _parse_line(kind: str, text: str) -> list[ExporterReport | ReportRejected]:
    if len(text) > MAX_BODY_BYTES + 4096:
        raise ReportRejected("oversize", f"{len(text)} characters > {MAX_BODY_BYTES}")
    try:
        doc = msgspec.json.decode(text)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise ReportRejected("not-json", f"{type(exc).__name__}: {str(exc)[:120]}") from None
    if not isinstance(doc, dict):
        raise ReportRejected("not-object", f"a {kind} line must be a JSON object")
    interval_s = _interval(doc)
    if kind == "prometheus":
        body = doc.get("body")
        if not isinstance(body, str):
            raise ReportRejected("schema", "no exposition text in 'body'")
        try:
            samples = scrape_samples(body)
        except prometheus_text.ExpositionError as exc:
            raise ReportRejected("not-exposition", str(exc)[:200]) from None
        return _reports(_group_by_instance(samples), interval_s)
    if "unreadable" in doc:  # a refresh whose answers could not be split (prometheus_sources.py)
        raise ReportRejected("unreadable-answer", str(doc["unreadable"])[:200])
    if "series_dropped" in doc:  # a refresh past its series bound (prometheus_sources.py)
        raise ReportRejected(
            "series-over-limit", f"{doc['series_dropped']} series dropped past the {doc.get('series_kept')} kept"
        )
    instance_id, rows = doc.get("instance_id"), doc.get("samples")
    if not isinstance(instance_id, str) or not isinstance(rows, list):
        raise ReportRejected("schema", "a promql line needs 'instance_id' and 'samples'")
    samples = []
    for row in rows:
        # Label values that are not text are caught where they are read (_label_int, _text).
        try:
            name, labels, value = row
            if type(name) is not str or type(labels) is not dict or type(value) is not str:
                raise ValueError
            samples.append((name, labels, float(value)))
        except (ValueError, TypeError):
            raise ReportRejected(
                "schema", f"{instance_id}: sample {str(row)[:80]} is not [name, labels, value]"
            ) from None
    return _reports({instance_id: samples}, interval_s)
