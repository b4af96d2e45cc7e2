"""Per-host state: one neuron-monitor stream folded into host, chip, core and runtime figures.

Topology inside a host comes from the report itself: `neuron_hardware_info` gives the chip
count, logical cores per chip and HBM per chip; a core index is global on the host, so its chip
is `core // neuroncore_per_device_count`. Runtimes are keyed by (pid, tag): tags need not be
unique (real reports show several runtimes sharing one), and never key alone.

Definitions pinned by the receipt contract:
- a chip's HBM at one report is the sum, over all runtimes and over the chip's logical cores in
  `usage_breakdown.neuroncore_memory_usage`, of all categories there;
- a chip's utilisation at one report is the mean over its logical cores of
  `neuroncore_utilization`, cores not listed counting as 0 (neuron-monitor omits idle cores); a
  report is a utilisation sample only if `neuroncore_counters` was present without error for at
  least one runtime, or no runtime was running at all (then utilisation is 0). Two runtimes
  reporting the same core (seen in AWS's own fixture) count once, at the higher figure;
- a figure built from a value the report did not give usably (a listed core without its
  utilisation, a core's memory breakdown that is null, or either past its bound and removed
  by the decoder) is unknown for that report: that chip gets no utilisation (or HBM) sample,
  the other chips do.
"""

import math
from array import array
from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol, TypeGuard, TypeVar

from trnwatch.collectors.limits import MAX_RUNTIMES_PER_HOST, RUNTIME_EVICT_MIN_S, RUNTIME_EVICT_PERIODS
from trnwatch.collectors.neuron_monitor import Report
from trnwatch.collectors.prometheus import ExporterReport
from trnwatch.ledger.counters import CounterFamily
from trnwatch.ledger.exporter_gauges import ExporterGauges

# Five minutes of 1 Hz samples per chip: enough for sparklines and trend, bounded for a day-long run.
HISTORY_SAMPLES = 300

ECC_FIELDS = ("mem_ecc_corrected", "mem_ecc_uncorrected", "sram_ecc_corrected", "sram_ecc_uncorrected")


class ChipSample(NamedTuple):
    t_s: float
    util_pct: float | None
    hbm_bytes: int | None


class ChipHistory:
    """The last HISTORY_SAMPLES samples of one chip, oldest first, in preallocated arrays.

    Plain number arrays, not a deque of sample objects: at 1,152 hosts x 4 chips x 300 samples
    the garbage collector would otherwise walk 1.4 million objects on every full pass.
    Iterating yields `ChipSample`s (made on demand); an unknown figure is None."""

    __slots__ = ("_t_s", "_util_pct", "_hbm_bytes", "_next", "_len")

    def __init__(self, size: int = HISTORY_SAMPLES):
        self._t_s = array("d", bytes(8 * size))
        self._util_pct = array("d", bytes(8 * size))
        self._hbm_bytes = array("q", bytes(8 * size))  # -1: unknown
        self._next = 0
        self._len = 0

    def append(self, t_s: float, util_pct: float | None, hbm_bytes: int | None) -> None:
        i = self._next
        self._t_s[i] = t_s
        self._util_pct[i] = math.nan if util_pct is None else util_pct
        self._hbm_bytes[i] = -1 if hbm_bytes is None else min(hbm_bytes, _MAX_HISTORY_BYTES)
        size = len(self._t_s)
        self._next = (i + 1) % size
        self._len = min(self._len + 1, size)

    def __len__(self) -> int:
        return self._len

    def __iter__(self):
        size = len(self._t_s)
        start = (self._next - self._len) % size
        for k in range(self._len):
            i = (start + k) % size
            util, hbm = self._util_pct[i], self._hbm_bytes[i]
            yield ChipSample(self._t_s[i], None if util != util else util, None if hbm < 0 else hbm)

    def __reversed__(self):
        """Newest first: a reader of the recent window (HBM trends) stops where it ends."""
        size = len(self._t_s)
        for k in range(1, self._len + 1):
            i = (self._next - k) % size
            util, hbm = self._util_pct[i], self._hbm_bytes[i]
            yield ChipSample(self._t_s[i], None if util != util else util, None if hbm < 0 else hbm)


# A sum of bounded byte counts over a chip's cores can pass what int64 holds; history is for
# sparklines, so it stores at most this (the chip's own figures keep the exact sum).
_MAX_HISTORY_BYTES = (1 << 63) - 1


@dataclass(slots=True)
class CoreState:
    """Latest figures of one logical NeuronCore (only while it is listed as in use)."""

    util_pct: float
    flops: float | None
    physical_util_pct: dict[str, float]


@dataclass(slots=True)
class ChipState:
    index: int
    hbm_capacity_bytes: int | None = None
    # latest
    util_pct: float | None = None
    hbm_bytes: int | None = None
    hbm_by_category_bytes: dict[str, int] = field(default_factory=dict)
    cores: dict[int, CoreState] = field(default_factory=dict)
    util_at_s: float | None = None
    hbm_at_s: float | None = None
    # window
    samples: int = 0
    util_sum_pct: float = 0.0
    util_max_pct: float | None = None
    hbm_peak_bytes: int | None = None
    flops_sum: float = 0.0  # FLOP/s summed over the chip's cores, per utilisation sample with flops
    flops_samples: int = 0
    ecc: CounterFamily = field(default_factory=CounterFamily)
    # Cores whose exporter gauge was stale at the latest sample, and samples with any such core
    # (Prometheus sources only; ledger/exporter_gauges.py).
    util_stale_cores: tuple[int, ...] = ()
    util_stale_samples: int = 0
    history: ChipHistory = field(default_factory=ChipHistory)

    @property
    def util_mean_pct(self) -> float | None:
        return self.util_sum_pct / self.samples if self.samples else None

    @property
    def flops_mean_per_s(self) -> float | None:
        return self.flops_sum / self.flops_samples if self.flops_samples else None


@dataclass(slots=True)
class LoadedModelState:
    name: str
    model_id: int | None
    is_running: bool | None
    devices: tuple[int, ...]


@dataclass(slots=True)
class RuntimeState:
    pid: int | None  # None when the source carries none (Prometheus)
    tag: str
    last_seen_s: float
    error: str = ""
    cores: tuple[int, ...] = ()
    device_bytes: int | None = None
    host_bytes: int | None = None
    vcpu_user_pct: float | None = None
    vcpu_system_pct: float | None = None
    total_latency_s: dict[str, float] = field(default_factory=dict)
    device_latency_s: dict[str, float] = field(default_factory=dict)
    loaded_models: list[LoadedModelState] = field(default_factory=list)
    executions: CounterFamily = field(default_factory=CounterFamily)
    group_errors: dict[str, str] = field(default_factory=dict)

    @property
    def order(self) -> tuple:
        """Stable listing order: by pid (runtimes without one last), then tag."""
        return (self.pid is None, self.pid or 0, self.tag)


@dataclass(slots=True)
class HostState:
    """Everything known about one host, from one neuron-monitor stream."""

    host_id: str
    source_id: str
    instance_type: str | None = None
    instance_name: str | None = None
    ultraserver_reported: str | None = None
    device_type: str | None = None
    neuroncore_version: str | None = None
    lnc: int | None = None
    cores_per_chip: int | None = None
    chips: list[ChipState] = field(default_factory=list)
    runtimes: dict[tuple[int | None, str], RuntimeState] = field(
        default_factory=dict
    )  # (pid, tag); no pid from Prometheus
    reports: int = 0
    first_s: float | None = None
    last_s: float | None = None
    period_s: float | None = None
    vcpu_busy_pct: float | None = None
    vcpu_count: int | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    group_errors: dict[str, str] = field(default_factory=dict)
    # Data that did not fit the host's own topology or limits (e.g. a core beyond the chip count).
    anomalies: Counter = field(default_factory=Counter)
    # Runtimes dropped after missing for the eviction time (limits.RUNTIME_EVICT_*).
    runtimes_evicted: int = 0
    simulated: bool = False
    exporter_gauges: ExporterGauges | None = None  # hosts read through a Prometheus exporter

    def fold(self, report: Report, received_s: float) -> None:
        """Fold one validated report received at `received_s` into this host's state.

        `report.declared_counters`: the source declared its counts running totals (Prometheus
        counters), so no reading has to be inferred (see ledger/counters.py)."""
        if isinstance(report, ExporterReport):
            if self.exporter_gauges is None:
                self.exporter_gauges = ExporterGauges()
            report = self.exporter_gauges.fresh_only(report)
        declared_counters = report.declared_counters
        self.reports += 1
        if self.first_s is None:
            self.first_s = received_s
        self.last_s = received_s
        self.simulated = self.simulated or report.trnwatch_simulator is not None
        self._fold_identity(report)
        self._fold_runtimes(report, received_s, declared_counters)
        self._fold_system(report, declared_counters)
        if self.exporter_gauges is not None:
            self._mark_stale_gauges(self.exporter_gauges.stale_cores)

    def _mark_stale_gauges(self, cores: set[int]) -> None:
        if not self.cores_per_chip:
            return
        for chip in self.chips:
            chip.util_stale_cores = tuple(sorted(c for c in cores if c // self.cores_per_chip == chip.index))
            chip.util_stale_samples += bool(chip.util_stale_cores)

    # --- identity and topology ----------------------------------------------------------------

    def _fold_identity(self, report: Report) -> None:
        info = report.instance_info
        if info is not None:
            self.instance_type = info.instance_type or self.instance_type
            self.instance_name = info.instance_name or self.instance_name
            self.ultraserver_reported = info.ultraserver_id or self.ultraserver_reported
        hw = report.neuron_hardware_info
        if not _group_ok(hw, self.group_errors, "neuron_hardware_info"):
            return
        self.device_type = hw.neuron_device_type or self.device_type
        self.neuroncore_version = hw.neuroncore_version or self.neuroncore_version
        self.lnc = hw.logical_neuroncore_config or self.lnc
        self.cores_per_chip = hw.neuroncore_per_device_count or self.cores_per_chip
        if hw.neuron_device_count is not None and hw.neuron_device_count != len(self.chips):
            del self.chips[hw.neuron_device_count :]
            self.chips.extend(ChipState(i) for i in range(len(self.chips), hw.neuron_device_count))
        for chip in self.chips:
            chip.hbm_capacity_bytes = hw.neuron_device_memory_size

    def _chip_of(self, core: int) -> int | None:
        if not self.cores_per_chip:
            self.anomalies["core-without-topology"] += 1
            return None
        chip = core // self.cores_per_chip
        if chip >= len(self.chips):
            self.anomalies["core-beyond-chip-count"] += 1
            return None
        return chip

    # --- runtimes: utilisation, HBM, executions ----------------------------------------------

    def _fold_runtimes(self, report: Report, t_s: float, declared_counters: bool) -> None:
        entries = report.neuron_runtime_data
        if entries is None:
            return  # runtime groups not reported at all: no sample, not a zero
        frame = _ReportFrame.for_chips(len(self.chips))
        seen: set[tuple[int | None, str]] = set()
        for entry in entries:
            key = (entry.pid, entry.neuron_runtime_tag or "")
            seen.add(key)
            runtime = self.runtimes.get(key)
            if runtime is None:
                runtime = self.runtimes[key] = RuntimeState(entry.pid, key[1], t_s)
            runtime.last_seen_s = t_s
            runtime.error = entry.error or ""
            rep = entry.report
            if rep is None:
                continue
            cores: set[int] = set()
            self._fold_core_counters(runtime, rep.neuroncore_counters, frame, cores)
            self._fold_memory(runtime, rep.memory_used, frame, cores)
            if cores:
                runtime.cores = tuple(sorted(cores))
            self._fold_executions(runtime, rep.execution_stats, declared_counters)
            vcpu = rep.neuron_runtime_vcpu_usage
            if _group_ok(vcpu, runtime.group_errors, "neuron_runtime_vcpu_usage") and vcpu.vcpu_usage is not None:
                runtime.vcpu_user_pct = vcpu.vcpu_usage.user
                runtime.vcpu_system_pct = vcpu.vcpu_usage.system
        self._retire_runtimes(seen, t_s)
        self._fold_chip_samples(frame, t_s, no_runtime=not entries)

    def _fold_core_counters(self, runtime: RuntimeState, nc, frame: "_ReportFrame", cores: set[int]) -> None:
        if not _group_ok(nc, runtime.group_errors, "neuroncore_counters") or nc.neuroncores_in_use is None:
            return
        frame.counters_ok = True
        for core, c in nc.neuroncores_in_use.items():
            cores.add(core)
            util = c.neuroncore_utilization
            if util is None:  # listed, but its figure is unknown (absent, or past its bound)
                frame.util_unknown_cores.add(core)
                continue
            prior = frame.core_util.get(core)
            if prior is None or util > prior.util_pct:
                split = c.physical
                physical = (
                    {k: p.neuroncore_utilization for k, p in split.items() if p.neuroncore_utilization is not None}
                    if split
                    else {}
                )
                flops = c.flops if c.flops is not None else c.effective_flops
                frame.core_util[core] = CoreState(util, flops, physical)

    def _fold_memory(self, runtime: RuntimeState, mem, frame: "_ReportFrame", cores: set[int]) -> None:
        if not _group_ok(mem, runtime.group_errors, "memory_used"):
            return
        used = mem.neuron_runtime_used_bytes
        if used is not None:
            runtime.device_bytes = used.neuron_device
            runtime.host_bytes = used.host
            per_core = used.usage_breakdown.neuroncore_memory_usage if used.usage_breakdown else None
            if per_core is not None:
                frame.memory_ok = True
                per_chip, n = self.cores_per_chip, len(self.chips)
                for core, categories in per_core.items():
                    cores.add(core)
                    chip = core // per_chip if per_chip else n
                    if chip >= n:
                        self._chip_of(core)  # counts the anomaly
                        continue
                    if categories is None:  # this core's memory is unknown, so is its chip's
                        frame.hbm_unknown_chips.add(chip)
                        continue
                    bucket = frame.hbm_by_category[chip]
                    for name, value in categories.items():
                        bucket[name] = bucket.get(name, 0) + value
                    frame.hbm[chip] += sum(categories.values())
        if mem.loaded_models is not None:
            runtime.loaded_models = [
                LoadedModelState(
                    m.name,
                    m.model_id,
                    m.is_running,
                    tuple(
                        sorted(
                            {
                                s.neuron_device_index
                                for s in (m.subgraphs or {}).values()
                                if s.neuron_device_index is not None
                            }
                        )
                    ),
                )
                for m in mem.loaded_models
            ]

    def _retire_runtimes(self, seen: set, t_s: float) -> None:
        """Runtimes that left the report are gone: they own no core any more, and their window
        counters stay in the receipt until they have been missing for the eviction time. Past
        MAX_RUNTIMES_PER_HOST the least recently seen go first (counted as an anomaly)."""
        evict_after_s = max(RUNTIME_EVICT_PERIODS * (self.period_s or 1.0), RUNTIME_EVICT_MIN_S)
        absent = [key for key in self.runtimes if key not in seen]
        for key in absent:
            runtime = self.runtimes[key]
            runtime.cores = ()
            if t_s - runtime.last_seen_s > evict_after_s:
                del self.runtimes[key]
                self.runtimes_evicted += 1
        excess = len(self.runtimes) - MAX_RUNTIMES_PER_HOST
        if excess > 0:
            absent = sorted((k for k in absent if k in self.runtimes), key=lambda k: self.runtimes[k].last_seen_s)
            for key in absent[:excess]:
                del self.runtimes[key]
                self.runtimes_evicted += 1
                self.anomalies["runtimes-over-limit"] += 1

    def _fold_chip_samples(self, frame: "_ReportFrame", t_s: float, no_runtime: bool) -> None:
        util_sample = frame.counters_ok or no_runtime
        hbm_sample = frame.memory_ok or no_runtime
        per_chip = self.cores_per_chip
        if not (util_sample or hbm_sample) or not per_chip:
            return
        n = len(self.chips)
        util_by_chip = [0.0] * n
        cores_by_chip: list[dict[int, CoreState]] = [{} for _ in range(n)]
        for core, state in frame.core_util.items():
            index = self._chip_of(core)
            if index is not None:
                util_by_chip[index] += state.util_pct
                cores_by_chip[index][core] = state
        util_unknown = {core // per_chip for core in frame.util_unknown_cores}
        for chip in self.chips:
            i = chip.index
            util = util_by_chip[i] / per_chip if util_sample and i not in util_unknown else None
            chip_hbm = frame.hbm[i] if hbm_sample and i not in frame.hbm_unknown_chips else None
            if util_sample:
                chip.cores = cores_by_chip[i]
            if util is not None:
                chip.util_pct = util
                chip.util_at_s = t_s
                chip.samples += 1
                chip.util_sum_pct += util
                chip.util_max_pct = util if chip.util_max_pct is None else max(chip.util_max_pct, util)
                flops = [s.flops for s in chip.cores.values() if s.flops is not None]
                if flops or (not chip.cores and chip.flops_samples):  # idle counts 0 once flops were seen
                    chip.flops_sum += sum(flops)
                    chip.flops_samples += 1
            if chip_hbm is not None:
                chip.hbm_bytes = chip_hbm
                chip.hbm_at_s = t_s
                chip.hbm_by_category_bytes = frame.hbm_by_category[i]
                chip.hbm_peak_bytes = chip_hbm if chip.hbm_peak_bytes is None else max(chip.hbm_peak_bytes, chip_hbm)
            chip.history.append(t_s, util, chip_hbm)

    def _fold_executions(self, runtime: RuntimeState, stats, declared_counters: bool) -> None:
        # Values beside an error are zeroed placeholders; folding them would fake a reset.
        if not _group_ok(stats, runtime.group_errors, "execution_stats"):
            return
        counts = {f"error.{k}": v for k, v in (stats.error_summary or {}).items()}
        counts.update({f"status.{k}": v for k, v in (stats.execution_summary or {}).items()})
        if counts:
            runtime.executions.declared_counter = declared_counters
            refused = runtime.executions.add(counts)
            if refused:
                self.anomalies["counter-names-over-limit"] += refused
        lat = stats.latency_stats
        if lat is not None:
            if lat.total_latency:
                runtime.total_latency_s = {k: v for k, v in lat.total_latency.items() if v is not None}
            if lat.device_latency:
                runtime.device_latency_s = {k: v for k, v in lat.device_latency.items() if v is not None}

    # --- system groups -------------------------------------------------------------------------

    def _fold_system(self, report: Report, declared_counters: bool) -> None:
        system = report.system_data
        if system is None:
            return
        hw = system.neuron_hw_counters
        if _group_ok(hw, self.group_errors, "neuron_hw_counters"):
            for dev in hw.neuron_devices or ():
                if dev.neuron_device_index >= len(self.chips):
                    self.anomalies["ecc-device-beyond-chip-count"] += 1
                    continue
                counts = {name: getattr(dev, name) for name in ECC_FIELDS if getattr(dev, name) is not None}
                ecc = self.chips[dev.neuron_device_index].ecc
                ecc.declared_counter = declared_counters
                ecc.add(counts)  # the four ECC_FIELDS: never past the limit
        vcpu = system.vcpu_usage
        if _group_ok(vcpu, self.group_errors, "vcpu_usage"):
            avg = vcpu.average_usage
            if avg is not None and "idle" in avg:
                self.vcpu_busy_pct = max(0.0, 100.0 - avg["idle"])
            if vcpu.usage_data is not None:
                self.vcpu_count = len(vcpu.usage_data)
            if vcpu.period:
                self.period_s = vcpu.period
        memory = system.memory_info
        if _group_ok(memory, self.group_errors, "memory_info"):
            self.memory_used_bytes = memory.memory_used_bytes
            self.memory_total_bytes = memory.memory_total_bytes


class _ReportGroup(Protocol):
    @property
    def error(self) -> str | None: ...


_G = TypeVar("_G", bound=_ReportGroup)


def _group_ok(group: _G | None, errors: dict[str, str], name: str) -> TypeGuard[_G]:
    """Record or clear one group's error; True when the group came without one.

    A group absent from the report changes nothing: it was not reported this period."""
    if group is None:
        return False
    if group.error:
        errors[name] = group.error
        return False
    errors.pop(name, None)
    return True


@dataclass(slots=True)
class _ReportFrame:
    """What one report's runtimes add up to, per chip, before it becomes the chips' sample."""

    core_util: dict[int, CoreState]
    hbm: list[int]
    hbm_by_category: list[dict[str, int]]
    util_unknown_cores: set[int] = field(default_factory=set)  # listed without a usable figure
    hbm_unknown_chips: set[int] = field(default_factory=set)  # a core's memory was unknown
    counters_ok: bool = False
    memory_ok: bool = False

    @classmethod
    def for_chips(cls, n: int) -> "_ReportFrame":
        return cls({}, [0] * n, [{} for _ in range(n)])
