"""What happens to each simulated chip at each tick: the training timeline and the injected faults.

Timeline shared by every scenario (ticks are reports; virtual time is tick * period_s):

| ticks                          | phase      | what the reports show                                       |
|--------------------------------|------------|-------------------------------------------------------------|
| 0-9                            | compile    | no core in `neuroncores_in_use`, host vCPUs busy (neuronx-cc),|
|                                |            | HBM = runtime_memory only, `loaded_models` empty            |
| 9                              | (load)     | NEFFs loaded: `loaded_models` appear (is_running false),    |
|                                |            | constants / model_code / scratchpad allocated               |
| 10-19                          | warmup     | utilisation ramps ~30% -> ~85%, tensors ramp to steady size |
| 20+                            | steady     | utilisation 85-95%, ~2 NEFF executions/s per runtime        |
| t >= 60 and t % 60 in {0,1,2}  | checkpoint | utilisation 1-4%, no executions, host io_wait up            |

Job model: one Neuron runtime process per chip, driving the job's ranks on its logical cores
(job.py: rank = (host * chips_per_host + chip) * cores_per_chip + core; the runtime's tag is
"llama3-pretrain-rank<rank of core 0>"), synchronous data parallel, so a slow or lost rank slows or stalls
every chip of the topology.

Fault site F = (host min(7, hosts - 1), chip min(2, chips_per_host - 1)): host 7 chip 2 on
trn3-gen2-us, host 3 chip 2 on trn3-gen1-us and trn2-us, host 0 chip 2 on trn2.48xlarge.
Chip indices are host-local device indices (`neuronN` on that host).

| scenario   | where          | from tick | ground truth                                                      |
|------------|----------------|-----------|-------------------------------------------------------------------|
| healthy    | -              | -         | the timeline above, nothing else                                  |
| straggler  | F              | 30        | F: utilisation 98.5-100%; every other chip 55-65% (waiting on F); |
|            |                |           | every runtime's execution latency x1.6. Checkpoints still dip.    |
| hang       | F is the hung  | 30        | every chip: no core in use (utilisation 0), no executions, latency|
|            | chip           |           | null, HBM unchanged. neuron-monitor alone cannot tell which chip  |
|            |                |           | hung: only job telemetry (heartbeats, no steps) localises it.     |
| hbm-leak   | F              | 20        | F's tensors grow by LEAK_BYTES_PER_TICK (64 MiB) per tick, split  |
|            |                |           | evenly over its logical cores, from tick 20 (first growth) until  |
|            |                |           | a core's categories fill its share of HBM; other chips constant.  |
| ecc        | F              | 40 / 50   | F's device: mem_ecc_corrected = 2, 1, 3, 2, 1, 3, ... per tick    |
|            |                |           | from tick 40 (ECC_CORRECTED_CYCLE; bursty, as real corrected      |
|            |                |           | events are, so the counts read as per-period from tick 41); at tick|
|            |                |           | 50 exactly mem_ecc_uncorrected = 1 and F's runtime reports        |
|            |                |           | error_summary.hardware = 1, execution_summary.completed_with_err =|
|            |                |           | 1. Counts are per period. Other devices: all ECC counts 0.        |
| host-loss  | host of F      | 45        | that host emits nothing from tick 45 (drop-in exits 1 after a     |
|            |                |           | message on stderr; `SimHost.alive(tick)` is False); every other   |
|            |                |           | chip: no core in use, no executions (the job waits on the lost    |
|            |                |           | rank).                                                            |
| hw-error   | F              | 40        | F's host's kernel log: one NEURON_HW_ERR=SRAM_UNCORRECTABLE_ERROR |
|            |                |           | line with nd-id = F's chip, nc-id = 0, action=TERMINATE_INSTANCE, |
|            |                |           | then the driver's npid_detach line for F's runtime (kernel_log.py);|
|            |                |           | F's rank dies (job.py); every chip: no core in use from tick 40.  |
| efa-link   | E: F of        | 30        | E's EFA device of chip F (`rdmap18s27` on trn3-gen2-us, efa.py)   |
|            | UltraServer 1  |           | has a bad link: each tick that carries collective traffic (warmup,|
|            |                |           | steady) its hw_counters add EFA_LINK_ERRORS_PER_TICK (retrans_pkts|
|            |                |           | 1500, retrans_timeout_events 40, unresponsive_remote_events 4,    |
|            |                |           | impaired_remote_conn_events 2: 1546 errors/s at 1 s); every other |
|            |                |           | port: no errors (host_sysfs.py). UltraServer 1's all-reduce       |
|            |                |           | between UltraServers is slow, and the job is synchronous: every   |
|            |                |           | chip of every UltraServer waits (utilisation 55-65%, execution    |
|            |                |           | latency x1.6, as the straggler's peers) and every rank's step     |
|            |                |           | takes 1.6 ticks (job.py); no chip and no rank stands out: only E's|
|            |                |           | EFA errors name the cause. Needs 2 or more UltraServers.          |

A fleet of several UltraServers (`trnwatch demo --ultraservers N`) runs one job over all of them;
every fault but efa-link's is in UltraServer 0 (`fault_ultraserver`), so UltraServer 0 is the fleet
of one UltraServer unchanged. Exact per-chip HBM bytes, utilisation and EFA counters per tick: see
`ground_truth.py`.
"""

from dataclasses import dataclass
from typing import Literal

from trnwatch.workloads.sim.topology import Topology

SCENARIOS: dict[str, str] = {
    "healthy": "compile, warmup, steady training with periodic checkpoint dips",
    "straggler": "one chip ~100% busy and slow from tick 30; its peers wait at ~60%",
    "hang": "every chip idle from tick 30; the fault-site chip is the hung rank",
    "hbm-leak": "one chip's tensors grow by 64 MiB per tick from tick 20",
    "ecc": "one chip: corrected mem ECC from tick 40, one uncorrected at tick 50",
    "host-loss": "the fault-site host stops reporting at tick 45; the job stalls",
    "hw-error": "an uncorrectable SRAM error on one chip at tick 40 (kernel log) kills its rank; the job stops",
    "efa-link": "from tick 30 one host of UltraServer 1 has a bad EFA link (retransmits, timeouts); every rank slows",
}

COMPILE_TICKS = 10
MODEL_LOAD_TICK = COMPILE_TICKS - 1  # NEFFs load as the last compile tick ends
WARMUP_TICKS = 10
CHECKPOINT_EVERY_TICKS = 60
CHECKPOINT_TICKS = 3

STRAGGLER_START_TICK = 30
HANG_START_TICK = 30
LEAK_START_TICK = 20
LEAK_BYTES_PER_TICK = 64 << 20  # per chip; divisible by 4 and 8 logical cores
ECC_START_TICK = 40
ECC_CORRECTED_CYCLE = (2, 1, 3)  # corrected events per tick from ECC_START_TICK, repeating


def ecc_corrected_at(tick: int) -> int:
    """Corrected mem ECC events the ecc scenario's fault site reports in `tick`."""
    return ECC_CORRECTED_CYCLE[(tick - ECC_START_TICK) % len(ECC_CORRECTED_CYCLE)] if tick >= ECC_START_TICK else 0


ECC_UNCORRECTED_TICK = 50
HOST_LOSS_TICK = 45
HW_ERROR_TICK = 40
EFA_LINK_TICK = 30
# The bad link's hw_counters, added each tick that carries collective traffic (efa.py).
EFA_LINK_ERRORS_PER_TICK = {
    "retrans_pkts": 1500,
    "retrans_timeout_events": 40,
    "unresponsive_remote_events": 4,
    "impaired_remote_conn_events": 2,
}
# Scenarios whose fault needs traffic between UltraServers, and the fewest UltraServers they need.
MIN_ULTRASERVERS = {"efa-link": 2}

Phase = Literal["compile", "warmup", "steady", "checkpoint", "stalled"]
Role = Literal["normal", "straggler", "waiting"]


@dataclass(frozen=True)
class ChipCondition:
    """The scenario's verdict for one chip at one tick; the numbers are drawn from it in chip.py."""

    phase: Phase
    ticks_into_phase: int
    models_loaded: bool
    role: Role
    leaked_bytes: int  # extra tensors bytes on the chip, before the HBM cap
    mem_ecc_corrected: int  # events in this tick
    mem_ecc_uncorrected: int


def check_scenario(name: str) -> str:
    """Return `name` if it is a known scenario, else raise ValueError listing the known ones."""
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
    return name


def fault_site(topology: Topology) -> tuple[int, int]:
    """(host, chip) where the scenario's fault is injected, in UltraServer `fault_ultraserver`."""
    return min(7, topology.hosts - 1), min(2, topology.chips_per_host - 1)


def fleet_ultraservers(topology: Topology, scenario: str, asked: int | None) -> int:
    """How many UltraServers the fleet has: `asked`, else as many as the scenario needs (1, or
    MIN_ULTRASERVERS); ValueError saying why when the scenario needs more than asked, or when
    several are asked of a topology that is one server, not an UltraServer."""
    needed = MIN_ULTRASERVERS.get(scenario, 1)
    count = needed if asked is None else asked
    if count < needed:
        raise ValueError(
            f"--scenario {scenario} needs --ultraservers {needed} or more: its bad link is in UltraServer "
            f"{fault_ultraserver(scenario)}, and EFA carries the traffic between UltraServers"
        )
    if count > 1 and not topology.is_ultraserver:
        raise ValueError(f"--topology {topology.name} is one server, not an UltraServer: --ultraservers must be 1")
    return count


def fault_ultraserver(scenario: str) -> int:
    """The UltraServer (0-based, of the fleet) the scenario's fault is in: 1 for efa-link (the
    link between UltraServers), else 0."""
    return 1 if scenario == "efa-link" else 0


def host_alive(topology: Topology, scenario: str, host: int, tick: int, ultraserver: int = 0) -> bool:
    """False once the host has gone silent (host-loss only)."""
    at_fault = ultraserver == fault_ultraserver(scenario) and host == fault_site(topology)[0]
    return not (scenario == "host-loss" and at_fault and tick >= HOST_LOSS_TICK)


def _timeline_phase(scenario: str, tick: int) -> tuple[Phase, int]:
    if tick < COMPILE_TICKS:
        return "compile", tick
    if tick < COMPILE_TICKS + WARMUP_TICKS:
        return "warmup", tick - COMPILE_TICKS
    if scenario == "hang" and tick >= HANG_START_TICK:
        return "stalled", tick - HANG_START_TICK
    if scenario == "host-loss" and tick >= HOST_LOSS_TICK:
        return "stalled", tick - HOST_LOSS_TICK
    if scenario == "hw-error" and tick >= HW_ERROR_TICK:
        return "stalled", tick - HW_ERROR_TICK
    if tick % CHECKPOINT_EVERY_TICKS < CHECKPOINT_TICKS:
        return "checkpoint", tick % CHECKPOINT_EVERY_TICKS
    return "steady", 0


def chip_condition(
    topology: Topology, scenario: str, host: int, chip: int, tick: int, ultraserver: int = 0
) -> ChipCondition:
    """What the scenario does to (host, chip) of UltraServer `ultraserver` at `tick`."""
    phase, ticks_into_phase = _timeline_phase(scenario, tick)
    at_fault = ultraserver == fault_ultraserver(scenario) and (host, chip) == fault_site(topology)

    role: Role = "normal"
    if scenario == "straggler" and tick >= STRAGGLER_START_TICK and phase == "steady":
        role = "straggler" if at_fault else "waiting"
    if scenario == "efa-link" and tick >= EFA_LINK_TICK and phase == "steady":
        role = "waiting"  # every chip waits on UltraServer 1's slow collective

    leaked_bytes = 0
    if scenario == "hbm-leak" and at_fault and tick >= LEAK_START_TICK:
        leaked_bytes = (tick - LEAK_START_TICK + 1) * LEAK_BYTES_PER_TICK

    ecc_on = scenario == "ecc" and at_fault
    return ChipCondition(
        phase=phase,
        ticks_into_phase=ticks_into_phase,
        models_loaded=tick >= MODEL_LOAD_TICK,
        role=role,
        leaked_bytes=leaked_bytes,
        mem_ecc_corrected=ecc_corrected_at(tick) if ecc_on else 0,
        mem_ecc_uncorrected=1 if ecc_on and tick == ECC_UNCORRECTED_TICK else 0,
    )
