"""Exact per-chip figures and per-host EFA counters the simulated reports and sysfs samples encode,
for tests and demos to check a reading against.

These call the same functions the report builder calls, so they equal what the JSON says at that
tick (with every metric group at the base period). A silent host (`host_alive` False) emits
nothing; these functions still answer for it, giving what it would have reported.
"""

import math

from trnwatch.collectors.sysfs_reader import EFA_COUNTERS
from trnwatch.workloads.sim.chip import MEMORY_CATEGORIES, core_activity, core_memory_bytes
from trnwatch.workloads.sim.fleet import SimHost
from trnwatch.workloads.sim.host_sysfs import efa_device, efa_devices, efa_increments
from trnwatch.workloads.sim.scenarios import chip_condition, fault_site, fault_ultraserver
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


def efa_counters(host: SimHost, tick: int) -> dict[str, dict[str, int]]:
    """Each EFA device's cumulative hw_counters (port 1) in the host's sysfs sample at `tick`: the
    sum of `efa_increments` over ticks 0 to `tick` (host_sysfs.py)."""
    totals = {name: dict.fromkeys(EFA_COUNTERS, 0) for name in efa_devices(host)}
    for t in range(tick + 1):
        for name, counts in efa_increments(host, t).items():
            for counter, count in counts.items():
                totals[name][counter] += count
    return totals


def efa_link_site(topology: Topology) -> tuple[int, int, int, str]:
    """efa-link's bad link: (UltraServer, host, chip, EFA device). From EFA_LINK_TICK, each tick that
    carries collective traffic adds EFA_LINK_ERRORS_PER_TICK to that device's counters: at a 1 s
    period 1500 retransmitted packets, 40 retransmit timeouts, 4 unresponsive-remote and 2
    impaired-remote events per second (1546 errors/s); every other port counts no error."""
    host, chip = fault_site(topology)
    return fault_ultraserver("efa-link"), host, chip, efa_device(chip)
