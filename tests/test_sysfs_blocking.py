"""A sysfs leaf that blocks never hangs the session (issue 36 item 6): a FIFO or a device under
--sysfs-root is never read (counted, with what it is), and a sample that does not return within
its bound loses the source, naming the file, from a daemon thread that nothing joins. The FIFOs
are real; a thread stuck in a FIFO's blocking open stands for a wedged driver attribute or a
stalled mount (no other regular file blocks on demand)."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from trnwatch.collectors.lines import Line
from trnwatch.collectors.streams import SourceLost
from trnwatch.collectors.sysfs import bounded_call
from trnwatch.collectors.sysfs_reader import sample_sysfs
from trnwatch.collectors.sysfs_sample import decode_sysfs
from trnwatch.ledger.ledger import Ledger
from trnwatch.ledger.receipt import build_receipt
from trnwatch.session import Session, SourceSpec
from trnwatch.workloads.sim.sysfs_tree import write_host_tree
from tests.recordings import recorded_lines
from tests.waiting import wait_until

POWER = ("POWER_STATUS_VALID", 1760913720, 41.25, 78.90, 63.12)


def _tree_with_blocking_leaves(root: Path) -> dict[str, Path]:
    """Device 0 as documented; device 1's power a FIFO with no writer, its unhealthy_components a
    link to /dev/zero, the board asset tag a FIFO: each would block or run on if read."""
    write_host_tree(root, None, {0: POWER, 1: POWER}, {0: "", 1: ""}, {})
    stats = root / "devices/virtual/neuron_device/neuron1/stats"
    leaves = {
        "power": stats / "power/utilization",
        "unhealthy": stats / "hardware/health_status/unhealthy_components",
        "asset": root / "devices/virtual/dmi/id/board_asset_tag",
    }
    leaves["power"].unlink()
    os.mkfifo(leaves["power"])
    leaves["unhealthy"].unlink()
    leaves["unhealthy"].symlink_to("/dev/zero")
    leaves["asset"].parent.mkdir(parents=True)
    os.mkfifo(leaves["asset"])
    return leaves


def _in_thread(work):
    """`work()` in a daemon thread, awaited with the broken-test deadline (a hang fails, not blocks)."""
    out: list = []
    thread = threading.Thread(target=lambda: out.append(work()), daemon=True)
    thread.start()
    wait_until(lambda: out, "the sample to return (a blocking leaf was read?)")
    return out[0]


def test_a_fifo_or_a_device_leaf_is_not_read_and_is_counted_with_what_it_is(tmp_path):
    leaves = _tree_with_blocking_leaves(tmp_path)
    sample = decode_sysfs(_in_thread(lambda: sample_sysfs(tmp_path)))
    assert sample.skipped == {
        str(leaves["power"]): "a FIFO, not a regular file: not read",
        str(leaves["unhealthy"]): "a character device, not a regular file: not read",
        str(leaves["asset"]): "a FIFO, not a regular file: not read",
    }
    assert sample.devices[0].power.avg_pct == 63.12  # the regular leaves are read as before
    assert (sample.devices[1].power, sample.devices[1].unhealthy_components, sample.instance_id) == (None, None, None)
    ledger = Ledger("live")
    ledger.ingest(Line("sysfs", "sysfs", 100.0, sample_sysfs(tmp_path)))
    stats = ledger.sources["sysfs"]
    assert dict(stats.rejected_fields) == {
        "sysfs utilization": 1,
        "sysfs unhealthy_components": 1,
        "sysfs board_asset_tag": 1,
    }
    (source,) = build_receipt(ledger, "eof", "live", written_at_s=101.0).sources
    assert source.rejected_fields == dict(stats.rejected_fields) and source.reports == 1


def _stuck_in_fifo(fifo: Path, reading: list[Path]) -> str:
    reading.append(fifo)
    with open(fifo) as f:  # a blocking open: no writer ever comes
        return f.read()


def test_a_read_that_never_returns_loses_its_source_naming_the_file_and_nothing_waits_for_it(tmp_path):
    fifo = tmp_path / "power_utilization"
    os.mkfifo(fifo)

    async def run() -> str:
        with pytest.raises(SourceLost) as lost:
            await bounded_call(_stuck_in_fifo, fifo, bound_s=0.2)
        return str(lost.value)

    said = asyncio.run(run())  # returns: the loop's end does not join the stuck thread
    assert said.startswith(f"a read of {fifo} has not returned in 0.2 s"), said
    (stuck,) = [t for t in threading.enumerate() if t.name == "bounded _stuck_in_fifo" and t.is_alive()]
    assert stuck.daemon  # nor does the interpreter's end
    _release(fifo)
    stuck.join(60)


def test_a_cancel_that_arrives_with_the_sample_cancels_the_sampler():
    """The session's end cancels the sampler while a sample's result is on its way: the cancel
    wins. Before (asyncio.wait_for, Python 3.11): the result was returned and the cancel lost, so
    the sampler went on sampling and the session never ended (a 2 s --duration still running at
    120 s on a loaded machine). The read schedules the cancel before it returns, and the loop is
    held until the read's thread has ended, so the cancel and the result reach the loop in the
    same turn, in that order."""

    async def run() -> None:
        loop = asyncio.get_running_loop()
        tasks: list[asyncio.Task] = []

        def read(_reading: list) -> str:
            loop.call_soon_threadsafe(tasks[0].cancel)
            return "a sample"

        tasks.append(asyncio.create_task(bounded_call(read, bound_s=30)))
        await asyncio.sleep(0)  # the task starts its read's thread and waits
        for worker in [t for t in threading.enumerate() if t.name == "bounded read"]:
            worker.join(60)  # the loop held: the cancel and the result wait in its queue together
        with pytest.raises(asyncio.CancelledError):
            await tasks[0]

    asyncio.run(run())


def _release(fifo: Path) -> None:
    fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # the stuck open returns; it then reads EOF
    os.close(fd)


def test_a_session_whose_source_is_stuck_ends_and_its_receipt_names_the_stuck_file(tmp_path):
    fifo = tmp_path / "utilization"
    os.mkfifo(fifo)

    async def stuck_lines():
        yield Line("sysfs", "sysfs", 0.0, await bounded_call(_stuck_in_fifo, fifo, bound_s=0.2))

    ledger = Ledger("live")
    session = Session(ledger, [SourceSpec("sysfs", "sysfs", stuck_lines)])
    assert asyncio.run(session.run()) == "eof"
    (source,) = session.receipt().sources
    assert source.end_error is not None and str(fifo) in source.end_error and "has not returned" in source.end_error
    _release(fifo)


@pytest.mark.slow
def test_a_watch_of_a_root_with_fifo_leaves_samples_and_a_sigterm_ends_it_with_its_receipt(tmp_path):
    """The real command. Before: its worker blocked in the FIFO's open, no sample ever came, and
    SIGTERM left it waiting for that thread; only SIGKILL ended it, with no receipt."""
    root, receipt, recording = tmp_path / "sys", tmp_path / "r.json", tmp_path / "s.trnrec"
    leaves = _tree_with_blocking_leaves(root)
    proc = subprocess.Popen(
        [sys.executable, "-m", "trnwatch", "watch", "--headless", "--sysfs-root", str(root)]
        + ["--receipt", str(receipt), "--record", str(recording)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PATH": "/usr/bin:/bin"},  # no neuron-monitor: sysfs only
    )
    try:
        wait_until(lambda: recorded_lines(recording), "the first sysfs sample", detail=lambda: str(proc.poll()))
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert out.startswith(f"receipt: {receipt} ")
    r = json.loads(receipt.read_text())
    assert r["exit_reason"] == "sigterm"
    (source,) = [s for s in r["sources"] if s["id"] == "sysfs"]
    assert source["reports"] >= 1 and source["rejected_fields"]["sysfs utilization"] == source["reports"]
    assert source["last_field_rejection"].endswith(": a FIFO, not a regular file: not read")
    assert (
        str(leaves["asset"]) in source["last_field_rejection"] or str(leaves["power"]) in source["last_field_rejection"]
    )
    assert "| sysfs | sysfs |" in receipt.with_suffix(".md").read_text()  # among the troubled streams
