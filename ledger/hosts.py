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
  reporting the same core (seen in AWS's own fixture) count once, at the higher figure.
"""

from collections import Counter, deque
from dataclasses import dataclass, field

from trnwatch.collectors.neuron_monitor import Report
from trnwatch.ledger.counters import CounterFamily

# Five minutes of 1 Hz samples per chip: enough for sparklines and trend, bounded for a day-long run.
HISTORY_SAMPLES = 300

ECC_FIELDS = ("mem_ecc_corrected", "mem_ecc_uncorrected", "sram_ecc_corrected", "sram_ecc_uncorrected")


@dataclass(slots=True)
class ChipSample:
    t_s: float
    util_pct: float | None
    hbm_bytes: int | None


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
    history: deque = field(default_factory=lambda: deque(maxlen=HISTORY_SAMPLES))

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
    runtimes: dict[tuple[int, str], RuntimeState] = field(default_factory=dict)
    reports: int = 0
    first_s: float | None = None
    last_s: float | None = None
    period_s: float | None = None
    vcpu_busy_pct: float | None = None
    vcpu_count: int | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    group_errors: dict[str, str] = field(default_factory=dict)
    # Data that did not fit the host's own topology (e.g. a core beyond the chip count).
    anomalies: Counter = field(default_factory=Counter)
    simulated: bool = False

    def fold(self, report: Report, received_s: float, declared_counters: bool = False) -> None:
        """Fold one validated report received at `received_s` into this host's state.

        `declared_counters`: the source declared its counts running totals (Prometheus counters),
        so no reading has to be inferred (see ledger/counters.py)."""
        self.reports += 1
        if self.first_s is None:
            self.first_s = received_s
        self.last_s = received_s
        self.simulated = self.simulated or report.trnwatch_simulator is not None
        self._fold_identity(report)
        self._fold_runtimes(report, received_s, declared_counters)
        self._fold_system(report, declared_counters)

    # --- identity and topology ----------------------------------------------------------------

    def _fold_identity(self, report: Report) -> None:
        info = report.instance_info
        if info is not None:
            self.instance_type = info.instance_type or self.instance_type
            self.instance_name = info.instance_name or self.instance_name
            self.ultraserver_reported = info.ultraserver_id or self.ultraserver_reported
        hw = report.neuron_hardware_info
        if hw is None:
            return
        if hw.error:
            self.group_errors["neuron_hardware_info"] = hw.error
            return
        self.group_errors.pop("neuron_hardware_info", None)
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
        n = len(self.chips)
        core_util: dict[int, CoreState] = {}
        hbm = [0] * n
        hbm_cat: list[dict[str, int]] = [{} for _ in range(n)]
        counters_ok = memory_ok = False
        seen: set[tuple[int, str]] = set()
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
            nc = rep.neuroncore_counters
            if nc is not None:
                if nc.error:
                    runtime.group_errors["neuroncore_counters"] = nc.error
                elif nc.neuroncores_in_use is not None:
                    runtime.group_errors.pop("neuroncore_counters", None)
                    counters_ok = True
                    for core, c in nc.neuroncores_in_use.items():
                        cores.add(core)
                        util = c.neuroncore_utilization or 0.0
                        prior = core_util.get(core)
                        if prior is None or util > prior.util_pct:
                            physical = {k: p.neuroncore_utilization for k, p in c.physical.items()
                                        if p.neuroncore_utilization is not None}
                            flops = c.flops if c.flops is not None else c.effective_flops
                            core_util[core] = CoreState(util, flops, physical)
            mem = rep.memory_used
            if mem is not None:
                if mem.error:
                    runtime.group_errors["memory_used"] = mem.error
                else:
                    runtime.group_errors.pop("memory_used", None)
                    used = mem.neuron_runtime_used_bytes
                    if used is not None:
                        runtime.device_bytes = used.neuron_device
                        runtime.host_bytes = used.host
                        per_core = used.usage_breakdown.neuroncore_memory_usage if used.usage_breakdown else None
                        if per_core is not None:
                            memory_ok = True
                            for core, categories in per_core.items():
                                cores.add(core)
                                chip = self._chip_of(core)
                                if chip is None:
                                    continue
                                bucket = hbm_cat[chip]
                                for name, value in categories.items():
                                    hbm[chip] += value
                                    bucket[name] = bucket.get(name, 0) + value
                    if mem.loaded_models is not None:
                        runtime.loaded_models = [
                            LoadedModelState(
                                m.name, m.model_id, m.is_running,
                                tuple(sorted({s.neuron_device_index for s in (m.subgraphs or {}).values()
                                              if s.neuron_device_index is not None})),
                            )
                            for m in mem.loaded_models
                        ]
            if cores:
                runtime.cores = tuple(sorted(cores))
            self._fold_executions(runtime, rep, declared_counters)
            vcpu = rep.neuron_runtime_vcpu_usage
            if vcpu is not None and not vcpu.error and vcpu.vcpu_usage is not None:
                runtime.vcpu_user_pct = vcpu.vcpu_usage.user
                runtime.vcpu_system_pct = vcpu.vcpu_usage.system
            elif vcpu is not None and vcpu.error:
                runtime.group_errors["neuron_runtime_vcpu_usage"] = vcpu.error
        # Runtimes that left the report are gone; their window counters stay in the receipt.
        for key, runtime in self.runtimes.items():
            if key not in seen:
                runtime.cores = ()

        no_runtime = not entries
        util_sample = counters_ok or no_runtime
        hbm_sample = memory_ok or no_runtime
        if not (util_sample or hbm_sample) or not self.cores_per_chip:
            return
        util_by_chip = [0.0] * n
        for core, state in core_util.items():
            chip = self._chip_of(core)
            if chip is not None:
                util_by_chip[chip] += state.util_pct
        for chip in self.chips:
            util = util_by_chip[chip.index] / self.cores_per_chip if util_sample else None
            chip_hbm = hbm[chip.index] if hbm_sample else None
            if util is not None:
                chip.util_pct = util
                chip.util_at_s = t_s
                chip.samples += 1
                chip.util_sum_pct += util
                chip.util_max_pct = util if chip.util_max_pct is None else max(chip.util_max_pct, util)
                chip.cores = {c: s for c, s in core_util.items() if c // self.cores_per_chip == chip.index}
                flops = [s.flops for s in chip.cores.values() if s.flops is not None]
                if flops or (not chip.cores and chip.flops_samples):  # idle counts 0 once flops were seen
                    chip.flops_sum += sum(flops)
                    chip.flops_samples += 1
            if chip_hbm is not None:
                chip.hbm_bytes = chip_hbm
                chip.hbm_at_s = t_s
                chip.hbm_by_category_bytes = hbm_cat[chip.index]
                chip.hbm_peak_bytes = chip_hbm if chip.hbm_peak_bytes is None else max(chip.hbm_peak_bytes, chip_hbm)
            chip.history.append(ChipSample(t_s, util, chip_hbm))

    def _fold_executions(self, runtime: RuntimeState, rep, declared_counters: bool) -> None:
        stats = rep.execution_stats
        if stats is None:
            return
        if stats.error:
            # Values beside an error are zeroed placeholders; folding them would fake a reset.
            runtime.group_errors["execution_stats"] = stats.error
            return
        runtime.group_errors.pop("execution_stats", None)
        counts = {f"error.{k}": v for k, v in (stats.error_summary or {}).items()}
        counts.update({f"status.{k}": v for k, v in (stats.execution_summary or {}).items()})
        if counts:
            runtime.executions.declared_counter = declared_counters
            runtime.executions.add(counts)
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
        if hw is not None:
            if hw.error:
                self.group_errors["neuron_hw_counters"] = hw.error
            else:
                self.group_errors.pop("neuron_hw_counters", None)
                for dev in hw.neuron_devices or ():
                    if dev.neuron_device_index >= len(self.chips):
                        self.anomalies["ecc-device-beyond-chip-count"] += 1
                        continue
                    counts = {name: getattr(dev, name) for name in ECC_FIELDS if getattr(dev, name) is not None}
                    ecc = self.chips[dev.neuron_device_index].ecc
                    ecc.declared_counter = declared_counters
                    ecc.add(counts)
        vcpu = system.vcpu_usage
        if vcpu is not None and not vcpu.error:
            avg = vcpu.average_usage
            if avg is not None and "idle" in avg:
                self.vcpu_busy_pct = max(0.0, 100.0 - avg["idle"])
            if vcpu.usage_data is not None:
                self.vcpu_count = len(vcpu.usage_data)
            if vcpu.period:
                self.period_s = vcpu.period
        memory = system.memory_info
        if memory is not None and not memory.error:
            self.memory_used_bytes = memory.memory_used_bytes
            self.memory_total_bytes = memory.memory_total_bytes
