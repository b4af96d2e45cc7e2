"""The chip view's model: one chip's cores, HBM, counters, processes and history, plain data."""

from dataclasses import dataclass

from trnwatch.ledger import ChipState, ChipSummary, CoreState, HbmTrend, HostSummary, ReadModel, is_execution_error
from trnwatch.tui.host_model import RuntimeLine, host_model

# Display names of the per-core HBM categories neuron-monitor reports; others keep their own name.
HBM_CATEGORIES = {
    "tensors": "tensors",
    "constants": "constants",
    "model_code": "model code",
    "model_shared_scratchpad": "scratchpad",
    "runtime_memory": "runtime",
}


@dataclass(frozen=True)
class CoreLine:
    """One core's line: the ledger's figures as they are (the view reads them, no copy here)."""

    index: int  # global on the host
    state: CoreState | None  # None when the core is not listed (neuron-monitor omits idle cores)
    util_pct: float | None  # the state's; for an unlisted core 0 when the report carried core counters


@dataclass(frozen=True)
class ChipModel:
    host: HostSummary
    cell: ChipSummary
    util_mean_pct: float | None
    util_max_pct: float | None
    hbm_peak_bytes: int | None
    util_age_s: float | None
    hbm_age_s: float | None
    cores: tuple[CoreLine, ...]
    hbm_by_category: tuple[tuple[str, int], ...]  # display name, bytes; known categories first
    ecc_totals: tuple[tuple[str, int | None], ...]
    ecc_reading: str
    runtimes: tuple[RuntimeLine, ...]  # processes using this chip
    latency_s: tuple[tuple[str, tuple[tuple[str, float], ...]], ...]  # per runtime tag: total latency percentiles
    execution_errors: tuple[tuple[str, int | None], ...]  # summed over the chip's runtimes
    models: tuple[tuple[str, int, int], ...]  # name, loaded copies, running copies
    history: tuple[tuple[float, float | None, int | None], ...]  # t_s, util_pct, hbm_bytes
    period_s: float | None
    hbm_trend: HbmTrend | None  # None: too few recent reports


def _categories(chip: ChipState) -> tuple[tuple[str, int], ...]:
    known = [
        (label, chip.hbm_by_category_bytes[key])
        for key, label in HBM_CATEGORIES.items()
        if key in chip.hbm_by_category_bytes
    ]
    other = sorted((k, v) for k, v in chip.hbm_by_category_bytes.items() if k not in HBM_CATEGORIES)
    return tuple(known + other)


def chip_model(read: ReadModel, host_id: str, index: int) -> ChipModel | None:
    now_s = read.now_s
    host = read.ledger.hosts.get(host_id)
    if host is None or not 0 <= index < len(host.chips):
        return None
    chip = host.chips[index]
    host_m = host_model(read, host_id)
    if host_m is None:  # the host was found above; host_model says None only for an unknown id
        return None
    per = host.cores_per_chip or 0
    cores = []
    for core in range(index * per, (index + 1) * per):
        state = chip.cores.get(core)
        cores.append(CoreLine(core, state, state.util_pct if state else (0.0 if chip.util_at_s is not None else None)))
    on_chip = [r for r in host_m.runtimes if index in r.chips]
    rt_states = [host.runtimes[(r.pid, r.tag)] for r in on_chip]
    errors: dict[str, int | None] = {}
    for rt in rt_states:
        for name, value in rt.executions.totals().items():
            if is_execution_error(name):
                prior = errors.get(name, 0)
                errors[name] = None if value is None or prior is None else prior + value
    models: dict[str, list[int]] = {}
    for rt in rt_states:
        for m in rt.loaded_models:
            if not m.devices or index in m.devices:
                counts = models.setdefault(m.name, [0, 0])
                counts[0] += 1
                counts[1] += 1 if m.is_running else 0
    return ChipModel(
        host=host_m.row,
        cell=host_m.row.chips[index],
        util_mean_pct=chip.util_mean_pct,
        util_max_pct=chip.util_max_pct,
        hbm_peak_bytes=chip.hbm_peak_bytes,
        util_age_s=None if chip.util_at_s is None else max(0.0, now_s - chip.util_at_s),
        hbm_age_s=None if chip.hbm_at_s is None else max(0.0, now_s - chip.hbm_at_s),
        cores=tuple(cores),
        hbm_by_category=_categories(chip),
        ecc_totals=tuple(sorted(chip.ecc.totals().items())),
        ecc_reading=chip.ecc.reading,
        runtimes=tuple(on_chip),
        latency_s=tuple((rt.tag, tuple(rt.total_latency_s.items())) for rt in rt_states if rt.total_latency_s),
        execution_errors=tuple(sorted(errors.items())),
        models=tuple((name, c[0], c[1]) for name, c in sorted(models.items())),
        history=tuple((s.t_s, s.util_pct, s.hbm_bytes) for s in chip.history),
        period_s=host.period_s,
        hbm_trend=read.hbm_trend(host, index),
    )
