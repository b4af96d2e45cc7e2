"""The simulator's device source inside the monitor's own event loop."""

import asyncio
import time

from trnwatch.workloads.sim.fleet import fleet_hosts
from trnwatch.workloads.sim.source import sim_host_lines
from trnwatch.workloads.sim.topology import get_topology


def test_a_simulated_host_behind_its_schedule_still_lets_the_loop_run_between_reports():
    # Defect: a host behind its schedule (a loaded machine, a short --period) yielded its late
    # reports without suspending, so its task never gave the event loop back while behind: the
    # demo's own simulated job stopped writing steps (read as LATE), the screen and SIGTERM
    # waited. Now it suspends once per report.
    host = fleet_hosts(get_topology("trn2.48xlarge"), 0, "healthy", 0.25)[0]

    async def main() -> int:
        turns = 0

        async def peer() -> None:
            nonlocal turns
            while True:
                turns += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(peer())
        await asyncio.sleep(0)  # the peer runs once
        before = turns
        reports = 0
        async for _ in sim_host_lines(host, 0.25, time.monotonic() - 1000.0, 0.0):  # 4,000 reports behind
            reports += 1
            if reports == 5:
                break
        task.cancel()
        return turns - before

    assert asyncio.run(main()) >= 4  # the peer ran between the reports (0 before the fix)
