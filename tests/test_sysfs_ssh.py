"""Each host's sysfs read over the SSH fan-out (a real OpenSSH server on 127.0.0.1, tests/sshd.py)
beside `--scrape` of the simulator's exporters: the UltraServers the hosts' sysfs names are the
session's UltraServers, with no `--ultraservers` file (issue 23, done-when)."""

import json
import shlex
import sys

import pytest

from trnwatch.workloads.sim.exporter import FleetExporter, TickClock
from trnwatch.workloads.sim.fleet import SimHost
from trnwatch.workloads.sim.sysfs_tree import write_host_tree
from trnwatch.workloads.sim.topology import get_topology
from tests.sshd import MISSING, LocalSshd, alias
from tests.waiting import run_until_said

pytestmark = [pytest.mark.slow, pytest.mark.skipif(MISSING is not None, reason=MISSING or "")]

GEN2 = get_topology("trn3-gen2-us")
PERIOD_S = 0.3
POWER = ("POWER_STATUS_VALID", 1760913720, 41.25, 78.90, 63.12)
# Two UltraServers as the driver names them (pod serial numbers), two hosts in each.
SERIALS = {0: 0x3F2A9C0D11E4B7A5, 1: 0x3F2A9C0D11E4B7A5, 2: 0x51C0FFEE00000002, 3: 0x51C0FFEE00000002}


@pytest.fixture
def sshd(tmp_path):
    server = LocalSshd.start(tmp_path / "sshd", n_aliases=4)
    yield server
    server.stop()


def test_scrape_with_a_hosts_file_places_hosts_in_the_ultraservers_their_sysfs_names(tmp_path, sshd):
    hosts = [SimHost(GEN2, h, 1, "healthy", PERIOD_S) for h in range(4)]
    for h, host in enumerate(hosts):
        write_host_tree(
            tmp_path / f"sys-{h}", host.instance_id, {0: POWER}, {0: ""}, {}, ultraserver=(SERIALS[h], h % 2)
        )
    hosts_file = tmp_path / "hosts"
    hosts_file.write_text("".join(f"{alias(h)}\n" for h in range(4)))
    # Every alias reaches this machine, so each reads its own tree: the sampler module run there,
    # with the alias's TRNWATCH_SIM_HOST (tests/sshd.py) choosing the tree.
    reader = f"exec {shlex.quote(sys.executable)} -m trnwatch.collectors.sysfs_reader {tmp_path}/sys-$TRNWATCH_SIM_HOST {PERIOD_S}"
    exporter = FleetExporter(hosts, TickClock(PERIOD_S, start_tick=20)).start()
    receipt = tmp_path / "r.json"
    try:
        command = [sys.executable, "-m", "trnwatch", "watch", "--headless", "--period", str(PERIOD_S)]
        command += [arg for h in range(4) for arg in ("--scrape", exporter.url(h))]
        command += ["--hosts-file", str(hosts_file), "--ssh-config", str(sshd.ssh_config)]
        command += ["--remote-sysfs-command", reader, "--receipt", str(receipt)]
        result = run_until_said(command, ["8 of 8 up"])
    finally:
        exporter.close()
    assert result.returncode == 0, result.stderr
    r = json.loads(receipt.read_text())
    placed = {h["host"]: (h["ultraserver"], h["ultraserver_from"]) for h in r["hosts"]}
    assert placed == {host.instance_id: (f"{SERIALS[h]:016x}", "sysfs") for h, host in enumerate(hosts)}
    assert sorted((u["id"], u["hosts"], u["chips"]) for u in r["ultraservers"]) == [
        ("3f2a9c0d11e4b7a5", 2, 8),
        ("51c0ffee00000002", 2, 8),
    ]
    assert sorted(s["id"] for s in r["sources"] if s["kind"] == "sysfs") == [f"sysfs:{alias(h)}" for h in range(4)]


def test_the_default_remote_reader_is_the_sampler_sent_to_python3(tmp_path, sshd):
    """No `--remote-sysfs-command`: the sampler's own source runs under the remote `python3 -c`."""
    host = SimHost(GEN2, 0, 1, "healthy", PERIOD_S)
    write_host_tree(tmp_path / "sys", host.instance_id, {0: POWER}, {0: ""}, {}, ultraserver=(0, -1))
    receipt = tmp_path / "r.json"
    exporter = FleetExporter([host], TickClock(PERIOD_S, start_tick=20)).start()
    try:
        command = [sys.executable, "-m", "trnwatch", "watch", "--headless", "--period", str(PERIOD_S)]
        command += ["--scrape", exporter.url(0), "--hosts", alias(0), "--ssh-config", str(sshd.ssh_config)]
        command += ["--sysfs-root", str(tmp_path / "sys"), "--receipt", str(receipt)]
        result = run_until_said(command, ["2 of 2 up"])
    finally:
        exporter.close()
    assert result.returncode == 0, result.stderr
    r = json.loads(receipt.read_text())
    [h] = r["hosts"]
    assert (h["ultraserver"], h["ultraserver_from"], h["ultraserver_detail"]) == (None, "sysfs", "in no UltraServer")
    [entry] = r["sysfs"]
    assert entry["host"] == host.instance_id and entry["devices"][0]["power_avg_pct"] == 63.12
