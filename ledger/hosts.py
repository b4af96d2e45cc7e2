"""Per-host state: one neuron-monitor stream folded into host, chip, core and runtime figures.

The host keeps its identity and topology, its freshness (reports, first and last seen, report
period), its system groups (vCPU, memory) and what did not fit (group errors, anomalies). Its
chips are in ledger/chips.py (utilisation, HBM, ECC, history, and the definitions the receipt
contract pins), its runtimes in ledger/runtimes.py. Topology inside a host comes from the report
itself: `neuron_hardware_info` gives the chip count, logical cores per chip and HBM per chip.

Readers (views, receipts, snapshots, tests) take the state types they use from here.
"""

from collections import Counter
from dataclasses import dataclass, field

from trnwatch.collectors.neuron_monitor import Report
from trnwatch.collectors.prometheus import ExporterReport
from trnwatch.ledger.chip_history import HISTORY_SAMPLES, ChipHistory
from trnwatch.ledger.chips import (
    NO_CHIPS,
    ChipFigures,
    ChipFrame,
    ChipState,
    chip_figures,
    fold_chip_samples,
    fold_ecc,
    mark_stale_cores,
)
from trnwatch.ledger.exporter_gauges import ExporterGauges
from trnwatch.ledger.report_groups import group_ok
from trnwatch.ledger.runtimes import RuntimeKey, RuntimeState, fold_runtime_entries, retire_runtimes

# Handed on to the readers, so they need not know how the state is split.
__all__ = ["HISTORY_SAMPLES", "ChipFigures", "ChipHistory", "ChipState", "HostState", "RuntimeState"]


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
    runtimes: dict[RuntimeKey, RuntimeState] = field(default_factory=dict)  # no pid from Prometheus
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
    figures: ChipFigures = NO_CHIPS  # the chips' latest figures added up, after each report

    def fold(self, report: Report, received_s: float, runtime_room: int) -> None:
        """Fold one validated report received at `received_s` into this host's state, adding at
        most `runtime_room` runtimes (the ledger's budget across hosts).

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
        self._fold_runtimes(report, received_s, declared_counters, runtime_room)
        self._fold_system(report, declared_counters, received_s)
        if self.exporter_gauges is not None:
            mark_stale_cores(self.chips, self.cores_per_chip, self.exporter_gauges.stale_cores)
        self.figures = chip_figures(self.chips)

    def _fold_identity(self, report: Report) -> None:
        info = report.instance_info
        if info is not None:
            self.instance_type = info.instance_type or self.instance_type
            self.instance_name = info.instance_name or self.instance_name
            self.ultraserver_reported = info.ultraserver_id or self.ultraserver_reported
        hw = report.neuron_hardware_info
        if not group_ok(hw, self.group_errors, "neuron_hardware_info"):
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

    def _fold_runtimes(self, report: Report, t_s: float, declared_counters: bool, room: int) -> None:
        entries = report.neuron_runtime_data
        if entries is None:
            return  # runtime groups not reported at all: no sample, not a zero
        frame = ChipFrame(len(self.chips), self.cores_per_chip, self.anomalies)
        seen = fold_runtime_entries(self.runtimes, entries, frame, t_s, declared_counters, room, self.anomalies)
        self.runtimes_evicted += retire_runtimes(self.runtimes, seen, t_s, self.period_s, self.anomalies)
        fold_chip_samples(self.chips, frame, t_s, no_runtime=not entries)

    def _fold_system(self, report: Report, declared_counters: bool, t_s: float) -> None:
        system = report.system_data
        if system is None:
            return
        hw = system.neuron_hw_counters
        if group_ok(hw, self.group_errors, "neuron_hw_counters"):
            fold_ecc(self.chips, hw.neuron_devices or (), declared_counters, self.anomalies, t_s)
        vcpu = system.vcpu_usage
        if group_ok(vcpu, self.group_errors, "vcpu_usage"):
            avg = vcpu.average_usage
            if avg is not None and "idle" in avg:
                self.vcpu_busy_pct = max(0.0, 100.0 - avg["idle"])
            if vcpu.usage_data is not None:
                self.vcpu_count = len(vcpu.usage_data)
            if vcpu.period:
                self.period_s = vcpu.period
        memory = system.memory_info
        if group_ok(memory, self.group_errors, "memory_info"):
            self.memory_used_bytes = memory.memory_used_bytes
            self.memory_total_bytes = memory.memory_total_bytes
