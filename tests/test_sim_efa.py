"""The simulated fleet's sysfs and EFA counters, several UltraServers in one demo, and the efa-link
scenario end to end: the demo's receipt names the ground-truth host (workloads/sim/scenarios.py)."""

import json
import signal
import subprocess
import sys

import pytest

from trnwatch.collectors.sysfs_reader import sample_sysfs
from trnwatch.workloads.sim.fleet import fleet_hosts
from trnwatch.workloads.sim.host_sysfs import (
    EFA_IDLE_BYTES_PER_TICK,
    SimSysfs,
    efa_devices,
    efa_increments,
)
from trnwatch.workloads.sim.job import GRADIENT_BYTES, rank_events
from trnwatch.workloads.sim.scenarios import (
    CHECKPOINT_EVERY_TICKS,
    EFA_LINK_ERRORS_PER_TICK,
    EFA_LINK_TICK,
    fault_site,
    fleet_ultraservers,
)
from trnwatch.workloads.sim.sysfs_tree import write_host_tree
from trnwatch.workloads.sim.topology import get_topology
from tests.waiting import wait_until

GEN2 = get_topology("trn3-gen2-us")
GEN1 = get_topology("trn3-gen1-us")
ERRORS = (
    "rx_drops",
    "retrans_pkts",
    "retrans_timeout_events",
    "unresponsive_remote_events",
    "impaired_remote_conn_events",
)


def test_the_simulated_sample_is_what_the_sampler_reads_from_the_same_tree(tmp_path):
    """The demo's in-process sysfs line is byte for byte what collectors/sysfs_reader.py writes on
    reading a tree laid out as the driver has it (sysfs_tree.py) with the same values."""
    host = fleet_hosts(GEN2, 0, "efa-link", 1.0, ultraservers=2)[GEN2.hosts + 7]
    sysfs = SimSysfs(host)
    for tick, epoch_s in ((3, 1_800_000_003.4), (75, 1_800_000_075.4)):  # no power data yet; a whole minute
        line = sysfs.line(tick, epoch_s)
        power = {}
        for device, leaves in json.loads(line)["devices"].items():
            status, at, low, high, avg = leaves["utilization"].split(",")
            power[int(device)] = (status, int(at), float(low), float(high), float(avg))
        write_host_tree(
            tmp_path, host.instance_id, power, dict.fromkeys(power, ""), {n: dict(c) for n, c in sysfs.counters.items()}
        )
        assert sample_sysfs(tmp_path) == line
    assert power[0][0] == "POWER_STATUS_VALID" and 50 < power[0][4] < 80  # minute 0-59: compile, warmup, steady


def test_efa_link_errors_are_at_the_ground_truth_port_only_and_only_while_training():
    hosts = fleet_hosts(GEN2, 0, "efa-link", 1.0, ultraservers=2)
    fault_host, fault_chip = fault_site(GEN2)
    bad = (1, fault_host, efa_devices(hosts[0])[fault_chip])
    seen = {}
    for host in hosts:
        for tick in range(CHECKPOINT_EVERY_TICKS + 5):
            for device, counts in efa_increments(host, tick).items():
                errors = {k: v for k, v in counts.items() if k in ERRORS and v}
                if errors:
                    seen.setdefault((host.ultraserver, host.host_index, device), {})[tick] = errors
    assert set(seen) == {bad}
    checkpoint = range(CHECKPOINT_EVERY_TICKS, CHECKPOINT_EVERY_TICKS + 3)  # no traffic, no retransmits
    assert sorted(seen[bad]) == [t for t in range(EFA_LINK_TICK, CHECKPOINT_EVERY_TICKS + 5) if t not in checkpoint]
    assert all(errors == EFA_LINK_ERRORS_PER_TICK for errors in seen[bad].values())


def test_efa_bytes_carry_the_all_reduce_between_ultraservers_and_are_idle_otherwise():
    def host_bytes(ultraservers: int, tick: int) -> int:
        host = fleet_hosts(GEN2, 0, "healthy", 1.0, ultraservers=ultraservers)[0]
        return sum(c["tx_bytes"] for c in efa_increments(host, tick).values())

    idle = EFA_IDLE_BYTES_PER_TICK * GEN2.chips_per_host
    assert host_bytes(1, 25) == idle  # one UltraServer: nothing crosses EFA
    assert host_bytes(2, 5) == idle and host_bytes(2, 61) == idle  # compiling, checkpointing
    share = GRADIENT_BYTES // GEN2.hosts  # 2 (N - 1) / N = 1 at N = 2
    assert 0.98 * share < host_bytes(2, 25) - idle < 1.02 * share


def test_ultraserver_zero_of_a_fleet_is_the_fleet_of_one_and_the_others_are_new_hosts_and_ranks():
    one = fleet_hosts(GEN2, 0, "hang", 1.0)
    two = fleet_hosts(GEN2, 0, "hang", 1.0, ultraservers=2)
    assert [h.report_line(31) for h in one] == [h.report_line(31) for h in two[: GEN2.hosts]]
    infos = [h.report(0)["instance_info"] for h in two]
    assert len({i["instance_id"] for i in infos}) == len({i["instance_name"] for i in infos}) == 2 * GEN2.hosts
    assert len({i["ultraserver_id"] for i in infos}) == 2
    assert infos[GEN2.hosts + 7]["instance_name"] == "sim-trn3-gen2-us-1-07"
    starts = [e for h in two for c in range(4) for k in range(4) for e in rank_events(h, c, k, 0, 0.0)]
    starts = [e for e in starts if e["event"] == "run_start"]
    assert sorted(e["rank"] for e in starts) == list(range(2 * 576))
    assert {e["world_size"] for e in starts} == {1152} and {e["parallel"]["dp"] for e in starts} == {72}
    # the hang's suspect stays the one rank of UltraServer 0 (rank 120 in its dataloader)
    late = [e for h in two for c in range(4) for k in range(4) for e in rank_events(h, c, k, 40, 0.0)]
    assert {e["rank"] for e in late if e.get("region") == "dataloader"} == {120}


def test_efa_link_needs_two_ultraservers_and_an_ultraserver_topology():
    assert fleet_ultraservers(GEN2, "efa-link", None) == 2 and fleet_ultraservers(GEN2, "healthy", None) == 1
    with pytest.raises(ValueError, match="needs --ultraservers 2 or more"):
        fleet_ultraservers(GEN2, "efa-link", 1)
    with pytest.raises(ValueError, match="one server, not an UltraServer"):
        fleet_ultraservers(get_topology("trn2.48xlarge"), "healthy", 2)
    result = subprocess.run(
        [sys.executable, "-m", "trnwatch", "demo", "--headless", "--scenario", "efa-link", "--ultraservers", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "efa-link needs --ultraservers 2 or more" in result.stderr


@pytest.mark.slow
def test_demo_efa_link_receipt_names_the_bad_host_and_its_ultraserver(tmp_path):
    """`trnwatch demo --headless --scenario efa-link` (two UltraServers by default) as a real child,
    run until its own --alert-cmd has said the EFA incident opened, then Ctrl-C (a loaded machine
    can outrun a bare --duration): the receipt's incident and EFA rollups name the ground-truth site.
    On trn3-gen1-us (4 hosts x 16 chips an UltraServer), which a loaded machine keeps on time."""
    path, said = tmp_path / "efa.json", tmp_path / "alerts"
    command = [sys.executable, "-m", "trnwatch", "demo", "--headless", "--scenario", "efa-link"]
    command += [
        "--topology",
        GEN1.name,
        "--duration",
        "600",
        "--receipt",
        str(path),
        "--alert-cmd",
        f'echo "$TRNWATCH_KIND" >> {said}',
    ]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(
            lambda: said.exists() and "efa-errors" in said.read_text() or proc.poll() is not None, "efa alert", 300
        )
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=300) == 0, proc.stderr.read()[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    r = json.loads(path.read_text())
    hosts = fleet_hosts(GEN1, 0, "efa-link", 1.0, ultraservers=2)
    bad = hosts[GEN1.hosts + fault_site(GEN1)[0]]
    bad_us = bad.report(0)["instance_info"]["ultraserver_id"]
    [incident] = [i for i in r["incidents"] if i["kind"] == "efa-errors"]
    assert (incident["site"]["host"], incident["site"]["ultraserver"]) == (bad.instance_name, bad_us)
    assert r["boundary"]["ultraservers"] == 2
    rollups = {u["id"]: u["efa"] for u in r["ultraservers"]}
    good_us = next(u for u in rollups if u != bad_us)
    assert rollups[bad_us]["errors_per_s"] > 0 and rollups[good_us]["errors_per_s"] == 0
    assert rollups[good_us]["tx_bytes_per_s"] > GRADIENT_BYTES / GEN1.hosts  # the all-reduce crosses EFA
    assert "EFA" in path.with_suffix(".md").read_text()
