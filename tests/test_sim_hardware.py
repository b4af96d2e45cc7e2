"""The simulator's hardware scenarios end to end: the demo's receipt carries the fault at its
ground-truth site (workloads/sim/scenarios.py)."""

import json
import sys

import pytest

from trnwatch.workloads.sim.fleet import fleet_hosts
from trnwatch.workloads.sim.job import fault_rank
from trnwatch.workloads.sim.kernel_log import host_kernel_messages
from trnwatch.workloads.sim.scenarios import HW_ERROR_TICK, fault_site
from trnwatch.workloads.sim.topology import get_topology
from tests.waiting import run_until_said

TOPOLOGY = "trn3-gen1-us"  # 4 hosts x 16 chips: the fault site is host 3, chip 2


def test_hw_error_scenario_logs_one_error_at_the_fault_site_at_its_tick():
    topology = get_topology(TOPOLOGY)
    hosts = fleet_hosts(topology, 0, "hw-error", 1.0)
    host, chip = fault_site(topology)
    logged = {(h.host_index, t): host_kernel_messages(h, t) for h in hosts for t in range(HW_ERROR_TICK + 5)}
    assert {k for k, v in logged.items() if v} == {(host, HW_ERROR_TICK)}
    error, detach = logged[(host, HW_ERROR_TICK)]
    assert error.startswith("NEURON_HW_ERR=SRAM_UNCORRECTABLE_ERROR instance-id=" + hosts[host].instance_id)
    assert f" nd-id={chip} nc-id=0 " in error and error.endswith(" action=TERMINATE_INSTANCE")
    assert detach.startswith("neuron:npid_detach: ") and f"pid={hosts[host].runtime_pid(chip)}," in detach


@pytest.mark.slow
def test_demo_hw_error_receipt_names_the_fault_site(tmp_path):
    """The demo's hw-error scenario runs until the job has failed (its headless progress line
    says so), then Ctrl-C: the receipt's kernel-log section and job verdict name the fault site."""
    path = tmp_path / "hw.json"
    command = [sys.executable, "-m", "trnwatch", "demo", "--headless", "--scenario", "hw-error"]
    command += ["--topology", TOPOLOGY, "--receipt", str(path)]  # the default 1 s period: a loaded
    # machine cannot keep a quarter-second fleet's job on time, and its ranks would read as dead
    result = run_until_said(command, ["job failed"], 300)
    assert result.returncode == 0, result.stderr[-2000:]
    r = json.loads(path.read_text())
    topology = get_topology(TOPOLOGY)
    host_index, chip = fault_site(topology)
    [error] = r["kernel_log"]["hardware_errors"]
    fault_host = fleet_hosts(topology, 0, "hw-error", 1.0)[host_index]
    assert (error["error_type"], error["host"], error["chip"], error["nc_id"], error["action"]) == (
        "SRAM_UNCORRECTABLE_ERROR",
        fault_host.instance_id,
        chip,
        0,
        "TERMINATE_INSTANCE",
    )
    assert error["ultraserver"] is not None
    assert r["kernel_log"]["driver_lines"] == {"sim-kernel-log": 1}
    suspect = r["job"]["suspects"][0]
    assert (r["job"]["verdict"], suspect["rank"], suspect["chip"]) == ("failed", fault_rank(topology), chip)
    assert "SRAM_UNCORRECTABLE_ERROR" in path.with_suffix(".md").read_text()
