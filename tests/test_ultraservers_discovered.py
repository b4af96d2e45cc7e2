"""UltraServer membership discovered (issue 23 item 3): sysfs class nodes, the Kubernetes node label,
Slurm's block topology, each answer in the receipt with where it came from, in the issue's order.
Scheduler outputs are printed by tests/scheduler_outputs.py (the public sources it names); sysfs
trees by workloads/sim/sysfs_tree.py."""

import json
import os
import stat
import subprocess
import sys

import pytest

from trnwatch.collectors.lines import Line
from trnwatch.collectors.sysfs_reader import sample_sysfs
from trnwatch.collectors.sysfs_sample import decode_sysfs
from trnwatch.collectors.topology import topology_line
from trnwatch.collectors.topology_source import kubernetes_members, slurm_members
from trnwatch.ledger.ledger import Ledger
from trnwatch.ledger.receipt import build_receipt
from trnwatch.ledger.receipt_markdown import render_markdown
from trnwatch.workloads.sim.sysfs_tree import write_host_tree, write_trn2_ultraserver_nodes, write_ultraserver_nodes
from tests import reports
from tests.scheduler_outputs import (
    K8sNode,
    kubectl_get_nodes_json,
    scontrol_block_line,
    scontrol_switch_line,
)

T0 = 1_764_700_000.0
NODES = [
    K8sNode("ip-10-0-1-17.us-east-2.compute.internal", "i-0a1b2c3d4e5f60001", "10.0.1.17", "us-7f3a"),
    K8sNode("ip-10-0-1-18.us-east-2.compute.internal", "i-0a1b2c3d4e5f60002", "10.0.1.18", "us-7f3a"),
    K8sNode("ip-10-0-2-40.us-east-2.compute.internal", "i-0a1b2c3d4e5f60003", "10.0.2.40", None),
]


def test_sysfs_class_nodes_say_member_none_or_busy_found_by_leaf_name(tmp_path):
    write_host_tree(tmp_path / "a", "i-a", {}, {}, {}, ultraserver=(0x3F2A9C0D11E4B7A5, 2))
    write_host_tree(tmp_path / "b", "i-b", {}, {}, {}, ultraserver=(0, -1))
    write_ultraserver_nodes(tmp_path / "c", "0000000000000000", "busy", "busy")
    # A node moved one level deeper (driver 2.31 moved nodes; new paths not published): found by leaf name.
    write_ultraserver_nodes(tmp_path / "d" / "class/neuron_device" / "pod", "00000000000000c1", "1", "1,2,4")
    said = {k: decode_sysfs(sample_sysfs(tmp_path / k)).ultraserver for k in "abcde"}
    assert said["a"] is not None and said["a"].membership == ("3f2a9c0d11e4b7a5", "member", "node 2")
    assert said["a"].node_id == "2" and said["a"].ultraserver_mode == "1,2,4"
    assert said["b"] is not None and said["b"].membership == (None, "none", "")
    assert said["c"] is not None and said["c"].membership == (None, "busy", "")
    assert said["d"] is not None and said["d"].membership == ("00000000000000c1", "member", "node 1")
    assert said["e"] is None  # no class directory: absent, nothing said


def test_trn2_class_nodes_place_a_host_in_its_4_node_ultraserver_else_its_2_node_pair(tmp_path):
    """Trn2 UltraServers (trn2u) say it per mode, `server_id_4`/`node_id_4` and `server_id_2`/
    `node_id_2` (aws-neuron-driver@fca19f7 `neuron_cdev.c`, `v3/neuron_pelect.c`, written by
    `write_trn2_ultraserver_nodes` as the driver's show functions would): the 4-node UltraServer
    first (in it, nodes 1 and 3 have another `server_id_2`: their pair's), else the 2-node pair."""
    write_trn2_ultraserver_nodes(tmp_path / "a", 0x5A0C, 4, 3)
    write_trn2_ultraserver_nodes(tmp_path / "b", 0x77, 2, 1, "2,4")
    write_trn2_ultraserver_nodes(tmp_path / "c", 0, 0, 0)  # an instance in no UltraServer
    write_trn2_ultraserver_nodes(tmp_path / "d", 0x5A0C, 4, 0, busy=True)
    # A node moved one level deeper (driver 2.31 moved nodes; new paths not published): found by leaf name.
    write_trn2_ultraserver_nodes(tmp_path / "e" / "class/neuron_device" / "pod", 0x5A0C, 4, 1)
    said = {k: decode_sysfs(sample_sysfs(tmp_path / k)).ultraserver for k in "abcde"}
    assert said["a"] is not None and said["a"].server_id_2 == "0000000000005a0b"  # node 3's pair
    assert said["a"].membership == ("0000000000005a0c", "member", "node 3 of 4 (server_id_4)")
    assert said["b"] is not None and said["b"].membership == ("0000000000000077", "member", "node 1 of 2 (server_id_2)")
    assert said["c"] is not None and said["c"].membership == (None, "none", "")
    assert said["d"] is not None and said["d"].membership == (None, "busy", "")
    assert said["e"] is not None and said["e"].membership == ("0000000000005a0c", "member", "node 1 of 4 (server_id_4)")


def test_trn2_hosts_are_placed_by_their_sysfs_in_the_receipt(tmp_path):
    """Four hosts of a 4-node Trn2 UltraServer, two of a 2-node one and one in none, placed by
    their own sysfs with no --ultraservers file: the receipt's hosts say `ultraserver_from` sysfs
    and where, and the UltraServers are the pods, not the pairs inside the 4-node one."""
    ledger = Ledger("live")
    pods = {f"i-x4-{n}": (0x5A0C, 4, n) for n in range(4)} | {f"i-x2-{n}": (0x77, 2, n) for n in range(2)}
    pods["i-single"] = (0, 0, 0)
    for host_id, (serial, count, node) in pods.items():
        _host(ledger, f"src-{host_id}", host_id)
        write_host_tree(tmp_path / host_id, host_id, {}, {}, {})
        write_trn2_ultraserver_nodes(tmp_path / host_id, serial, count, node)
        ledger.ingest(Line(f"sysfs-{host_id}", "sysfs", T0, sample_sysfs(tmp_path / host_id)))
    r = build_receipt(ledger, "eof", written_at_s=T0 + 1)
    placed = {h.host: (h.ultraserver, h.ultraserver_from, h.ultraserver_detail) for h in r.hosts}
    assert placed == {
        **{f"i-x4-{n}": ("0000000000005a0c", "sysfs", f"node {n} of 4 (server_id_4)") for n in range(4)},
        **{f"i-x2-{n}": ("0000000000000077", "sysfs", f"node {n} of 2 (server_id_2)") for n in range(2)},
        "i-single": (None, "sysfs", "in no UltraServer"),
    }
    assert {u.id: u.hosts for u in r.ultraservers} == {"0000000000005a0c": 4, "0000000000000077": 2}
    text = render_markdown(r)
    assert "1 host(s) in no UltraServer (1 by their sysfs, the rest placed by no source)" in text
    assert "UltraServer membership from: sysfs 6" in text


def test_kubectl_nodes_name_each_labelled_node_by_name_instance_id_and_dns():
    members, dropped = kubernetes_members(kubectl_get_nodes_json(NODES))
    assert dropped == 0
    assert members["i-0a1b2c3d4e5f60001"] == members["ip-10-0-1-18.us-east-2.compute.internal"] == "us-7f3a"
    assert members["10.0.1.18"] == "us-7f3a"  # its InternalIP: a hosts file may name hosts by address
    assert "i-0a1b2c3d4e5f60003" not in members and NODES[2].name not in members  # unlabelled: says nothing


def test_kubectl_output_that_is_not_a_node_list_is_refused_in_words():
    with pytest.raises(ValueError, match="not JSON"):
        kubernetes_members("error: You must be logged in to the server (Unauthorized)")
    with pytest.raises(ValueError, match="no 'items'"):
        kubernetes_members(json.dumps({"kind": "Status", "status": "Failure"}))


def test_scontrol_blocks_are_ultraservers_and_switches_and_aggregates_are_not():
    text = "\n".join(
        [
            scontrol_block_line("us01", 0, "trn3-[001-004]", 4),
            scontrol_block_line("us02", 1, "trn3-[005-007],trn3-009", 4),
            scontrol_block_line("us03", 2, None, 4),
            scontrol_block_line("pod0", 0, "trn3-[001-009]", 16, aggregated=True),
            scontrol_switch_line("s0", 0, 1, "trn3-[010-011]", None),
            scontrol_switch_line("s1", 1, 1, None, "s0"),
        ]
    )
    members, dropped = slurm_members(text)
    assert members == {f"trn3-{i:03d}": "us01" for i in range(1, 5)} | {f"trn3-{i:03d}": "us02" for i in (5, 6, 7, 9)}
    assert dropped == 0


def _host(ledger: Ledger, source: str, instance_id: str, reported: str | None = None) -> None:
    info = reports.instance(instance_id, ultraserver_id=reported)
    ledger.ingest(Line(source, "neuron-monitor", T0, reports.line(reports.report([], instance_info=info))))


def test_each_host_is_placed_by_the_first_source_that_answers_and_the_receipt_says_which(tmp_path):
    ledger = Ledger("live", ultraservers={"i-conf": "us-file"})
    hosts = {
        "i-conf": "us-report",  # the file overrides every other answer
        "i-0a1b2c3d4e5f60001": "us-report",  # Kubernetes before sysfs, Slurm and the report
        "i-sys": "us-report",  # sysfs before Slurm and the report
        "i-none": "us-report",  # sysfs says none: listed as in none, the report not used
        "i-slurm": "us-report",  # Slurm before the report
        "i-rep": "us-report",
        "i-nothing": None,
    }
    for host_id, reported in hosts.items():
        _host(ledger, f"src-{host_id}", host_id, reported)
    for host_id, serial, node in (
        ("i-conf", 0xA, 0),
        ("i-0a1b2c3d4e5f60001", 0xB, 1),
        ("i-sys", 0xC, 3),
        ("i-none", 0, -1),
    ):
        write_host_tree(tmp_path / host_id, host_id, {}, {}, {}, ultraserver=(serial, node))
        ledger.ingest(Line(f"sysfs-{host_id}", "sysfs", T0, sample_sysfs(tmp_path / host_id)))
    k8s, _ = kubernetes_members(kubectl_get_nodes_json(NODES))
    ledger.ingest(Line("topology:kubernetes", "topology", T0, topology_line("kubernetes", "kubectl", k8s, 0)))
    slurm = {"src-i-sys": "block-x", "src-i-slurm": "block-y", "src-i-conf": "block-z"}
    ledger.ingest(Line("topology:slurm", "topology", T0, topology_line("slurm", "scontrol", slurm, 0)))
    r = build_receipt(ledger, "eof", written_at_s=T0 + 1)
    placed = {h.host: (h.ultraserver, h.ultraserver_from, h.ultraserver_detail) for h in r.hosts}
    assert placed == {
        "i-conf": ("us-file", "config", ""),
        "i-0a1b2c3d4e5f60001": ("us-7f3a", "kubernetes", ""),
        "i-sys": ("000000000000000c", "sysfs", "node 3"),
        "i-none": (None, "sysfs", "in no UltraServer"),
        "i-slurm": ("block-y", "slurm", ""),
        "i-rep": ("us-report", "report", ""),
        "i-nothing": (None, None, ""),
    }
    assert {u.id for u in r.ultraservers} == {"us-file", "us-7f3a", "000000000000000c", "block-y", "us-report"}
    text = render_markdown(r)
    assert "2 host(s) in no UltraServer (1 by their sysfs, the rest placed by no source)" in text
    assert "UltraServer membership from: config 1, kubernetes 1, report 1, slurm 1, sysfs 1" in text


def _fake_tool(bin_dir, name: str, stdout: str, status: int = 0, stderr: str = "") -> None:
    """An executable on PATH that prints a recorded output, as the real tool would have."""
    (bin_dir / f"{name}.out").write_text(stdout)
    (bin_dir / f"{name}.err").write_text(stderr)
    script = bin_dir / name
    script.write_text(
        f"#!{sys.executable}\nimport sys\nsys.stdout.write(open({str(bin_dir / f'{name}.out')!r}).read())\n"
        f"sys.stderr.write(open({str(bin_dir / f'{name}.err')!r}).read())\nsys.exit({status})\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def _watch(tmp_path, bin_dir, args: list[str], host: str, status: int = 0) -> dict:
    """`watch --stdin --headless` on two reports of `host`, with `bin_dir` first on PATH."""
    from tests.test_kernel_log_cli import TRNWATCH

    receipt = tmp_path / "r.json"
    text = "".join(reports.line(reports.report([], instance_info=reports.instance(host))) + "\n" for _ in range(2))
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    run = subprocess.run(
        TRNWATCH + ["watch", "--stdin", "--headless", "--receipt", str(receipt), *args],
        input=text,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert run.returncode == status, run.stderr
    return json.loads(receipt.read_text())


def test_watch_asks_kubectl_and_places_the_host_by_its_instance_id(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fake_tool(bin_dir, "kubectl", kubectl_get_nodes_json(NODES))
    r = _watch(tmp_path, bin_dir, ["--ultraservers-from", "kubernetes"], NODES[1].instance_id)
    [host] = r["hosts"]
    assert (host["ultraserver"], host["ultraserver_from"]) == ("us-7f3a", "kubernetes")
    assert [u["id"] for u in r["ultraservers"]] == ["us-7f3a"]
    [source] = [s for s in r["sources"] if s["id"] == "topology:kubernetes"]
    assert source["reports"] == 1


def test_a_scheduler_that_fails_is_said_in_its_own_words_and_the_rest_goes_on(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    words = "slurm_load_topo error: Unable to contact slurm controller (connect failure)"
    _fake_tool(bin_dir, "scontrol", "", status=1, stderr=words + "\n")
    # A lost source at the end of the input: exit 1, as for any source (README, exit statuses).
    r = _watch(tmp_path, bin_dir, ["--ultraservers-from", "slurm"], "i-0a1b2c3d4e5f60001", status=1)
    [source] = [s for s in r["sources"] if s["id"] == "topology:slurm"]
    assert words in (source["end_error"] or "")
    [host] = r["hosts"]
    assert (host["ultraserver"], host["ultraserver_from"], host["chips"]) == (None, None, 2)  # the reports go on


def test_watch_reads_the_ultraserver_from_this_hosts_sysfs(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    write_host_tree(tmp_path / "sys", "i-0a1b2c3d4e5f60001", {}, {}, {}, ultraserver=(0x51, 0))
    r = _watch(
        tmp_path,
        bin_dir,
        ["--sysfs-root", str(tmp_path / "sys"), "--period", "0.2", "--duration", "2"],
        "i-0a1b2c3d4e5f60001",
    )
    [host] = r["hosts"]
    assert (host["ultraserver"], host["ultraserver_from"], host["ultraserver_detail"]) == (
        "0000000000000051",
        "sysfs",
        "node 0",
    )
