"""Per-chip state: a host's chips and their cores, figures over the window, and bounded history.

A core index is global on the host, so its chip is `core // cores_per_chip`. One report's
runtimes are first added up per chip (`ChipFrame`: core counters by `fold_core_counters`, memory
by ledger/runtimes.py); the sum then becomes each chip's sample (`fold_chip_samples`).
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

A chip's ECC counts (`neuron_hw_counters`) are a counter family each (ledger/counters.py).
"""

from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field

import msgspec

from trnwatch.collectors.neuron_monitor import DeviceEcc, NeuronCoreCounters
from trnwatch.ledger.chip_history import ChipHistory
from trnwatch.ledger.counters import CounterFamily
from trnwatch.ledger.report_groups import group_ok

ECC_FIELDS = ("mem_ecc_corrected", "mem_ecc_uncorrected", "sram_ecc_corrected", "sram_ecc_uncorrected")
ECC_CORRECTED_FIELDS = ("mem_ecc_corrected", "sram_ecc_corrected")
ECC_UNCORRECTED_FIELDS = ("mem_ecc_uncorrected", "sram_ecc_uncorrected")
ECC_MARKS = 64


class CoreState(msgspec.Struct, gc=False):
    """Latest figures of one logical NeuronCore (only while it is listed as in use).

    Made anew for every core at every report (18 k a refresh at 1,152 hosts), so untracked by
    the garbage collector (`gc=False`: it holds numbers and a dict of numbers, so it cannot be
    part of a reference cycle); the chip's dict of them then stays untracked too."""

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
    # (received s, corrected ECC events so far) after each report with a non-zero ECC counter, for
    # bursts (ledger/findings.py); bounded.
    ecc_corrected_marks: deque = field(default_factory=lambda: deque(maxlen=ECC_MARKS))
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
class ChipFrame:
    """What one report's runtimes add up to, per chip, before it becomes the chips' sample.

    `anomalies` is the host's count of data that did not fit its topology (a core beyond the
    chip count, or a core before the report gave the topology)."""

    chip_count: int
    cores_per_chip: int | None
    anomalies: Counter
    core_util: dict[int, CoreState] = field(default_factory=dict)
    hbm: list[int] = field(init=False)
    hbm_by_category: list[dict[str, int]] = field(init=False)
    util_unknown_cores: set[int] = field(default_factory=set)  # listed without a usable figure
    hbm_unknown_chips: set[int] = field(default_factory=set)  # a core's memory was unknown
    counters_ok: bool = False
    memory_ok: bool = False

    def __post_init__(self) -> None:
        self.hbm = [0] * self.chip_count
        self.hbm_by_category = [{} for _ in range(self.chip_count)]

    def chip_of(self, core: int) -> int | None:
        """The chip of a host-global core index; None (counted as an anomaly) when it has none."""
        if not self.cores_per_chip:
            self.anomalies["core-without-topology"] += 1
            return None
        chip = core // self.cores_per_chip
        if chip >= self.chip_count:
            self.anomalies["core-beyond-chip-count"] += 1
            return None
        return chip


def fold_core_counters(
    nc: NeuronCoreCounters | None, group_errors: dict[str, str], frame: ChipFrame, cores: set[int]
) -> None:
    """Fold one runtime entry's `neuroncore_counters` into the report's frame: each listed core's
    figures become its `CoreState` (the one place a per-core figure is read from the report);
    `cores` gets the cores the runtime listed, `group_errors` the group's error, if any."""
    if not group_ok(nc, group_errors, "neuroncore_counters") or nc.neuroncores_in_use is None:
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


def fold_chip_samples(chips: list[ChipState], frame: ChipFrame, t_s: float, no_runtime: bool) -> None:
    """Turn one report's frame into each chip's sample at `t_s` (see the module docstring)."""
    util_sample = frame.counters_ok or no_runtime
    hbm_sample = frame.memory_ok or no_runtime
    per_chip = frame.cores_per_chip
    if not (util_sample or hbm_sample) or not per_chip:
        return
    n = len(chips)
    util_by_chip = [0.0] * n
    cores_by_chip: list[dict[int, CoreState]] = [{} for _ in range(n)]
    for core, state in frame.core_util.items():
        index = frame.chip_of(core)
        if index is not None:
            util_by_chip[index] += state.util_pct
            cores_by_chip[index][core] = state
    util_unknown = {core // per_chip for core in frame.util_unknown_cores}
    for chip in chips:
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


def fold_ecc(
    chips: list[ChipState], devices: Iterable[DeviceEcc], declared_counters: bool, anomalies: Counter, t_s: float
) -> None:
    """Fold one report's per-device ECC counts, received at `t_s`, into each chip's ECC counter family."""
    for dev in devices:
        if dev.neuron_device_index >= len(chips):
            anomalies["ecc-device-beyond-chip-count"] += 1
            continue
        counts = {name: getattr(dev, name) for name in ECC_FIELDS if getattr(dev, name) is not None}
        ecc = chips[dev.neuron_device_index].ecc
        ecc.declared_counter = declared_counters
        ecc.add(counts)  # the four ECC_FIELDS: never past the limit
        if ecc.nonzero:
            totals = ecc.totals()
            chip = chips[dev.neuron_device_index]
            chip.ecc_corrected_marks.append((t_s, sum(totals.get(k) or 0 for k in ECC_CORRECTED_FIELDS)))


def mark_stale_cores(chips: list[ChipState], cores_per_chip: int | None, stale_cores: set[int]) -> None:
    """Which of each chip's cores had a stale exporter gauge at this sample (ledger/exporter_gauges.py)."""
    if not cores_per_chip:
        return
    for chip in chips:
        chip.util_stale_cores = tuple(sorted(c for c in stale_cores if c // cores_per_chip == chip.index))
        chip.util_stale_samples += bool(chip.util_stale_cores)


class ChipFigures(msgspec.Struct, frozen=True, gc=False):
    """A host's latest chip figures added up, once per report (the last step of its fold):
    what UltraServer and cluster rollups sum (ledger/rollups.py), so a rollup over 1,152 hosts
    walks hosts, not chips, and pays nothing per chip on the event loop when it is drawn.
    Numbers only, so untracked by the garbage collector, like `CoreState`."""

    chips: int
    hbm_used_bytes: int  # unknown figures count as 0, as in the rollup (its boundary says so)
    hbm_capacity_bytes: int | None  # None when any chip's capacity is unknown
    utils: tuple[float, ...]  # the chips' known utilisation, in chip order
    util_min_pct: float | None  # min(utils); None when no chip's utilisation is known
    chips_idle: int  # chips at exactly 0% utilisation
    ecc_seen: bool  # some chip's ECC counters read non-zero at some report (totals: rollups.chip_ecc)


NO_CHIPS = ChipFigures(0, 0, 0, (), None, 0, False)


def chip_figures(chips: list[ChipState]) -> ChipFigures:
    used_bytes = 0
    capacity_bytes: int | None = 0
    utils = []
    ecc_seen = False
    for chip in chips:
        used_bytes += chip.hbm_bytes or 0
        if chip.hbm_capacity_bytes is None:
            capacity_bytes = None
        elif capacity_bytes is not None:
            capacity_bytes += chip.hbm_capacity_bytes
        if chip.util_pct is not None:
            utils.append(chip.util_pct)
        ecc_seen = ecc_seen or chip.ecc.nonzero
    return ChipFigures(
        len(chips), used_bytes, capacity_bytes, tuple(utils), min(utils, default=None), utils.count(0.0), ecc_seen
    )
