"""Deterministic inputs for the TUI tests (and the screen benchmark): ledgers filled from
simulated hosts at fixed ticks and fixed receive times, a job ledger from fixed job events, and
an app factory on a fixed clock.

Nothing here reads the wall clock, so every screen (and every SVG snapshot) is the same on every
run: the simulator is a pure function of (seed, scenario, tick), receive time is BASE_S + tick
(+ a fixed stagger per host), and the app's clock is `now_s`.
"""

import asyncio
import functools
import json
import statistics
import time

from textual import events

from trnwatch.collectors.job_events import parse_job_line
from trnwatch.collectors.lines import Line
from trnwatch.collectors.prometheus_sources import HOST_LINES_PER_CHUNK
from trnwatch.ledger.job import JobLedger
from trnwatch.ledger.ledger import Ledger
from trnwatch.tui.app import TrnwatchApp
from trnwatch.workloads.sim.exporter import fleet
from trnwatch.workloads.sim.fleet import SimHost, fleet_hosts
from trnwatch.workloads.sim.host_sysfs import SimSysfs
from trnwatch.workloads.sim.job import rank_events
from trnwatch.workloads.sim.scenarios import fleet_ultraservers
from trnwatch.workloads.sim.source import host_source_id, sysfs_source_id
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
                yield Line(
                    host_source_id(host), "neuron-monitor", received_s(tick, host.host_index), host.report_line(tick)
                )


def new_fleet_ledger(scenario: str = "straggler", last_tick: int = LAST_TICK, mode="simulated") -> Ledger:
    """A ledger of its own (for tests that add to it) with every report of the TICKS ticks up to last_tick."""
    ledger = Ledger(mode)
    for line in report_lines(scenario, last_tick - TICKS + 1, last_tick):
        ledger.ingest(line)
    return ledger


@functools.cache
def fleet_ledger(scenario: str = "straggler", last_tick: int = LAST_TICK, with_job: bool = False) -> Ledger:
    """The same, built once per test run and shared: views only read it, so tests must not add to
    it; `with_job`: with `job_ledger(last_tick)` as its job scope."""
    ledger = new_fleet_ledger(scenario, last_tick)
    if with_job:
        ledger.job = job_ledger(last_tick)
    return ledger


# Every demo scenario, as `trnwatch demo --scenario S` shows it: the simulated UltraServer's device
# reports and its job telemetry (workloads/sim/job.py), folded tick by tick at fixed times. The
# tick of each is when the fault line must have named the fault: 10 s after onset for hang,
# host-loss and ecc (its uncorrected error), 40 s for hbm-leak and straggler.
SCENARIO_TICKS = {"healthy": 44, "straggler": 70, "hang": 40, "hbm-leak": 60, "ecc": 60, "host-loss": 55}
FAULT_SITE = "sim-trn3-gen2-us-07"  # host 7 (chip 2, core 8, rank 120) in every fault scenario but efa-link
EFA_LINK_SITE = "sim-trn3-gen2-us-1-07"  # efa-link's: host 7 of UltraServer 1 (its EFA device of chip 2)


def scenario_fault_host(scenario: str) -> str:
    """The host the fault line names in a demo scenario (scenarios.py)."""
    return EFA_LINK_SITE if scenario == "efa-link" else FAULT_SITE


def rank_file_source(rank: int) -> str:
    """The source of a rank's lines, as `--job-dir` names each rank file (36 hosts + 576 rank
    files: the 612 sources the demo's status line counts)."""
    return f"job:rank-{rank:05d}.jsonl"


def scenario_lines(scenario: str, last_tick: int, report_ticks: int = TICKS, sysfs: bool = False):
    """The demo's lines up to `last_tick`: every rank's job events from tick 0 (job events half a
    period before the screen's `now_at`), each host's reports for the last TICKS ticks (enough
    history for sparklines and HBM trends; rendering reports is what costs), in arrival order;
    `sysfs`: each host's sysfs samples too, half a period after its report, as the demo has them.
    As many UltraServers as the demo runs the scenario on."""
    topology = get_topology("trn3-gen2-us")
    hosts = fleet_hosts(topology, SEED, scenario, 1.0, ultraservers=fleet_ultraservers(topology, scenario, None))
    sysfs_of = {host: SimSysfs(host) for host in hosts} if sysfs else {}
    for tick in range(last_tick + 1):
        for host in hosts:
            for chip in range(host.topology.chips_per_host):
                for core in range(host.topology.cores_per_chip):
                    for event in rank_events(host, chip, core, tick, now_at(tick) - 0.5):
                        yield Line(rank_file_source(event["rank"]), "job", event["ts"], json.dumps(event))
        if tick <= last_tick - report_ticks:
            continue
        for host in hosts:
            if host.alive(tick):
                t = received_s(tick, host.host_index)
                yield Line(host_source_id(host), "neuron-monitor", t, host.report_line(tick))
                if sysfs:
                    yield Line(sysfs_source_id(host), "sysfs", t + 0.5, sysfs_of[host].line(tick, t + 0.5))


@functools.cache
def scenario_ledger(
    scenario: str, last_tick: int | None = None, report_ticks: int = TICKS, sysfs: bool = False
) -> Ledger:
    """A demo scenario's ledger up to `last_tick` (default: its SCENARIO_TICKS tick), with the
    reports (and, with `sysfs`, the sysfs samples) of the last `report_ticks` ticks; shared, read-only."""
    ledger = Ledger("simulated")
    last_tick = SCENARIO_TICKS[scenario] if last_tick is None else last_tick
    for line in scenario_lines(scenario, last_tick, report_ticks, sysfs):
        ledger.ingest(line)
    return ledger


def make_scenario_app(scenario: str, last_tick: int | None = None, **kwargs) -> TrnwatchApp:
    """The app on a demo scenario's ledger, its clock at that tick."""
    tick = SCENARIO_TICKS[scenario] if last_tick is None else last_tick
    now_s = now_at(tick)
    return TrnwatchApp(scenario_ledger(scenario, tick), clock=lambda: now_s, theme="dark", **kwargs)


# The cluster view's fleet: three simulated UltraServers (seed = position) in different scenarios,
# at a tick where the second has ECC events and the third a host that stopped reporting (stale),
# and one server in no UltraServer.
CLUSTER_SCENARIOS = ("straggler", "ecc", "host-loss")
CLUSTER_LAST_TICK = 52
CLUSTER_TICKS = 9  # back to tick 44, the lost host's last report


def cluster_hosts() -> list[SimHost]:
    ultraserver = get_topology("trn3-gen2-us")
    hosts = [
        SimHost(ultraserver, h, seed, scenario)
        for seed, scenario in enumerate(CLUSTER_SCENARIOS)
        for h in range(ultraserver.hosts)
    ]
    return hosts + [SimHost(get_topology("trn2.48xlarge"), 0, SEED, "healthy")]  # reports no UltraServer


def cluster_line(host: SimHost, tick: int, source_id: str | None = None) -> Line:
    """One simulated host's report for `tick`, from a stream of its own (or `source_id`: one
    stream for every host, as Prometheus server mode delivers them)."""
    if source_id is None:
        source_id = (
            f"sim-us{host.seed}-host-{host.host_index:02d}" if host.topology.is_ultraserver else host_source_id(host)
        )
    return Line(source_id, "neuron-monitor", received_s(tick, host.host_index), host.report_line(tick))


def cluster_report_lines():
    """The cluster fleet's reports of the CLUSTER_TICKS ticks up to CLUSTER_LAST_TICK, in arrival order."""
    hosts = cluster_hosts()
    for tick in range(CLUSTER_LAST_TICK - CLUSTER_TICKS + 1, CLUSTER_LAST_TICK + 1):
        for host in hosts:
            if host.alive(tick):
                yield cluster_line(host, tick)


@functools.cache
def cluster_ledger() -> Ledger:
    """The cluster fleet's reports (`cluster_report_lines`); shared, read-only."""
    ledger = Ledger("simulated")
    for line in cluster_report_lines():
        ledger.ingest(line)
    return ledger


def make_cluster_app(**kwargs) -> TrnwatchApp:
    """The app on the cluster fleet's ledger and a fixed clock."""
    now_s = now_at(CLUSTER_LAST_TICK)
    return TrnwatchApp(cluster_ledger(), clock=lambda: now_s, theme="dark", **kwargs)


def scale_fleet(ultraservers: int = 32) -> list[SimHost]:
    """The target scale: `ultraservers` simulated UltraServers of 36 hosts (1,152 hosts, 4,608
    chips at 32), as `python -m trnwatch.workloads.sim.exporter --ultraservers 32` serves them."""
    return fleet("trn3-gen2-us", ultraservers, SEED, "healthy", 1.0)


SCALE_SOURCE = "http://prometheus.sim:9090"  # one stream for every host, as in server mode


def scale_app(ultraservers: int = 32, tick: int = 25) -> tuple[TrnwatchApp, list[Line]]:
    """The app on a ledger of `ultraservers` UltraServers that folded their report for `tick`,
    with the next refresh's lines (tick + 1) to fold while keys are pressed; the clock is fixed
    within both reports' freshness."""
    hosts = scale_fleet(ultraservers)
    ledger = Ledger("simulated")
    for host in hosts:
        ledger.ingest(cluster_line(host, tick, SCALE_SOURCE))
    next_refresh = [cluster_line(host, tick + 1, SCALE_SOURCE) for host in hosts]
    now_s = now_at(tick + 1)
    return TrnwatchApp(ledger, clock=lambda: now_s, theme="dark"), next_refresh


async def cluster_view_latency(
    app: TrnwatchApp, pilot, next_refresh: list[Line], repaints: int = 5, keys: int = 10
) -> dict[str, list]:
    """Open the cluster view, then time (ms) `repaints` repaints of it (`render_now`: model,
    lines, dirty regions) and `keys` presses of "down", each from the key event reaching the app
    until the selected row moved (the app repaints in the same handler), while the next refresh
    folds on the event loop the way Prometheus server mode folds one (HOST_LINES_PER_CHUNK host
    lines, then a pause for the loop) and the refresh timer repaints; and for each key whether it
    was answered before that fold ended (a key must not wait for a refresh's input).

    The key goes in as the pilot sends it, but the pilot's own `press` waits for the whole
    process to idle, which never happens while a refresh folds: the effect is polled instead."""
    await pilot.press("l")
    await pilot.pause()
    assert app.selection.scope == "cluster"
    repaint_ms = []
    for _ in range(repaints):
        start = time.perf_counter()
        app.render_now()
        repaint_ms.append((time.perf_counter() - start) * 1000)
        await pilot.pause()

    async def fold() -> None:
        for i, line in enumerate(next_refresh, start=1):
            app.ledger.ingest(line)
            if i % HOST_LINES_PER_CHUNK == 0:
                await asyncio.sleep(0)

    key_ms = []
    answered_while_folding = []
    for _ in range(keys):
        folding = asyncio.create_task(fold())  # every press lands while a refresh folds
        await asyncio.sleep(0)
        before = app.selection.group
        start = time.perf_counter()
        app.post_message(events.Key("down", None))
        while app.selection.group == before:
            await asyncio.sleep(0)
        key_ms.append((time.perf_counter() - start) * 1000)
        answered_while_folding.append(not folding.done())
        await folding
        await asyncio.sleep(0.05)  # a person's pace, not a key repeat
    return {"repaint_ms": repaint_ms, "key_ms": key_ms, "answered_while_folding": answered_while_folding}


def summary_ms(values: list[float]) -> str:
    """p50, p99 and worst of a list of milliseconds."""
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"p50 {statistics.median(values):.0f} ms, p99 {p99:.0f} ms, worst {ordered[-1]:.0f} ms"


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
        lines.append(
            _event(
                "run_start",
                rank,
                start,
                world_size=world,
                host=f"sim-trn3-gen2-us-{host:02d}",
                pid=40_000 + rank,
                local_rank=chip,
                backend="neuron",
                core=chip * 4,
                chip=chip,
                model={"name": "llama3-70b", "params": 70_553_706_496},
                precision="bf16",
                global_batch=1024,
                micro_batch=1,
                seq_len=8192,
                parallel={"tp": 4, "pp": 1, "dp": 36},
                versions={"neuronx-cc": "2.21"},
                restart=0,
                lnc=2,
            )
        )
        lines.append(_event("phase", rank, start + 0.5, phase="compile", state="begin", cache="miss"))
        lines.append(_event("phase", rank, BASE_S + 9, phase="compile", state="end", cache="miss"))
        lines.append(_event("phase", rank, BASE_S + 9.5, phase="steady", state="begin"))
        for step in range(1, last_tick - 9):
            end = BASE_S + 9.5 + step
            wait = 0.02 if rank == straggler else 0.35
            lines.append(
                _event(
                    "collective",
                    rank,
                    end - 0.1,
                    op="all_reduce",
                    bytes=1 << 28,
                    latency_s=0.38 + (rank % 7) / 1000,
                    wait_s=wait,
                    step=step,
                )
            )
            lines.append(
                _event(
                    "step",
                    rank,
                    end,
                    step=step,
                    step_time_s=1.0,
                    compute_s=1.0 - wait,
                    tokens=1024 * 8192,
                    loss=2.5 - step / 100,
                )
            )
        lines.append(
            _event(
                "heartbeat",
                rank,
                BASE_S + last_tick,
                step=last_tick - 10,
                region="forward",
                region_since=BASE_S + last_tick - 0.2,
            )
        )
    for text in lines:
        event = parse_job_line(text)
        job.ingest(event, event.ts)
    return job


def make_app(
    scenario: str = "straggler",
    *,
    last_tick: int = LAST_TICK,
    with_job: bool = False,
    theme: str = "dark",
    ledger: Ledger | None = None,
    **kwargs,
) -> TrnwatchApp:
    """The app on a filled ledger and a fixed clock (no session, no wall clock)."""
    ledger = ledger if ledger is not None else fleet_ledger(scenario, last_tick, with_job)
    now_s = now_at(last_tick)
    return TrnwatchApp(ledger, clock=lambda: now_s, theme=theme, **kwargs)
