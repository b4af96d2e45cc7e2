"""Exact per-chip figures the simulated reports encode, for tests and demos to check a reading against.

These call the same functions the report builder calls, so they equal what the JSON says at that
tick (with every metric group at the base period). A silent host (`host_alive` False) emits
nothing; these functions still answer for it, giving what it would have reported.
"""

import math

from trnwatch.workloads.sim.chip import MEMORY_CATEGORIES, core_activity, core_memory_bytes
from trnwatch.workloads.sim.scenarios import chip_condition
from trnwatch.workloads.sim.topology import Topology


def chip_hbm_bytes(topology: Topology, scenario: str, seed: int, host: int, chip: int, tick: int) -> int:
    """HBM bytes on (host, chip): the sum over its logical cores of the 5 per-core memory categories."""
    condition = chip_condition(topology, scenario, host, chip, tick)
    cores = core_memory_bytes(topology, condition, seed, host, chip)
    return sum(core[name] for core in cores for name in MEMORY_CATEGORIES)


def chip_utilization_pct(topology: Topology, scenario: str, seed: int, host: int, chip: int, tick: int) -> float:
    """Mean `neuroncore_utilization` over the chip's logical cores, an absent (idle) core counting 0.

    Uses math.fsum, so any reader that sums the emitted values with math.fsum and divides by the
    core count gets exactly this float.
    """
    condition = chip_condition(topology, scenario, host, chip, tick)
    cores = core_activity(topology, condition, seed, host, chip, tick)
    return math.fsum(core.utilization_pct if core else 0.0 for core in cores) / topology.cores_per_chip
