"""The simulated fleet's job side: `trnwatch.job/1` rank files that tell the same story as the
simulated neuron-monitor reports, for the demo's job view and stall diagnosis.

One rank per logical NeuronCore, as a real job runs one process per logical core (576 ranks on
`trn3-gen2-us` at LNC=2: 36 hosts x 4 chips x 4 logical cores): rank = chip's global index x
cores_per_chip + core within the chip, so chip c of host h holds ranks (h x chips_per_host + c) x
cores_per_chip ... + cores_per_chip - 1, and `core` in run_start is the host-global logical core.
TP spans a host's cores, DP the hosts. The fault-site rank is logical core 0 of the fault-site
chip (scenarios.fault_site): `fault_rank(topology)`, rank 120 on trn3-gen2-us (host 7, chip 2,
core 8), rank 200 on trn3-gen1-us at LNC=2 (host 3, chip 2). The device side simulates one
Neuron runtime per chip; the ranks of a chip report that runtime's pid. One step per tick,
events timed with the wall clock the caller passes. The ground truth per scenario:

| scenario  | job telemetry                                                                     |
|-----------|-----------------------------------------------------------------------------------|
| healthy   | compile (ticks 0-9), warmup (10-19), steady steps; checkpoint save at ticks 60-62 |
|           | (every 60); heartbeats every 2 ticks                                              |
| straggler | from tick 30 every rank's step takes 1.6 ticks (STRAGGLER_SLOWDOWN, as the device |
|           | side's latency): the fault-site rank computes ~95% of it and waits ~1%; its peers |
|           | compute ~50% (as long as a healthy step's compute) and wait ~45%: the rank that   |
|           | waits least is the straggler, and the job's tokens/s falls to 1/1.6               |
| hang      | no step from tick 30; heartbeats go on: every rank sits in collective:all_reduce  |
|           | at the last step, the fault-site rank in `dataloader`: it is the suspect (LATE    |
|           | 5 s after the last step, STALLED after 30 s)                                      |
| host-loss | the fault-site host's ranks (16 at LNC=2) send nothing from tick 45 (dead); the   |
|           | others wait in collective:all_reduce                                              |
| hw-error  | at tick 40 the fault-site rank writes an `error` event (source runtime, the       |
|           | runtime's documented SRAM message) and nothing after (its process died); the      |
|           | others wait in collective:all_reduce                                              |
| efa-link  | from tick 30 every rank's step takes 1.6 ticks, as in straggler, but every rank   |
|           | computes ~50% of it and waits ~45% (no rank waits least: no straggler); the ranks |
|           | of UltraServer 1, behind the bad EFA link, also spend EFA_SLOW_TRANSFER_TICKS     |
|           | more in each all_reduce's transfer (their collective latency is longer)           |
| hbm-leak, | like healthy: those faults show in the device telemetry only (the job keeps       |
| ecc       | stepping through a corrected or a single uncorrected ECC event)                   |

With several UltraServers (`SimHost.ultraservers`) the job spans all of them: ranks are numbered
over the fleet's hosts UltraServer by UltraServer (`SimHost.fleet_host_index`), DP over every host.
"""

import functools
import json
import math
import random
from fractions import Fraction
from pathlib import Path

from trnwatch.workloads.sim import chip as chip_model
from trnwatch.workloads.sim.fleet import SimHost
from trnwatch.workloads.sim.scenarios import (
    CHECKPOINT_EVERY_TICKS,
    CHECKPOINT_TICKS,
    COMPILE_TICKS,
    EFA_LINK_TICK,
    HANG_START_TICK,
    HOST_LOSS_TICK,
    HW_ERROR_TICK,
    STRAGGLER_START_TICK,
    WARMUP_TICKS,
    fault_site,
    fault_ultraserver,
)
from trnwatch.workloads.sim.topology import Topology

# Ticks per step while the straggler holds every rank back (exact, so step ends fall on ticks).
SLOW_STEP_TICKS = Fraction(str(chip_model.STRAGGLER_SLOWDOWN))
SCHEMA = "trnwatch.job/1"
HEARTBEAT_EVERY_TICKS = 2
SEQ_LEN = 4096
GLOBAL_BATCH = 1024
MICRO_BATCH = 1
GRADIENT_BYTES = 16 << 30  # bf16 gradients of an ~8B-parameter model
MODEL = {"name": "llama3-8b (simulated)", "params": 8_030_261_248}
# Named like the packages a real job reports (neuron_backend.py), valued "simulated": never a real version.
# The runtime's stdout line for an SRAM uncorrectable error (aws-neuron-sdk nrt-troubleshoot.rst,
# "Hardware Errors"), with the fault site's device and core in its [ND n][NC m].
SRAM_ERROR_MESSAGE = (
    "(FATAL-RT-UNDEFINED-STATE) [ND {device}][NC {core}] Uncorrectable memory error is detected, metadata: 0x16. "
    "Please terminate or stop/start this instance to prevent future impact from the hardware error."
)
# The extra transfer time of an all_reduce on UltraServer 1 in efa-link, in ticks.
EFA_SLOW_TRANSFER_TICKS = 0.5
SIM_VERSIONS = {"neuron_sdk": "simulated", "neuronx-cc": "simulated", "torch-neuronx": "simulated", "trnwatch_sim": "1"}


def run_id(host: SimHost) -> str:
    return f"sim-{host.topology.name}-seed{host.seed}-{host.scenario}"


def job_rank(topology: Topology, host: int, chip: int, core: int) -> int:
    """Global rank of the process on logical core `core` (0-based within the chip) of (host, chip)."""
    return chip_model.rank(topology, host, chip) * topology.cores_per_chip + core


def fault_rank(topology: Topology) -> int:
    """The rank the scenario's fault is injected in: logical core 0 of the fault-site chip."""
    return job_rank(topology, *fault_site(topology), 0)


def rank_events(host: SimHost, chip: int, core: int, tick: int, ts: float) -> list[dict]:
    """The events of the rank on logical core `core` of (host, chip) during `tick` (wall time
    `ts`); [] once its host is lost."""
    topology, scenario = host.topology, host.scenario
    if not host.alive(tick):
        return []
    rank = job_rank(topology, host.fleet_host_index, chip, core)
    at_fault = rank == fault_rank(topology)
    base = {"v": SCHEMA, "ts": ts, "run": run_id(host), "rank": rank}
    out: list[dict] = []

    def emit(event: str, **fields) -> None:
        out.append({**base, "event": event, **fields})

    if scenario == "hw-error" and at_fault and tick >= HW_ERROR_TICK:
        if tick == HW_ERROR_TICK:  # the rank's last words; its process is gone after them
            emit("error", message=SRAM_ERROR_MESSAGE.format(device=chip, core=core), source="runtime")
        return out

    steady_from = COMPILE_TICKS + WARMUP_TICKS
    stopped_at = _stopped_at(scenario)
    stopped = stopped_at is not None and tick >= stopped_at
    if tick == 0:
        cores_per_host = topology.chips_per_host * topology.cores_per_chip
        emit(
            "run_start",
            world_size=topology.chips * topology.cores_per_chip * host.ultraservers,
            host=host.instance_name,
            pid=host.runtime_pid(chip),
            local_rank=chip * topology.cores_per_chip + core,
            backend="neuron",
            core=chip * topology.cores_per_chip + core,
            chip=chip,
            model=MODEL,
            precision="bf16",
            global_batch=GLOBAL_BATCH,
            micro_batch=MICRO_BATCH,
            seq_len=SEQ_LEN,
            parallel={"tp": cores_per_host, "pp": 1, "dp": topology.hosts * host.ultraservers},
            versions=SIM_VERSIONS,
            restart=0,
            lnc=topology.lnc,
        )
        emit("phase", phase="init", state="begin")
        emit("phase", phase="init", state="end")
        emit("phase", phase="compile", state="begin")
    elif tick == COMPILE_TICKS:
        emit("phase", phase="compile", state="end")
        emit("phase", phase="warmup", state="begin")
    elif tick == steady_from:
        emit("phase", phase="warmup", state="end")
        emit("phase", phase="steady", state="begin")

    in_checkpoint = _in_checkpoint(tick)
    if not stopped and tick >= CHECKPOINT_EVERY_TICKS and tick % CHECKPOINT_EVERY_TICKS == 0:
        emit("phase", phase="checkpoint", state="begin")
        emit("checkpoint", action="save", state="begin", step=_last_step(scenario, tick - 1) + 1)
    if not stopped and tick >= CHECKPOINT_EVERY_TICKS and tick % CHECKPOINT_EVERY_TICKS == CHECKPOINT_TICKS - 1:
        emit("checkpoint", action="save", state="end", step=_last_step(scenario, tick) + 1)
        emit("phase", phase="checkpoint", state="end")

    slow_from = _slow_from(scenario)
    slowed = slow_from is not None and tick >= slow_from
    straggling = slowed and scenario == "straggler"
    step_s = host.period_s * (float(SLOW_STEP_TICKS) if slowed else 1.0)
    ends = _step_ends(scenario, tick)
    for step, end in enumerate(ends, start=_last_step(scenario, tick) - len(ends) + 1):
        # A step that ends inside the tick is stamped when it ended (the tick's events are at its end).
        ended_ts = ts - float(1 - end) * host.period_s
        if straggling:
            compute_share, wait_share = (0.95, 0.01) if at_fault else (0.5, 0.45)
        elif slowed:  # efa-link: everyone waits on the slow all_reduce alike
            compute_share, wait_share = 0.5, 0.45
        else:
            compute_share, wait_share = 0.8, 0.05
        rng = random.Random(f"{host.seed}/{rank}/{tick}/job")
        wait_s = round(step_s * wait_share * rng.uniform(0.9, 1.1), 6)
        behind_bad_link = slowed and scenario == "efa-link" and host.ultraserver == fault_ultraserver(scenario)
        transfer_s = round(host.period_s * (0.1 + (EFA_SLOW_TRANSFER_TICKS if behind_bad_link else 0.0)), 6)
        loss = round(2.2 + 8.5 * math.exp(-step / 150) + rng.uniform(-0.02, 0.02), 4)
        emit(
            "collective",
            ts=ended_ts,
            op="all_reduce",
            bytes=GRADIENT_BYTES,
            latency_s=round(wait_s + transfer_s, 6),
            wait_s=wait_s,
            step=step,
        )
        emit(
            "step",
            ts=ended_ts,
            step=step,
            step_time_s=step_s,
            compute_s=round(step_s * compute_share, 6),
            tokens=GLOBAL_BATCH * SEQ_LEN,
            loss=loss,
            seq_len=SEQ_LEN,
        )

    if tick % HEARTBEAT_EVERY_TICKS == 0:
        if tick < COMPILE_TICKS:
            region, since = "compile", ts - tick * host.period_s
        elif stopped and stopped_at is not None:
            region = "dataloader" if at_fault else "collective:all_reduce"
            since = ts - (tick - stopped_at) * host.period_s
        elif in_checkpoint:
            region, since = "checkpoint", ts - (tick % CHECKPOINT_EVERY_TICKS) * host.period_s
        else:
            region, since = "compute", ts
        emit("heartbeat", step=_last_step(scenario, tick), region=region, region_since=since)
    return out


def _stopped_at(scenario: str) -> int | None:
    return {"hang": HANG_START_TICK, "host-loss": HOST_LOSS_TICK, "hw-error": HW_ERROR_TICK}.get(scenario)


def _in_checkpoint(tick: int) -> bool:
    return tick >= CHECKPOINT_EVERY_TICKS and tick % CHECKPOINT_EVERY_TICKS < CHECKPOINT_TICKS


def _training(scenario: str, tick: int) -> bool:
    """True when every live rank completes a step during `tick`."""
    stopped_at = _stopped_at(scenario)
    stopped = stopped_at is not None and tick >= stopped_at
    return tick >= COMPILE_TICKS and not stopped and not _in_checkpoint(tick)


def _slow_from(scenario: str) -> int | None:
    """The tick from which every step takes SLOW_STEP_TICKS (a straggler, a bad EFA link)."""
    return {"straggler": STRAGGLER_START_TICK, "efa-link": EFA_LINK_TICK}.get(scenario)


def _step_ends(scenario: str, tick: int) -> list[Fraction]:
    """Where in `tick` (0 its start, 1 its end) steps end: one per training tick, or while the
    straggler (or the bad EFA link) holds every rank back, one every SLOW_STEP_TICKS training ticks."""
    if not _training(scenario, tick):
        return []
    slow_from = _slow_from(scenario)
    if slow_from is None or tick < slow_from:
        return [Fraction(1)]
    trained = _slow_ticks(slow_from, tick)  # training ticks since the slowdown, this one included
    first, last = int((trained - 1) / SLOW_STEP_TICKS), int(trained / SLOW_STEP_TICKS)
    return [k * SLOW_STEP_TICKS - (trained - 1) for k in range(first + 1, last + 1)]


@functools.lru_cache(maxsize=4096)
def _slow_ticks(slow_from: int, tick: int) -> int:
    """Training ticks from `slow_from` to `tick` inclusive (checkpoints pause training)."""
    return sum(1 for t in range(slow_from, tick + 1) if not _in_checkpoint(t))


def _last_step(scenario: str, tick: int) -> int:
    """The last step completed by the end of `tick` (0 before the first one). Steps are numbered
    by the tick they end in (step = tick - COMPILE_TICKS), and, while the straggler (or the bad
    EFA link) holds the job back, on from the last one before it."""
    slow_from = _slow_from(scenario)
    if slow_from is not None and tick >= slow_from:
        return slow_from - 1 - COMPILE_TICKS + int(_slow_ticks(slow_from, tick) / SLOW_STEP_TICKS)
    for t in range(tick, COMPILE_TICKS - 1, -1):
        if _training(scenario, t):
            return t - COMPILE_TICKS
    return 0


class SimJobWriter:
    """Appends every simulated rank's events to `run_dir/rank-NNNNN.jsonl`, one tick at a time."""

    def __init__(self, hosts: list[SimHost], run_dir: Path):
        run_dir.mkdir(parents=True, exist_ok=True)
        self._files = {
            (h, chip, core): open(
                run_dir / f"rank-{job_rank(h.topology, h.fleet_host_index, chip, core):05d}.jsonl",
                "a",
                encoding="utf-8",
            )
            for h in hosts
            for chip in range(h.topology.chips_per_host)
            for core in range(h.topology.cores_per_chip)
        }

    def write_tick(self, tick: int, ts: float) -> None:
        """Write and flush every rank's events for `tick` (whole lines only)."""
        for (host, chip, core), f in self._files.items():
            events = rank_events(host, chip, core, tick, ts)
            if events:
                f.write("".join(json.dumps(e, separators=(",", ":")) + "\n" for e in events))
                f.flush()

    def close(self) -> None:
        for f in self._files.values():
            f.close()
