"""A simulated host's sysfs, tick by tick: the sample collectors/sysfs_reader.py would write if it
read the host's tree (sysfs_tree.py lays the same nodes out on disk; a test reads such a tree with
the real sampler and gets these very bytes).

What each node says (ground truth: the exact values of a tick are `power_utilization` here and
`ground_truth.py` `efa_counters`):

- `power/utilization` per device: the driver's figure is per minute, so the sample carries the
  last whole minute (POWER_MINUTE_TICKS ticks): `POWER_STATUS_VALID,<epoch of the minute's end>,
  <min>,<max>,<avg>` over that minute's per-tick power (`device_power_pct`: by the chip's phase,
  compile ~20%, steady ~75%, waiting on a peer ~55%, stalled ~18%); during the first minute
  `POWER_STATUS_NO_DATA` with zeros.
- `unhealthy_components` per device: empty (no scenario makes a device unhealthy; what the driver
  writes there is not published).
- EFA `hw_counters` (every counter the sampler reads, as newer kernels have them), one EFA device
  per chip (`efa_devices`, an assumption: topology.py), port 1, cumulative from 0 at tick 0. Each
  tick adds (`efa_increments`): EFA_IDLE_BYTES_PER_TICK tx and rx (the fabric's own traffic, also
  while compiling, checkpointing or stalled); while the job trains (warmup, steady) and the fleet
  has more than one UltraServer, the host's share of the all-reduce between UltraServers, 2 (N - 1)
  / N x GRADIENT_BYTES / hosts per UltraServer per step (a ring over the N UltraServers of each
  host's shard), split over its devices (x0.98-1.02 each), divided by 1.6 while steps take 1.6
  ticks; error counters stay 0 but efa-link's bad port's, which adds EFA_LINK_ERRORS_PER_TICK each
  training tick from EFA_LINK_TICK (scenarios.py).
- `instance_id` (the DMI board asset tag): the host's instance id, which joins the sample to its
  neuron-monitor reports. No UltraServer class nodes: the reports' `ultraserver_id` places hosts.
"""

import json
import random

from trnwatch.collectors.sysfs_reader import EFA_COUNTERS, SCHEMA
from trnwatch.workloads.sim.chip import STRAGGLER_SLOWDOWN
from trnwatch.workloads.sim.fleet import SimHost
from trnwatch.workloads.sim.job import GRADIENT_BYTES
from trnwatch.workloads.sim.scenarios import (
    EFA_LINK_ERRORS_PER_TICK,
    EFA_LINK_TICK,
    ChipCondition,
    chip_condition,
    fault_site,
    fault_ultraserver,
)

POWER_MINUTE_TICKS = 60
EFA_IDLE_BYTES_PER_TICK = 64 << 10
EFA_PORT = 1
# Per-tick power by phase (and role while steady): the centre of a +-2 point draw, in percent.
_POWER_PCT = {"compile": 20.0, "checkpoint": 25.0, "stalled": 18.0}
_STEADY_POWER_PCT = {"normal": 75.0, "waiting": 55.0, "straggler": 86.0}


def efa_device(chip: int) -> str:
    """The name of the EFA device beside `chip` (`rdmap<16 + chip>s27`, an assumption: topology.py)."""
    return f"rdmap{16 + chip}s27"


def efa_devices(host: SimHost) -> list[str]:
    """The host's EFA device names, one per chip."""
    return [efa_device(chip) for chip in range(host.topology.chips_per_host)]


def _condition(host: SimHost, chip: int, tick: int) -> ChipCondition:
    return chip_condition(host.topology, host.scenario, host.host_index, chip, tick, host.ultraserver)


def device_power_pct(host: SimHost, chip: int, tick: int) -> float:
    """The chip's power during `tick`, as a share of its maximum (two decimals)."""
    condition = _condition(host, chip, tick)
    if condition.phase == "warmup":
        centre = 40.0 + 35.0 * condition.ticks_into_phase / 9
    elif condition.phase == "steady":
        centre = _STEADY_POWER_PCT[condition.role]
    else:
        centre = _POWER_PCT[condition.phase]
    rng = random.Random(f"{host.seed}/{host.fleet_host_index}/{chip}/{tick}/power")
    return round(centre + rng.uniform(-2.0, 2.0), 2)


def power_utilization(host: SimHost, chip: int, tick: int, epoch_s: float) -> str:
    """The `power/utilization` node at `tick` (wall time `epoch_s`): the last whole minute's."""
    minute_end = tick - tick % POWER_MINUTE_TICKS
    at_s = int(epoch_s - (tick - minute_end) * host.period_s)
    if minute_end == 0:
        return f"POWER_STATUS_NO_DATA,{at_s},0.00,0.00,0.00"
    pcts = [device_power_pct(host, chip, t) for t in range(minute_end - POWER_MINUTE_TICKS, minute_end)]
    return f"POWER_STATUS_VALID,{at_s},{min(pcts):.2f},{max(pcts):.2f},{sum(pcts) / len(pcts):.2f}"


def bad_link_device(host: SimHost) -> int | None:
    """The chip whose EFA device has efa-link's bad link on this host, if any."""
    fault_host, fault_chip = fault_site(host.topology)
    on_site = host.ultraserver == fault_ultraserver(host.scenario) and host.host_index == fault_host
    return fault_chip if host.scenario == "efa-link" and on_site else None


def efa_increments(host: SimHost, tick: int) -> dict[str, dict[str, int]]:
    """What each EFA device's counters add during `tick` (see the module docstring)."""
    condition = _condition(host, 0, tick)
    training = condition.phase in ("warmup", "steady")
    n = host.ultraservers
    step_bytes = 2 * (n - 1) * GRADIENT_BYTES // n // host.topology.hosts if training else 0
    if condition.role != "normal":
        step_bytes = int(step_bytes / STRAGGLER_SLOWDOWN)
    devices = efa_devices(host)
    bad = bad_link_device(host)
    rng = random.Random(f"{host.seed}/{host.fleet_host_index}/{tick}/efa")
    out: dict[str, dict[str, int]] = {}
    for chip, name in enumerate(devices):
        tx = EFA_IDLE_BYTES_PER_TICK + int(step_bytes / len(devices) * rng.uniform(0.98, 1.02))
        rx = EFA_IDLE_BYTES_PER_TICK + int(step_bytes / len(devices) * rng.uniform(0.98, 1.02))
        counts = dict.fromkeys(EFA_COUNTERS, 0)
        counts["tx_bytes"], counts["rx_bytes"] = tx, rx
        if chip == bad and training and tick >= EFA_LINK_TICK:
            for counter, count in EFA_LINK_ERRORS_PER_TICK.items():
                counts[counter] += count
        out[name] = counts
    return out


def sample_line(
    host: SimHost, tick: int, epoch_s: float, efa_counters: dict[str, dict[str, int]], power: dict[int, str]
) -> str:
    """The sampler's JSON line for the host at `tick`, given its cumulative EFA counters and each
    device's power node (collectors/sysfs_reader.py `sample_sysfs` writes the same keys)."""
    sample = {
        "v": SCHEMA,
        "devices": {str(chip): {"unhealthy_components": "", "utilization": text} for chip, text in power.items()},
        "efa": {f"{name}:{EFA_PORT}": dict(counts) for name, counts in efa_counters.items()},
        "instance_id": host.instance_id,
    }
    return json.dumps(sample, separators=(",", ":"), sort_keys=True)


class SimSysfs:
    """One simulated host's sysfs samples, asked tick after tick (counters accumulate)."""

    def __init__(self, host: SimHost):
        self.host = host
        self.counters = {name: dict.fromkeys(EFA_COUNTERS, 0) for name in efa_devices(host)}
        self._power: tuple[int, dict[int, str]] | None = None  # (minute's end tick, nodes)
        self._next_tick = 0

    def line(self, tick: int, epoch_s: float) -> str:
        """The sample at `tick`: the counters through the end of `tick`; ticks must not go back."""
        if tick < self._next_tick:
            raise ValueError(f"tick {tick} is before {self._next_tick}: counters only go forward")
        for t in range(self._next_tick, tick + 1):
            for name, counts in efa_increments(self.host, t).items():
                mine = self.counters[name]
                for counter, count in counts.items():
                    mine[counter] += count
        self._next_tick = tick + 1
        minute_end = tick - tick % POWER_MINUTE_TICKS
        if self._power is None or self._power[0] != minute_end:
            chips = range(self.host.topology.chips_per_host)
            self._power = minute_end, {c: power_utilization(self.host, c, tick, epoch_s) for c in chips}
        return sample_line(self.host, tick, epoch_s, self.counters, self._power[1])
