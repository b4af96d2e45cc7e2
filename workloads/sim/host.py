"""Host-level numbers for one simulated server at one tick: vCPU load and system memory."""

import math
import random

from trnwatch.workloads.sim.chip import PAGE_BYTES
from trnwatch.workloads.sim.scenarios import Phase
from trnwatch.workloads.sim.topology import GIB, Topology

VCPU_FIELDS = ("user", "nice", "system", "idle", "io_wait", "irq", "soft_irq")
_OS_BASE_BYTES = 6 * GIB

# Per phase: (user, system, io_wait) percent spans for a busy vCPU, then for a quiet one.
_VCPU_SPANS_PCT = {
    "compile": (((80, 95), (1, 3), (0, 0.5)), ((0, 5), (0, 2), (0, 0.5))),
    "warmup": (((35, 70), (3, 8), (0, 0.5)), ((0, 3), (0, 1.5), (0, 0.2))),
    "steady": (((35, 70), (3, 8), (0, 0.5)), ((0, 3), (0, 1.5), (0, 0.2))),
    "checkpoint": (((20, 40), (8, 15), (15, 35)), ((0, 3), (0, 1.5), (0, 5))),
    "stalled": (((0, 1.5), (0, 0.8), (0, 0.2)), ((0, 1.5), (0, 0.8), (0, 0.2))),
}
_CONTEXT_SWITCHES_PER_VCPU_S = {"compile": 900, "warmup": 350, "steady": 350, "checkpoint": 600, "stalled": 40}
# Extra host memory per chip: neuronx-cc workers while compiling, serialisation buffers while
# checkpointing.
_PHASE_EXTRA_BYTES_PER_CHIP = {"compile": 2 * GIB, "checkpoint": 4 * GIB}


def _is_busy(topology: Topology, phase: Phase, vcpu: int, rng: random.Random) -> bool:
    if phase == "compile":
        return rng.random() < 0.8  # neuronx-cc fans out over most vCPUs
    return vcpu < 2 * topology.chips_per_host  # a data-loader and a runtime thread per rank


def vcpu_usage(
    topology: Topology, phase: Phase, seed: int, host: int, tick: int, period_s: float
) -> tuple[dict[str, float], dict[str, dict[str, float]], int]:
    """(average_usage, usage_data per vCPU, context_switch_count) for the host; percentages rounded."""
    rng = random.Random(f"{seed}/{host}/{tick}/host-vcpu")
    busy_spans, quiet_spans = _VCPU_SPANS_PCT[phase]
    usage_data: dict[str, dict[str, float]] = {}
    for vcpu in range(topology.host_vcpus):
        spans = busy_spans if _is_busy(topology, phase, vcpu, rng) else quiet_spans
        user, system, io_wait = (round(rng.uniform(*span), 2) for span in spans)
        soft_irq = round(rng.uniform(0, 0.3), 2)
        idle = round(100 - (user + system + io_wait + soft_irq), 2)
        usage_data[str(vcpu)] = {
            "user": user,
            "nice": 0.0,
            "system": system,
            "idle": idle,
            "io_wait": io_wait,
            "irq": 0.0,
            "soft_irq": soft_irq,
        }
    average = {
        field: round(math.fsum(cpu[field] for cpu in usage_data.values()) / topology.host_vcpus, 2)
        for field in VCPU_FIELDS
    }
    switches = int(topology.host_vcpus * _CONTEXT_SWITCHES_PER_VCPU_S[phase] * period_s * rng.uniform(0.9, 1.1))
    return average, usage_data, switches


def memory_total_bytes(topology: Topology) -> int:
    """What the kernel reports as total: ~3% of the nominal memory is reserved, as in real captures."""
    return topology.host_memory_bytes * 97 // 100 // PAGE_BYTES * PAGE_BYTES


def memory_used_bytes(
    topology: Topology, phase: Phase, runtimes_host_bytes: int, seed: int, host: int, tick: int
) -> int:
    """Host memory in use: OS, the runtimes' own host memory, and what the phase adds."""
    rng = random.Random(f"{seed}/{host}/{tick}/host-mem")
    extra_bytes = _PHASE_EXTRA_BYTES_PER_CHIP.get(phase, 0) * topology.chips_per_host
    noise_bytes = rng.randrange(0, 256 << 20) // PAGE_BYTES * PAGE_BYTES
    return _OS_BASE_BYTES + runtimes_host_bytes + extra_bytes + noise_bytes
