"""The demo's source: a whole simulated fleet in this process, one stream per host.

Each simulated host renders its report to JSON text, and that text goes through the same
`Line` -> parse -> ledger path as a live neuron-monitor stream; only the bytes' origin differs.
Hosts are staggered across the period, as independent neuron-monitor processes would be.
It lives with the simulator, not in collectors/, so that no product source imports the
simulator: the command line's demo assembly is the one place that joins the two.
"""

import asyncio
import time
from collections.abc import AsyncIterator

from trnwatch.collectors.lines import Line
from trnwatch.workloads.sim.fleet import SimHost
from trnwatch.workloads.sim.host_sysfs import SimSysfs
from trnwatch.workloads.sim.kernel_log import host_kernel_messages, short_iso_line

KERNEL_LOG_SOURCE = "sim-kernel-log"


def host_source_id(host: SimHost) -> str:
    us = f"us{host.ultraserver}-" if host.ultraserver else ""
    return f"sim-{us}host-{host.host_index:02d}"


def sysfs_source_id(host: SimHost) -> str:
    """The host's sysfs stream, named as the SSH fan-out names one (`sysfs:<label>`)."""
    return f"sysfs:{host_source_id(host)}"


async def sim_host_lines(host: SimHost, period_s: float, start_s: float, offset_s: float) -> AsyncIterator[Line]:
    """Yield one simulated host's report each period (from monotonic `start_s` + `offset_s`)
    while the host is alive; a lost host goes silent, as a dead SSH stream would."""
    source_id = host_source_id(host)
    tick = 0
    while host.alive(tick):
        delay = start_s + offset_s + tick * period_s - time.monotonic()
        # Suspends even when behind schedule (a loaded machine, a short period): a report
        # yielded without it keeps the event loop from the screen, signals and the demo's job.
        await asyncio.sleep(max(0.0, delay))
        yield Line(source_id, "neuron-monitor", time.time(), host.report_line(tick))
        tick += 1
    await asyncio.Event().wait()  # silent, not ended: the monitor must notice on its own


async def sim_sysfs_lines(host: SimHost, period_s: float, start_s: float, offset_s: float) -> AsyncIterator[Line]:
    """Yield one simulated host's sysfs sample each period (host_sysfs.py), as the sampler over
    SSH would, half a period after the host's report; a lost host goes silent."""
    source_id = sysfs_source_id(host)
    sysfs = SimSysfs(host)
    tick = 0
    while host.alive(tick):
        await asyncio.sleep(max(0.0, start_s + offset_s + (tick + 0.5) * period_s - time.monotonic()))
        now = time.time()
        yield Line(source_id, "sysfs", now, sysfs.line(tick, now))
        tick += 1
    await asyncio.Event().wait()


def fleet_has_kernel_log(hosts: list[SimHost]) -> bool:
    """Whether the scenario writes to the kernel log (only then does the demo read one)."""
    return any(h.scenario == "hw-error" for h in hosts)


async def sim_kernel_lines(hosts: list[SimHost], period_s: float, start_s: float) -> AsyncIterator[Line]:
    """The fleet's kernel logs as one `journalctl -o short-iso` stream (each line names its host,
    as a central log would): each tick's Neuron messages (kernel_log.py), then quiet."""
    tick = 0
    while any(h.alive(tick) for h in hosts):
        await asyncio.sleep(max(0.0, start_s + tick * period_s - time.monotonic()))
        for host in hosts:
            for message in host_kernel_messages(host, tick) if host.alive(tick) else ():
                now = time.time()
                yield Line(KERNEL_LOG_SOURCE, "kernel-log", now, short_iso_line(now, host.instance_name, message))
        tick += 1
    await asyncio.Event().wait()
