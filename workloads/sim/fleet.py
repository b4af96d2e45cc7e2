"""A simulated Trn3 (or Trn2) server that writes neuron-monitor reports.

One `SimHost` plays one host of a topology. `report(tick)` is a pure function of (topology,
host, seed, scenario, period, groups, tick): no wall clock, no global random state, no memory of
earlier calls, so any tick can be asked for in any order and gives the same bytes.

Job model: one Neuron runtime process per chip (see scenarios.py), pid = a per-host base + chip,
tag "llama3-pretrain-rank<rank>" with the job's rank on the chip's logical core 0 (rank 120 on
host 7 chip 2 of trn3-gen2-us; the chip's ranks report that pid). Core indices are global on the host
(chip * cores_per_chip + local core); device indices are host-local.

Schema (neuron-telemetry.md 1.3-1.8), where the real captures in shared/realworld decided:
- runtime entries carry pid, neuron_runtime_tag, error, report; no legacy `address` (absent from
  every real capture);
- `neuron_hardware_info` has no `neuron_device_version` (dropped from Neuron 2.20 on);
- key order follows the real captures; idle cores are absent from `neuroncores_in_use`;
- `loaded_models[].subgraphs.*.neuroncore_index` is the core index within its device, as in the
  trn1n capture;
- counts (`execution_stats`, `neuron_hw_counters`, `context_switch_count`) are per period, as
  documented (real captures look cumulative; the simulator follows the documentation).
One key is not neuron-monitor's: a top-level `trnwatch_simulator` object (topology, host, seed,
scenario), so that simulated reports piped into trnwatch can never pass as live. Consumers of
real reports ignore it.

A group whose configured period is k base periods is refreshed on ticks divisible by k and
repeated unchanged in between, like the real tool's "latest value of every group". Its counts
cover the k ticks up to the refresh; its gauges are sampled at the refresh tick.
"""

import hashlib
import json
import math
import random
from collections.abc import Callable, Iterable, Mapping

from trnwatch.workloads.sim import chip as chip_model
from trnwatch.workloads.sim import host as host_model
from trnwatch.workloads.sim.chip import MEMORY_CATEGORIES
from trnwatch.workloads.sim.monitor_config import ALL_GROUPS, RUNTIME_GROUPS, SYSTEM_GROUPS
from trnwatch.workloads.sim.scenarios import ChipCondition, check_scenario, chip_condition, host_alive
from trnwatch.workloads.sim.topology import Topology

RUNTIME_TAG_PREFIX = "llama3-pretrain-rank"
_PERCENTILES = (("p0", 0), ("p1", 1), ("p25", 25), ("p50", 50), ("p75", 75), ("p99", 99), ("p100", 100))
_FIRST_MODEL_ID = 10001
_SUBGRAPH_HOST_BYTES = 24576
_SUBGRAPH_RUNTIME_BYTES = 133956


class HostLostError(RuntimeError):
    """A report was asked of a host that has gone silent at that tick."""


def _percentiles_s(samples: list[float]) -> dict[str, float] | None:
    """Nearest-rank percentiles, or None when nothing ran (as the real tool writes null)."""
    if not samples:
        return None
    ordered = sorted(samples)
    n = len(ordered)
    return {key: ordered[max(0, math.ceil(p / 100 * n) - 1)] for key, p in _PERCENTILES}


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class SimHost:
    """One host of a simulated fleet, emitting neuron-monitor reports for virtual ticks."""

    def __init__(
        self,
        topology: Topology,
        host_index: int,
        seed: int,
        scenario: str,
        period_s: float = 1.0,
        groups: Iterable[str] | None = None,
        group_periods_s: Mapping[str, float] | None = None,
        ultraserver: int = 0,
        ultraservers: int = 1,
    ) -> None:
        """`groups`: enabled metric groups (None = all); `group_periods_s`: per-group periods
        (missing = `period_s`), rounded to whole multiples of `period_s`; `ultraserver`: which of
        the fleet's `ultraservers` UltraServers the host is in (`host_index` is its place there)."""
        if not 0 <= ultraserver < ultraservers:
            raise ValueError(f"UltraServer {ultraserver} is outside a fleet of {ultraservers}")
        if not 0 <= host_index < topology.hosts:
            raise ValueError(f"host {host_index} is outside {topology.name} (hosts 0-{topology.hosts - 1})")
        if period_s <= 0:
            raise ValueError("period_s must be positive")
        enabled = set(ALL_GROUPS if groups is None else groups)
        if unknown := enabled - set(ALL_GROUPS):
            raise ValueError(f"unknown metric groups: {', '.join(sorted(unknown))}")
        self.topology = topology
        self.host_index = host_index
        self.seed = seed
        self.scenario = check_scenario(scenario)
        self.period_s = period_s
        self.ultraserver = ultraserver
        self.ultraservers = ultraservers
        periods_s = group_periods_s or {}
        self._ticks_per_refresh = {
            group: max(1, round(periods_s.get(group, period_s) / period_s)) for group in ALL_GROUPS if group in enabled
        }
        self._runtime_builders: dict[str, Callable[[int, range], dict]] = {
            "execution_stats": self._execution_stats,
            "memory_used": self._memory_used,
            "neuron_runtime_vcpu_usage": self._runtime_vcpu_usage,
            "neuroncore_counters": self._neuroncore_counters,
        }
        self._system_builders: dict[str, Callable[[range], dict]] = {
            "memory_info": self._memory_info,
            "neuron_hw_counters": self._neuron_hw_counters,
            "vcpu_usage": self._vcpu_usage,
        }
        self._base_pid = random.Random(f"{seed}/{host_index}/pid").randrange(20_000, 400_000)
        neff_digest = _digest(f"neff/{seed}")
        self._neff_name = f"model.MODULE_{int(neff_digest[:15], 16)}+{neff_digest[15:23]}.neff"
        self._neff_uuid = _digest(f"neff-uuid/{seed}")[:32]
        self._instance_info = self._build_instance_info()
        self._hardware_info = {
            "neuron_device_type": topology.device_type,
            "neuroncore_version": topology.neuroncore_version,
            "neuron_device_count": topology.chips_per_host,
            "neuron_device_memory_size": topology.hbm_bytes_per_chip,
            "neuroncore_per_device_count": topology.cores_per_chip,
            "logical_neuroncore_config": topology.lnc,
            "error": "",
        }

    @property
    def instance_name(self) -> str:
        """The host's name as its reports give it (the simulated job's ranks use it as hostname)."""
        return self._instance_info["instance_name"]

    @property
    def instance_id(self) -> str:
        return self._instance_info["instance_id"]

    def runtime_pid(self, chip: int) -> int:
        """Pid of the Neuron runtime process driving `chip` (the pid its job ranks report)."""
        return self._base_pid + chip

    @property
    def fleet_host_index(self) -> int:
        """The host's place in the whole fleet: UltraServer by UltraServer, then its index there."""
        return self.ultraserver * self.topology.hosts + self.host_index

    def first_job_rank(self, chip: int) -> int:
        """The job's rank on logical core 0 of `chip` (job.py's `job_rank`): the chip's runtime is
        tagged with it, so a fault's rank is found in the process list under its own number."""
        return chip_model.rank(self.topology, self.fleet_host_index, chip) * self.topology.cores_per_chip

    def lost_message(self, tick: int) -> str:
        """What the drop-in says on stderr when its host goes silent."""
        return (
            f"trnwatch sim: host {self.host_index} lost at tick {tick} (scenario {self.scenario}); no further reports"
        )

    def alive(self, tick: int) -> bool:
        """False from the tick this host goes silent on (host-loss scenario)."""
        return host_alive(self.topology, self.scenario, self.host_index, tick, self.ultraserver)

    def report(self, tick: int) -> dict:
        """The neuron-monitor report for `tick` (virtual time tick * period_s); raises HostLostError."""
        if not self.alive(tick):
            raise HostLostError(f"host {self.host_index} is silent at tick {tick} (scenario {self.scenario})")
        runtime_groups = [g for g in RUNTIME_GROUPS if g in self._ticks_per_refresh]
        chips = range(self.topology.chips_per_host) if runtime_groups else range(0)
        runtimes = [self._runtime_entry(chip, tick, runtime_groups) for chip in chips]
        system_groups = [g for g in SYSTEM_GROUPS if g in self._ticks_per_refresh]
        system = {g: self._system_builders[g](self._window(g, tick)) for g in system_groups}
        return {
            "neuron_runtime_data": runtimes,
            "system_data": system or None,
            "instance_info": dict(self._instance_info),
            "neuron_hardware_info": dict(self._hardware_info),
            "trnwatch_simulator": {
                "topology": self.topology.name,
                "host": self.host_index,
                "seed": self.seed,
                "scenario": self.scenario,
            },
        }

    def report_line(self, tick: int) -> str:
        """`report(tick)` as one compact JSON line, without the trailing newline."""
        return json.dumps(self.report(tick), separators=(",", ":"))

    # --- helpers -------------------------------------------------------------------------------

    def _window(self, group: str, tick: int) -> range:
        """Ticks the group's current value covers; its last tick is the refresh tick."""
        k = self._ticks_per_refresh[group]
        refresh = tick - tick % k
        return range(max(0, refresh - k + 1), refresh + 1)

    def _measured_period_s(self, group: str, window: range, chip: int = -1) -> float:
        # The real tool reports the interval it actually measured: a little off the configured one.
        rng = random.Random(f"{self.seed}/{self.host_index}/{chip}/{window[-1]}/{group}/period")
        return round(len(window) * self.period_s * (1 + rng.uniform(-1e-3, 5e-4)), 9)

    def _condition(self, chip: int, tick: int) -> ChipCondition:
        return chip_condition(self.topology, self.scenario, self.host_index, chip, tick, self.ultraserver)

    def _build_instance_info(self) -> dict:
        topology = self.topology
        # UltraServer 0 keeps the names and ids of a fleet of one; the others add their number.
        us = f"/us{self.ultraserver}" if self.ultraserver else ""
        host_digest = _digest(f"{topology.name}/{self.seed}{us}/{self.host_index}")
        fleet_digest = _digest(f"{topology.name}/{self.seed}")
        us_digest = _digest(f"{topology.name}/{self.seed}{us}")
        name = f"sim-{topology.name}-{self.ultraserver}" if self.ultraserver else f"sim-{topology.name}"
        info = {
            "instance_name": f"{name}-{self.host_index:02d}",
            "instance_id": "i-0sim" + host_digest[:13],
            "instance_type": topology.instance_type,
            "instance_availability_zone": "us-east-2b",
            "instance_availability_zone_id": "use2-az2",
            "instance_region": "us-east-2",
            "ami_id": "ami-0sim" + fleet_digest[:13],
            "subnet_id": "subnet-0sim" + fleet_digest[13:21],
        }
        if topology.is_ultraserver:
            info["ultraserver_id"] = "us-0sim" + us_digest[21:34]  # an assumption, see topology.py
        info["error"] = ""
        return info

    # --- runtime-level groups ------------------------------------------------------------------

    def _runtime_entry(self, chip: int, tick: int, groups: list[str]) -> dict:
        return {
            "pid": self.runtime_pid(chip),
            "neuron_runtime_tag": f"{RUNTIME_TAG_PREFIX}{self.first_job_rank(chip)}",
            "error": "",
            "report": {g: self._runtime_builders[g](chip, self._window(g, tick)) for g in groups},
        }

    def _execution_stats(self, chip: int, window: range) -> dict:
        total_s: list[float] = []
        device_s: list[float] = []
        completed_with_err = hardware_errors = 0
        for tick in window:
            done = chip_model.executions(
                self._condition(chip, tick), self.seed, self.host_index, chip, tick, self.period_s
            )
            total_s += done.total_latency_s
            device_s += done.device_latency_s
            completed_with_err += done.completed_with_err
            hardware_errors += done.hardware_errors
        return {
            "period": self._measured_period_s("execution_stats", window, chip),
            "error_summary": {
                "generic": 0,
                "numerical": 0,
                "transient": 0,
                "model": 0,
                "runtime": 0,
                "hardware": hardware_errors,
            },
            "execution_summary": {
                "completed": len(total_s),
                "completed_with_err": completed_with_err,
                "completed_with_num_err": 0,
                "timed_out": 0,
                "incorrect_input": 0,
                "failed_to_queue": 0,
            },
            "latency_stats": {"total_latency": _percentiles_s(total_s), "device_latency": _percentiles_s(device_s)},
            "error": "",
        }

    def _memory_used(self, chip: int, window: range) -> dict:
        condition = self._condition(chip, window[-1])
        cores = chip_model.core_memory_bytes(self.topology, condition, self.seed, self.host_index, chip)
        first_core = chip * self.topology.cores_per_chip
        host_bytes = chip_model.runtime_host_memory_bytes(condition)
        return {
            "period": self._measured_period_s("memory_used", window, chip),
            "neuron_runtime_used_bytes": {
                "host": sum(host_bytes.values()),
                "neuron_device": sum(core[name] for core in cores for name in MEMORY_CATEGORIES),
                "usage_breakdown": {
                    "host": host_bytes,
                    "neuroncore_memory_usage": {str(first_core + i): core for i, core in enumerate(cores)},
                },
            },
            "loaded_models": self._loaded_models(chip, condition, cores) if condition.models_loaded else [],
            "error": "",
        }

    def _loaded_models(self, chip: int, condition: ChipCondition, cores: list[dict[str, int]]) -> list[dict]:
        # Every rank runs the same SPMD NEFF, loaded once per logical core. During a hang the
        # stuck execution is still running; between steps (checkpoint, just loaded) nothing is.
        running = condition.phase in ("warmup", "steady", "stalled")
        models = []
        for local_core, core in enumerate(cores):
            device = {
                "constants": core["constants"],
                "model_code": core["model_code"],
                "runtime_memory": _SUBGRAPH_RUNTIME_BYTES,
                "tensors": 0,
            }
            models.append(
                {
                    "name": self._neff_name,
                    "uuid": self._neff_uuid,
                    "model_id": _FIRST_MODEL_ID + local_core,
                    "is_running": running,
                    "subgraphs": {
                        "sg_00": {
                            "memory_used_bytes": {
                                "host": _SUBGRAPH_HOST_BYTES,
                                "neuron_device": sum(device.values()),
                                "usage_breakdown": {
                                    "host": {
                                        "application_memory": _SUBGRAPH_HOST_BYTES,
                                        "constants": 0,
                                        "dma_buffers": 0,
                                        "tensors": 0,
                                    },
                                    "neuron_device": device,
                                },
                            },
                            "neuroncore_index": local_core,
                            "neuron_device_index": chip,
                        }
                    },
                }
            )
        return models

    def _runtime_vcpu_usage(self, chip: int, window: range) -> dict:
        tick = window[-1]
        condition = self._condition(chip, tick)
        user_pct, system_pct = chip_model.runtime_vcpu_pct(condition, self.seed, self.host_index, chip, tick)
        return {
            "period": self._measured_period_s("neuron_runtime_vcpu_usage", window, chip),
            "vcpu_usage": {"user": user_pct, "system": system_pct},
            "error": "",
        }

    def _neuroncore_counters(self, chip: int, window: range) -> dict:
        tick = window[-1]
        topology = self.topology
        condition = self._condition(chip, tick)
        activity = chip_model.core_activity(topology, condition, self.seed, self.host_index, chip, tick)
        in_use: dict[str, dict] = {}
        for local_core, core in enumerate(activity):
            if core is None:
                continue
            index = chip * topology.cores_per_chip + local_core
            entry: dict = {"neuroncore_utilization": core.utilization_pct, "flops": core.flops_per_s}
            if core.physical_utilization_pct:
                # Logical core k is physical cores lnc*k .. lnc*k + lnc - 1 (global on the host).
                entry[topology.neuroncore_version] = {
                    f"nc_{topology.core_family}.{index * topology.lnc + j}": {"neuroncore_utilization": pct}
                    for j, pct in enumerate(core.physical_utilization_pct)
                }
            in_use[str(index)] = entry
        return {
            "period": self._measured_period_s("neuroncore_counters", window, chip),
            "neuroncores_in_use": in_use,
            "error": "",
        }

    # --- system-level groups -------------------------------------------------------------------

    def _memory_info(self, window: range) -> dict:
        tick = window[-1]
        conditions = [self._condition(chip, tick) for chip in range(self.topology.chips_per_host)]
        runtimes_bytes = sum(sum(chip_model.runtime_host_memory_bytes(c).values()) for c in conditions)
        used_bytes = host_model.memory_used_bytes(
            self.topology, conditions[0].phase, runtimes_bytes, self.seed, self.host_index, tick
        )
        return {
            "period": self._measured_period_s("memory_info", window),
            "memory_total_bytes": host_model.memory_total_bytes(self.topology),
            "memory_used_bytes": used_bytes,
            "swap_total_bytes": 0,
            "swap_used_bytes": 0,
            "error": "",
        }

    def _neuron_hw_counters(self, window: range) -> dict:
        devices = []
        for chip in range(self.topology.chips_per_host):
            conditions = [self._condition(chip, tick) for tick in window]
            devices.append(
                {
                    "neuron_device_index": chip,
                    "mem_ecc_corrected": sum(c.mem_ecc_corrected for c in conditions),
                    "mem_ecc_uncorrected": sum(c.mem_ecc_uncorrected for c in conditions),
                    "sram_ecc_uncorrected": 0,
                    "sram_ecc_corrected": 0,
                }
            )
        return {"period": self._measured_period_s("neuron_hw_counters", window), "neuron_devices": devices, "error": ""}

    def _vcpu_usage(self, window: range) -> dict:
        tick = window[-1]
        average, usage_data, switches = host_model.vcpu_usage(
            self.topology,
            self._condition(0, tick).phase,
            self.seed,
            self.host_index,
            tick,
            len(window) * self.period_s,
        )
        return {
            "period": self._measured_period_s("vcpu_usage", window),
            "average_usage": average,
            "usage_data": usage_data,
            "context_switch_count": switches,
            "error": "",
        }


def fleet_hosts(
    topology: Topology,
    seed: int,
    scenario: str,
    period_s: float = 1.0,
    groups: Iterable[str] | None = None,
    group_periods_s: Mapping[str, float] | None = None,
    ultraservers: int = 1,
) -> list[SimHost]:
    """Every host of `ultraservers` copies of the topology (one job over all of them), for
    in-process use (the demo) and the exporter: one SimHost per host, UltraServer by UltraServer."""
    groups = None if groups is None else tuple(groups)
    return [
        SimHost(topology, h, seed, scenario, period_s, groups, group_periods_s, k, ultraservers)
        for k in range(ultraservers)
        for h in range(topology.hosts)
    ]
