"""Numbers for one chip (one Neuron runtime process) at one tick, drawn from its ChipCondition.

Every random draw comes from a `random.Random` seeded with (seed, host, chip, tick, aspect), so a
value depends on nothing but those, and each aspect (utilisation, executions, ...) can be
recomputed alone: ground_truth.py calls the same functions the report builder calls.
"""

import math
import random
from dataclasses import dataclass

from trnwatch.workloads.sim.scenarios import WARMUP_TICKS, ChipCondition
from trnwatch.workloads.sim.topology import GIB, Topology

MIB = 1 << 20
PAGE_BYTES = 4096

MEMORY_CATEGORIES = ("constants", "model_code", "model_shared_scratchpad", "runtime_memory", "tensors")

# Shares of one logical core's HBM (parts per 10 000): a large-model pretraining shard that fills
# ~84% of HBM once steady. runtime_memory exists from runtime start, the rest from NEFF load.
_CORE_SHARE_PER_10K = {
    "constants": 2500,
    "model_code": 112,
    "model_shared_scratchpad": 1667,
    "runtime_memory": 36,
    "tensors": 4000,
}
# Ranks differ a little in activation memory (uneven layers/sequence packing): 0-7 steps per rank.
_RANK_TENSORS_STEP_BYTES = 128 * MIB

STEADY_STEP_LATENCY_S = 0.45  # one NEFF execution = one training step
STRAGGLER_SLOWDOWN = 1.6
# Share of peak BF16 throughput a busy core achieves; the flops field is util x this x peak.
_BUSY_FLOPS_FRACTION = 0.7


@dataclass(frozen=True)
class CoreActivity:
    """One logical core that was active in the period (idle cores are absent, as in the real tool)."""

    utilization_pct: float  # rounded to 2 decimals; the mean of the physical values at LNC=2
    physical_utilization_pct: tuple[float, ...]  # one per physical core at LNC=2, empty at LNC=1
    flops_per_s: int


@dataclass(frozen=True)
class Executions:
    """NEFF executions of one runtime in one tick."""

    total_latency_s: tuple[float, ...]  # successful executions only
    device_latency_s: tuple[float, ...]
    completed_with_err: int
    hardware_errors: int


def rank(topology: Topology, host: int, chip: int) -> int:
    """Global index of (host, chip): its runtime's number among the topology's chips (the job's
    ranks on the chip are this x cores_per_chip + core, job.py)."""
    return host * topology.chips_per_host + chip


def _rng(seed: int, host: int, chip: int, tick: int, aspect: str) -> random.Random:
    # String seeds are hashed with SHA-512 by `random`, so this is stable across runs and machines.
    return random.Random(f"{seed}/{host}/{chip}/{tick}/{aspect}")


def _share_bytes(capacity_bytes: int, share_per_10k: int) -> int:
    return capacity_bytes * share_per_10k // 10_000 // PAGE_BYTES * PAGE_BYTES


def core_memory_bytes(
    topology: Topology, condition: ChipCondition, seed: int, host: int, chip: int
) -> list[dict[str, int]]:
    """Per logical core of the chip, HBM bytes in each of the 5 `neuroncore_memory_usage` categories."""
    core_capacity_bytes = topology.hbm_bytes_per_chip // topology.cores_per_chip
    share = {name: _share_bytes(core_capacity_bytes, s) for name, s in _CORE_SHARE_PER_10K.items()}
    imbalance_steps = random.Random(f"{seed}/{rank(topology, host, chip)}/tensors").randrange(8)
    steady_tensors_bytes = share["tensors"] + imbalance_steps * _RANK_TENSORS_STEP_BYTES

    if condition.phase == "compile":
        tensors_bytes = 0
    elif condition.phase == "warmup":
        # Optimizer state and activation buffers are allocated over the first steps.
        tensors_bytes = steady_tensors_bytes * (condition.ticks_into_phase + 1) // WARMUP_TICKS
    else:
        tensors_bytes = steady_tensors_bytes

    loaded = condition.models_loaded
    categories = {
        "constants": share["constants"] if loaded else 0,
        "model_code": share["model_code"] if loaded else 0,
        "model_shared_scratchpad": share["model_shared_scratchpad"] if loaded else 0,
        "runtime_memory": share["runtime_memory"],
    }
    # A leak fills the core until its categories reach its share of the chip's HBM, then stops.
    room_bytes = core_capacity_bytes - sum(categories.values())
    categories["tensors"] = min(tensors_bytes + condition.leaked_bytes // topology.cores_per_chip, room_bytes)
    return [dict(categories) for _ in range(topology.cores_per_chip)]


def _utilization_range_pct(condition: ChipCondition) -> tuple[float, float] | None:
    if condition.phase in ("compile", "stalled"):
        return None
    if condition.phase == "warmup":
        centre = 30 + 55 * condition.ticks_into_phase / (WARMUP_TICKS - 1)
        return centre - 3, centre + 3
    if condition.phase == "checkpoint":
        return 1.0, 4.0
    return {"normal": (85.0, 95.0), "straggler": (98.5, 100.0), "waiting": (55.0, 65.0)}[condition.role]


def _clamp_pct(value: float) -> float:
    return min(100.0, max(0.0, value))


def core_activity(
    topology: Topology, condition: ChipCondition, seed: int, host: int, chip: int, tick: int
) -> list[CoreActivity | None]:
    """Per logical core of the chip, its activity, or None when idle (absent from the report)."""
    span = _utilization_range_pct(condition)
    if span is None:
        return [None] * topology.cores_per_chip
    rng = _rng(seed, host, chip, tick, "util")
    peak_flops_per_s = topology.lnc * topology.bf16_flops_per_physical_core
    cores: list[CoreActivity | None] = []
    for _ in range(topology.cores_per_chip):
        target_pct = rng.uniform(*span)
        if topology.lnc == 2:
            physical = tuple(round(_clamp_pct(target_pct + rng.uniform(-1.0, 1.0)), 2) for _ in range(2))
            utilization_pct = round(math.fsum(physical) / 2, 2)
        else:
            physical = ()
            utilization_pct = round(_clamp_pct(target_pct), 2)
        flops = int(utilization_pct / 100 * peak_flops_per_s * _BUSY_FLOPS_FRACTION * rng.uniform(0.98, 1.02))
        cores.append(CoreActivity(utilization_pct, physical, flops))
    return cores


def _step_latency_s(condition: ChipCondition) -> float | None:
    if condition.phase == "warmup":
        # First steps run slower (cold caches, lazy allocations), converging on the steady time.
        return STEADY_STEP_LATENCY_S * (2.0 - condition.ticks_into_phase / WARMUP_TICKS)
    if condition.phase != "steady":
        return None
    if condition.role == "normal":
        return STEADY_STEP_LATENCY_S
    return STEADY_STEP_LATENCY_S * STRAGGLER_SLOWDOWN  # the straggler and everyone waiting on it


def executions(condition: ChipCondition, seed: int, host: int, chip: int, tick: int, period_s: float) -> Executions:
    """NEFF executions the chip's runtime completed during the tick."""
    step_s = _step_latency_s(condition)
    total: list[float] = []
    device: list[float] = []
    if step_s is not None:
        rng = _rng(seed, host, chip, tick, "exec")
        count = int(period_s / step_s + rng.random())  # expected value period_s / step_s
        for _ in range(count):
            total_s = step_s * (1 + rng.gauss(0, 0.02))
            total.append(round(total_s, 7))
            device.append(round(total_s - rng.uniform(0.0004, 0.0012), 7))  # host-side overhead
    uncorrected = condition.mem_ecc_uncorrected
    return Executions(tuple(total), tuple(device), completed_with_err=uncorrected, hardware_errors=uncorrected)


def runtime_vcpu_pct(condition: ChipCondition, seed: int, host: int, chip: int, tick: int) -> tuple[float, float]:
    """(user, system) percent of vCPU time used by the chip's runtime process."""
    rng = _rng(seed, host, chip, tick, "vcpu")
    user_span, system_span = {
        "compile": ((1.0, 3.0), (0.5, 1.5)),
        "warmup": ((5.0, 9.0), (1.5, 3.0)),
        "steady": ((5.0, 9.0), (1.5, 3.0)),
        "checkpoint": ((8.0, 15.0), (4.0, 8.0)),
        "stalled": ((0.1, 0.6), (0.05, 0.3)),
    }[condition.phase]
    return round(rng.uniform(*user_span), 2), round(rng.uniform(*system_span), 2)


def runtime_host_memory_bytes(condition: ChipCondition) -> dict[str, int]:
    """The runtime's host memory breakdown (`usage_breakdown.host`)."""
    return {
        "application_memory": 12 * GIB if condition.models_loaded else 3 * GIB,
        "constants": 0,
        "dma_buffers": 512 * MIB if condition.models_loaded else 64 * MIB,
        "tensors": 0,
    }
