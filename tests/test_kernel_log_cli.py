"""The kernel-log source from the command line, as real child processes: `watch --stdin --kmsg`
reading a named pipe beside a simulated host's reports, its recording replayed to the same
hardware errors, and `--kernel-log` following this machine's real kernel log with dmesg."""

import json
import os
import shutil
import subprocess
import sys
import threading

import pytest

from trnwatch.workloads.sim.fleet import SimHost
from trnwatch.workloads.sim.kernel_log import host_kernel_messages, short_iso_line
from trnwatch.workloads.sim.scenarios import HW_ERROR_TICK
from trnwatch.workloads.sim.topology import get_topology

TRNWATCH = [sys.executable, "-m", "trnwatch"]
SIM = [sys.executable, "-m", "trnwatch.workloads.sim"]


def watch_sim(watch_args: list[str], sim_args: list[str]) -> subprocess.CompletedProcess:
    """`trnwatch watch --stdin --headless WATCH_ARGS` reading the simulator's reports from a pipe."""
    sim = subprocess.Popen(SIM + sim_args, stdout=subprocess.PIPE)
    watch = subprocess.run(
        TRNWATCH + ["watch", "--stdin", "--headless", *watch_args],
        stdin=sim.stdout,
        capture_output=True,
        text=True,
        timeout=120,
    )
    sim.wait(timeout=30)
    return watch


def test_kmsg_pipe_beside_reports_gives_the_hardware_error_and_replays_it(tmp_path):
    topology, host_index, ticks = get_topology("trn3-gen1-us"), 3, HW_ERROR_TICK + 5
    host = SimHost(topology, host_index, 0, "hw-error")
    fifo = tmp_path / "kmsg"
    os.mkfifo(fifo)
    lines = [short_iso_line(1_796_227_504.0, host.instance_name, m) for m in host_kernel_messages(host, HW_ERROR_TICK)]

    def write_log() -> None:
        with open(fifo, "w") as f:  # blocks until trnwatch opens the pipe
            f.write("".join(line + "\n" for line in lines))

    writer = threading.Thread(target=write_log, daemon=True)
    writer.start()
    sim_args = ["--no-wait", "--count", str(ticks), "--topology", topology.name, "--host", str(host_index)]
    sim = subprocess.Popen(SIM + sim_args + ["--scenario", "hw-error"], stdout=subprocess.PIPE)
    live, replayed, rec = tmp_path / "live.json", tmp_path / "replay.json", tmp_path / "s.trnrec"
    watch = subprocess.run(
        TRNWATCH
        + ["watch", "--stdin", "--kmsg", str(fifo), "--headless", "--record", str(rec), "--receipt", str(live)],
        stdin=sim.stdout,
        capture_output=True,
        text=True,
        timeout=120,
    )
    sim.wait(timeout=30)
    writer.join(timeout=30)
    assert watch.returncode == 0, watch.stderr
    r = json.loads(live.read_text())
    [error] = r["kernel_log"]["hardware_errors"]
    assert (error["error_type"], error["host"], error["chip"], error["nc_id"], error["source"]) == (
        "SRAM_UNCORRECTABLE_ERROR",
        host.instance_id,
        2,
        0,
        "kmsg:kmsg",
    )
    assert r["kernel_log"]["driver_lines"] == {"kmsg:kmsg": 1}
    kmsg = next(s for s in r["sources"] if s["id"] == "kmsg:kmsg")
    assert (kmsg["kind"], kmsg["reports"], kmsg["rejected"], kmsg["ended"]) == ("kernel-log", 2, 0, True)
    result = subprocess.run(
        TRNWATCH + ["replay", str(rec), "--headless", "--receipt", str(replayed)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    again = json.loads(replayed.read_text())["kernel_log"]
    assert again == r["kernel_log"]


def test_kmsg_file_that_cannot_be_read_is_a_lost_source(tmp_path):
    receipt = tmp_path / "r.json"
    watch = watch_sim(["--kmsg", str(tmp_path / "absent"), "--receipt", str(receipt)], ["--no-wait", "--count", "3"])
    r = json.loads(receipt.read_text())
    kmsg = next(s for s in r["sources"] if s["id"] == "kmsg:absent")
    assert "cannot read" in kmsg["end_error"] and "No such file" in kmsg["end_error"]
    assert r["kernel_log"] == {"hardware_errors": [], "hardware_errors_dropped": 0, "driver_lines": {}}
    assert watch.returncode in (0, 1), watch.stderr


@pytest.mark.skipif(shutil.which("dmesg") is None, reason="util-linux dmesg not installed")
def test_kernel_log_follows_this_machines_kernel_log(tmp_path):
    """The live path on this machine (`kernel_log_command`: dmesg -w where journald does not
    run), for two seconds beside a simulated host's reports; the kernel's own lines are read
    (counted), none is rejected, and the child is stopped with the session."""
    if subprocess.run(["dmesg"], capture_output=True).returncode != 0:
        pytest.skip("the kernel log is not readable here (kernel.dmesg_restrict)")
    receipt = tmp_path / "r.json"
    watch = watch_sim(["--kernel-log", "--duration", "2", "--receipt", str(receipt)], ["--count", "2"])
    assert watch.returncode == 0, watch.stderr
    r = json.loads(receipt.read_text())
    source = next(s for s in r["sources"] if s["id"] == "kernel-log")
    assert source["kind"] == "kernel-log" and source["reports"] > 0 and source["rejected"] == 0
    assert source["end_error"] is None
