"""Per-runtime state: each entry of a report's `neuron_runtime_data` folded into its runtime.

Runtimes are keyed by (pid, tag): tags need not be unique (real reports show several runtimes
sharing one), and never key alone; Prometheus sources carry no pid. A runtime entry's groups
fold into the runtime itself (memory totals, loaded models, executions, latency, vCPU) and add
its cores' memory to the report's per-chip frame; its core counters are folded by
ledger/chips.py, which owns every per-core figure.
"""

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from trnwatch.collectors.limits import MAX_RUNTIMES_PER_HOST, RUNTIME_EVICT_MIN_S, RUNTIME_EVICT_PERIODS
from trnwatch.collectors.neuron_monitor import (
    ExecutionStats,
    LoadedModel,
    MemoryUsed,
    RuntimeEntry,
)
from trnwatch.ledger.chips import ChipFrame, fold_core_counters
from trnwatch.ledger.counters import CounterFamily
from trnwatch.ledger.report_groups import group_ok, kept_error

RuntimeKey = tuple[int | None, str]  # (pid, tag)

# Execution outcomes that are errors (neuron-monitor's execution_summary): the receipt's error rate
# counts these among all outcomes; the chip view and the receipt's runtimes list them.
EXECUTION_ERROR_STATUSES = (
    "completed_with_err",
    "completed_with_num_err",
    "timed_out",
    "incorrect_input",
    "failed_to_queue",
)


def is_execution_error(counter: str) -> bool:
    """Whether a runtime's execution counter (`error.<kind>` from error_summary, `status.<outcome>`
    from execution_summary, as `_fold_executions` names them) counts errors."""
    group, _, name = counter.partition(".")
    return group == "error" or (group == "status" and name in EXECUTION_ERROR_STATUSES)


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
    # the report's own list the states above were built from: the next report's is usually equal
    # (a runtime loads its NEFFs once), and then nothing is rebuilt (frozen Structs, compared in C)
    loaded_models_seen: list[LoadedModel] | None = None
    executions: CounterFamily = field(default_factory=CounterFamily)
    group_errors: dict[str, str] = field(default_factory=dict)

    @property
    def order(self) -> tuple:
        """Stable listing order: by pid (runtimes without one last), then tag."""
        return (self.pid is None, self.pid or 0, self.tag)


def fold_runtime_entries(
    runtimes: dict[RuntimeKey, RuntimeState],
    entries: Iterable[RuntimeEntry],
    frame: ChipFrame,
    t_s: float,
    declared_counters: bool,
    room: int,
    anomalies: Counter,
) -> set[RuntimeKey]:
    """Fold one report's runtime entries received at `t_s`; returns the keys the report listed.
    At most `room` runtimes not kept yet are added (the ledger's budget across hosts); an entry
    past it is not folded and is counted as the anomaly `runtimes-over-budget`.

    `declared_counters`: the source declared its counts running totals (ledger/counters.py)."""
    seen: set[RuntimeKey] = set()
    for entry in entries:
        key = (entry.pid, entry.neuron_runtime_tag or "")
        runtime = runtimes.get(key)
        if runtime is None:
            if room <= 0:
                anomalies["runtimes-over-budget"] += 1
                continue
            room -= 1
            runtime = runtimes[key] = RuntimeState(entry.pid, key[1], t_s)
        seen.add(key)
        runtime.last_seen_s = t_s
        runtime.error = kept_error(entry.error or "")
        rep = entry.report
        if rep is None:
            continue
        cores: set[int] = set()
        fold_core_counters(rep.neuroncore_counters, runtime.group_errors, frame, cores)
        _fold_memory(runtime, rep.memory_used, frame, cores)
        if cores:
            runtime.cores = tuple(sorted(cores))
        _fold_executions(runtime, rep.execution_stats, declared_counters, frame.anomalies)
        vcpu = rep.neuron_runtime_vcpu_usage
        if group_ok(vcpu, runtime.group_errors, "neuron_runtime_vcpu_usage") and vcpu.vcpu_usage is not None:
            runtime.vcpu_user_pct = vcpu.vcpu_usage.user
            runtime.vcpu_system_pct = vcpu.vcpu_usage.system
    return seen


def retire_runtimes(
    runtimes: dict[RuntimeKey, RuntimeState],
    seen: set[RuntimeKey],
    t_s: float,
    period_s: float | None,
    anomalies: Counter,
) -> int:
    """Runtimes that left the report are gone: they own no core any more, and their window
    counters stay in the receipt until they have been missing for the eviction time. Past
    MAX_RUNTIMES_PER_HOST the least recently seen go first (counted as an anomaly). Returns how
    many were dropped."""
    evicted = 0
    evict_after_s = max(RUNTIME_EVICT_PERIODS * (period_s or 1.0), RUNTIME_EVICT_MIN_S)
    absent = [key for key in runtimes if key not in seen]
    for key in absent:
        runtime = runtimes[key]
        runtime.cores = ()
        if t_s - runtime.last_seen_s > evict_after_s:
            del runtimes[key]
            evicted += 1
    excess = len(runtimes) - MAX_RUNTIMES_PER_HOST
    if excess > 0:
        absent = sorted((k for k in absent if k in runtimes), key=lambda k: runtimes[k].last_seen_s)
        for key in absent[:excess]:
            del runtimes[key]
            evicted += 1
            anomalies["runtimes-over-limit"] += 1
    return evicted


def _fold_memory(runtime: RuntimeState, mem: MemoryUsed | None, frame: ChipFrame, cores: set[int]) -> None:
    if not group_ok(mem, runtime.group_errors, "memory_used"):
        return
    used = mem.neuron_runtime_used_bytes
    if used is not None:
        runtime.device_bytes = used.neuron_device
        runtime.host_bytes = used.host
        per_core = used.usage_breakdown.neuroncore_memory_usage if used.usage_breakdown else None
        if per_core is not None:
            frame.memory_ok = True
            for core, categories in per_core.items():
                cores.add(core)
                chip = frame.chip_of(core)
                if chip is None:
                    continue
                if categories is None:  # this core's memory is unknown, so is its chip's
                    frame.hbm_unknown_chips.add(chip)
                    continue
                bucket = frame.hbm_by_category[chip]
                for name, value in categories.items():
                    bucket[name] = bucket.get(name, 0) + value
                frame.hbm[chip] += sum(categories.values())
    if mem.loaded_models is not None and mem.loaded_models != runtime.loaded_models_seen:
        runtime.loaded_models = [_loaded_model(m) for m in mem.loaded_models]
        runtime.loaded_models_seen = mem.loaded_models


def _loaded_model(m: LoadedModel) -> LoadedModelState:
    devices = {s.neuron_device_index for s in (m.subgraphs or {}).values() if s.neuron_device_index is not None}
    return LoadedModelState(m.name, m.model_id, m.is_running, tuple(sorted(devices)))


def _fold_executions(
    runtime: RuntimeState, stats: ExecutionStats | None, declared_counters: bool, anomalies: Counter
) -> None:
    # Values beside an error are zeroed placeholders; folding them would fake a reset.
    if not group_ok(stats, runtime.group_errors, "execution_stats"):
        return
    counts = {f"error.{k}": v for k, v in (stats.error_summary or {}).items()}
    counts.update({f"status.{k}": v for k, v in (stats.execution_summary or {}).items()})
    if counts:
        runtime.executions.declared_counter = declared_counters
        refused = runtime.executions.add(counts)
        if refused:
            anomalies["counter-names-over-limit"] += refused
    lat = stats.latency_stats
    if lat is not None:
        if lat.total_latency:
            runtime.total_latency_s = {k: v for k, v in lat.total_latency.items() if v is not None}
        if lat.device_latency:
            runtime.device_latency_s = {k: v for k, v in lat.device_latency.items() if v is not None}
