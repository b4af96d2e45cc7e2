"""Deterministic inputs for the TUI tests: ledgers filled from simulated hosts at fixed ticks and
fixed receive times, a job ledger from fixed job events, and an app factory on a fixed clock.

Nothing here reads the wall clock, so every screen (and every SVG snapshot) is the same on every
run: the simulator is a pure function of (seed, scenario, tick), receive time is BASE_S + tick
(+ a fixed stagger per host), and the app's clock is `now_s`.
"""

import functools
import json

from trnwatch.collectors.job_events import parse_job_line
from trnwatch.collectors.lines import Line
from trnwatch.collectors.simulated import host_source_id
from trnwatch.ledger.job import JobLedger
from trnwatch.ledger.ledger import Ledger
from trnwatch.tui.app import TrnwatchApp
from trnwatch.workloads.sim.fleet import fleet_hosts
from trnwatch.workloads.sim.topology import get_topology

BASE_S = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC
SEED = 0
LAST_TICK = 44  # steady training, 14 ticks into the straggler scenario
TICKS = 12  # reports per host in a ledger: enough history for sparklines, quick to build
HOSTS = 36
CHIPS_PER_HOST = 4
STRAGGLER = (7, 2)  # the scenarios' fault site on trn3-gen2-us: host 7, chip 2
RUN = "llama3-70b-run-0042"


def received_s(tick: int, host_index: int) -> float:
    return BASE_S + tick + host_index / 100


def now_at(tick: int) -> float:
    """A screen clock half a period after every host's report for `tick`."""
    return BASE_S + tick + 0.5


def report_lines(scenario: str, first_tick: int, last_tick: int):
    """Every live host's report line for the ticks, in arrival order."""
    hosts = fleet_hosts(get_topology("trn3-gen2-us"), SEED, scenario, 1.0)
    for tick in range(first_tick, last_tick + 1):
        for host in hosts:
            if host.alive(tick):
                yield Line(host_source_id(host), "neuron-monitor", received_s(tick, host.host_index),
                           host.report_line(tick))


def new_fleet_ledger(scenario: str = "straggler", last_tick: int = LAST_TICK, mode="simulated") -> Ledger:
    """A ledger of its own (for tests that add to it) with every report of the TICKS ticks up to last_tick."""
    ledger = Ledger(mode)
    for line in report_lines(scenario, last_tick - TICKS + 1, last_tick):
        ledger.ingest(line)
    return ledger


@functools.cache
def fleet_ledger(scenario: str = "straggler", last_tick: int = LAST_TICK) -> Ledger:
    """The same, built once per test run and shared: views only read it, so tests must not add to it."""
    return new_fleet_ledger(scenario, last_tick)


def _event(kind: str, rank: int, ts: float, **fields) -> str:
    return json.dumps({"v": "trnwatch.job/1", "ts": ts, "run": RUN, "rank": rank, "event": kind, **fields})


@functools.cache
def job_ledger(last_tick: int = LAST_TICK) -> JobLedger:
    """A data-parallel job of one rank per chip (rank = host * 4 + chip) on the simulated hosts:
    compile, then 1 s steps with an all-reduce each; the rank on the straggler chip waits least
    for its peers (it is the one they wait for). Built once and shared, read-only like `fleet_ledger`."""
    job = JobLedger()
    world = HOSTS * CHIPS_PER_HOST
    straggler = STRAGGLER[0] * CHIPS_PER_HOST + STRAGGLER[1]
    lines = []
    for rank in range(world):
        host, chip = divmod(rank, CHIPS_PER_HOST)
        start = BASE_S + 1
        lines.append(_event(
            "run_start", rank, start, world_size=world, host=f"sim-trn3-gen2-us-{host:02d}", pid=40_000 + rank,
            local_rank=chip, backend="neuron", core=chip * 4, chip=chip,
            model={"name": "llama3-70b", "params": 70_553_706_496}, precision="bf16", global_batch=1024,
            micro_batch=1, seq_len=8192, parallel={"tp": 4, "pp": 1, "dp": 36}, versions={"neuronx-cc": "2.21"},
            restart=0, lnc=2,
        ))
        lines.append(_event("phase", rank, start + 0.5, phase="compile", state="begin", cache="miss"))
        lines.append(_event("phase", rank, BASE_S + 9, phase="compile", state="end", cache="miss"))
        lines.append(_event("phase", rank, BASE_S + 9.5, phase="steady", state="begin"))
        for step in range(1, last_tick - 9):
            end = BASE_S + 9.5 + step
            wait = 0.02 if rank == straggler else 0.35
            lines.append(_event("collective", rank, end - 0.1, op="all_reduce", bytes=1 << 28,
                                latency_s=0.38 + (rank % 7) / 1000, wait_s=wait, step=step))
            lines.append(_event("step", rank, end, step=step, step_time_s=1.0, compute_s=1.0 - wait,
                                tokens=1024 * 8192, loss=2.5 - step / 100))
        lines.append(_event("heartbeat", rank, BASE_S + last_tick, step=last_tick - 10, region="forward",
                            region_since=BASE_S + last_tick - 0.2))
    for text in lines:
        event = parse_job_line(text)
        job.ingest(event, event.ts)
    return job


def make_app(scenario: str = "straggler", *, last_tick: int = LAST_TICK, with_job: bool = False,
             theme: str = "dark", ledger: Ledger | None = None, **kwargs) -> TrnwatchApp:
    """The app on a filled ledger and a fixed clock (no session, no wall clock)."""
    ledger = ledger if ledger is not None else fleet_ledger(scenario, last_tick)
    job = job_ledger(last_tick) if with_job else None
    now_s = now_at(last_tick)
    return TrnwatchApp(ledger, job=job, clock=lambda: now_s, theme=theme, **kwargs)
