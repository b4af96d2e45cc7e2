"""The screen's export key when the snapshot folder cannot be written (issue 9.5): only the
export stops, the screen says why, the session goes on and its receipt marks the failure."""

import asyncio
import json
import time

from trnwatch.collectors.lines import Line
from trnwatch.ledger.ledger import Ledger
from trnwatch.session import Session, SourceSpec
from trnwatch.tui.app import TrnwatchApp
from trnwatch.workloads.sim.fleet import SimHost
from trnwatch.workloads.sim.topology import get_topology


def test_an_unwritable_snapshot_folder_stops_only_the_export_and_marks_the_receipt(tmp_path):
    host = SimHost(get_topology("trn3-gen2-us"), 0, 0, "healthy")

    async def lines():
        yield Line("sim-host-00", "neuron-monitor", time.time(), host.report_line(0))
        await asyncio.Event().wait()  # a live stream: no EOF

    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the snapshot folder should be")
    session = Session(Ledger("simulated"), [SourceSpec("sim-host-00", "neuron-monitor", lines)])
    receipt = tmp_path / "r.json"
    app = TrnwatchApp(
        session.ledger, session=session, receipt_path=receipt, snapshot_dir=blocker / "snaps", theme="dark"
    )
    shown = []

    async def main():
        async with app.run_test(size=(120, 40), notifications=True) as pilot:
            while not session.ledger.hosts:
                await pilot.pause(0.02)
            await pilot.press("e")
            await pilot.press("e")
            await pilot.pause()
            shown.extend((n.title, n.message) for n in app._notifications)
            assert app.is_running and not session._stop.is_set()
            await pilot.press("q")
            await app._session_task

    asyncio.run(main())
    failures = [m for _, m in shown if m.startswith("Snapshot not written: ")]  # one line, no title
    assert failures and "is a file, not a folder" in failures[0]
    marked = json.loads(receipt.read_text())["output_failures"]
    assert [(f["output"], f["path"]) for f in marked] == [("snapshot", str(blocker / "snaps"))]  # once for two presses
