"""sysfs sampling: Neuron device power and health, EFA counters as rates, on fake trees laid out as
the documents give them (workloads/sim/sysfs_tree.py names each source), with counters that move."""

import json
import threading

import pytest

from trnwatch.collectors.lines import Line
from trnwatch.collectors.sysfs_reader import sample_sysfs
from trnwatch.collectors.sysfs_sample import decode_sysfs, parse_power
from trnwatch.ledger.findings import finding_text
from trnwatch.ledger.ledger import Ledger
from trnwatch.ledger.receipt import build_receipt
from trnwatch.workloads.sim.sysfs_tree import write_host_tree
from tests import reports

T0 = 1_764_700_000.0
POWER = ("POWER_STATUS_VALID", 1760913720, 41.25, 78.90, 63.12)  # the reference's example line


def _efa(tx: int, rx: int, errors: int = 0) -> dict[str, int]:
    return {
        "tx_bytes": tx,
        "rx_bytes": rx,
        "rx_drops": 0,
        "retrans_pkts": errors,
        "retrans_timeout_events": 0,
        "unresponsive_remote_events": 0,
        "impaired_remote_conn_events": 0,
    }


@pytest.mark.parametrize("moved", [False, True])
def test_sample_finds_nodes_by_leaf_name_and_leaves_absent_ones_out(tmp_path, moved):
    write_host_tree(
        tmp_path, "i-0a", {0: POWER, 1: ("POWER_STATUS_NO_DATA", 0, 0, 0, 0)}, {0: "", 1: "hbm"}, {}, moved=moved
    )
    write_host_tree(tmp_path, None, {}, {2: ""}, {"rdmap16s27": _efa(1, 2), "rdmap32s27": {"tx_bytes": 5}})
    sample = decode_sysfs(sample_sysfs(tmp_path))
    assert sample.instance_id == "i-0a"
    assert sample.devices[0].power == parse_power("POWER_STATUS_VALID,1760913720,41.25,78.90,63.12")
    assert (sample.devices[0].power.avg_pct, sample.devices[0].unhealthy_components) == (63.12, "")
    assert sample.devices[1].power.status == "POWER_STATUS_NO_DATA" and sample.devices[1].unhealthy_components == "hbm"
    assert sample.devices[2].power is None  # absent: unavailable, not zero
    assert sample.efa == {"rdmap16s27:1": _efa(1, 2), "rdmap32s27:1": {"tx_bytes": 5}}


def test_a_root_without_any_node_gives_an_empty_sample(tmp_path):
    sample = decode_sysfs(sample_sysfs(tmp_path))
    assert (sample.instance_id, sample.devices, sample.efa) == (None, {}, {})


def test_bad_lines_are_rejected_with_a_reason():
    with pytest.raises(ValueError, match="not JSON"):
        decode_sysfs("{")
    with pytest.raises(ValueError, match="not a trnwatch.sysfs/1 line"):
        decode_sysfs(json.dumps({"v": "other"}))
    odd = decode_sysfs(
        json.dumps({"v": "trnwatch.sysfs/1", "devices": {"x": {}, "99999": {}}, "efa": {"p": {"tx_bytes": -1}}})
    )
    assert (odd.devices, odd.efa) == ({}, {"p": {}})


def _report(instance_id: str) -> str:
    return reports.line(reports.report([], instance_info=reports.instance(instance_id)))


def _fleet(tmp_path, bad_host: int, hosts: int = 4) -> Ledger:
    """`hosts` hosts with their reports and two sysfs samples 2 s apart: every host moves 2 GB of
    EFA traffic a second, the bad one also retransmits 500 packets a second."""
    ledger = Ledger("live")
    for h in range(hosts):
        ledger.ingest(Line(f"host-{h}", "neuron-monitor", T0, _report(f"i-{h}")))
        for k, t in enumerate((T0, T0 + 2)):
            root = tmp_path / f"h{h}-{k}"
            errors = 1000 * k if h == bad_host else 0
            write_host_tree(
                root, f"i-{h}", {0: POWER}, {0: "" if h else "hbm"}, {"rdmap0": _efa(4 * k << 30, 0, errors)}
            )
            ledger.ingest(Line(f"sysfs-{h}", "sysfs", t, sample_sysfs(root)))
    return ledger


def test_efa_rates_and_findings_name_the_outlier_host_and_the_unhealthy_device(tmp_path):
    ledger = _fleet(tmp_path, bad_host=2)
    assert ledger.sysfs["i-2"].efa_rates_per_s["tx_bytes"] == 2 * (1 << 30)
    assert ledger.sysfs["i-2"].efa_error_rate_per_s == 500.0 and ledger.sysfs["i-1"].efa_error_rate_per_s == 0.0
    found = {(f.kind, f.site.host_id, f.site.chip) for f in list(ledger.read(T0 + 3).findings)}
    assert ("efa-errors", "i-2", None) in found
    assert ("device-unhealthy", "i-0", 0) in found
    assert not {k for k in found if k[0] == "efa-errors" and k[1] != "i-2"}
    text = [finding_text(f) for f in list(ledger.read(T0 + 3).findings) if f.kind == "device-unhealthy"]
    assert text == ["UNHEALTHY host-0/0 · unhealthy_components: hbm (sysfs)"]  # named by its stream label


def test_receipt_carries_each_hosts_sysfs_figures(tmp_path):
    ledger = _fleet(tmp_path, bad_host=1)
    r = build_receipt(ledger, "eof", written_at_s=T0 + 5)
    entry = next(e for e in r.sysfs if e.host == "i-1")
    assert (entry.samples, entry.efa_ports, entry.efa_rates_per_s["retrans_pkts"]) == (2, 1, 500.0)
    [device] = entry.devices
    assert (device.device, device.power_status, device.power_avg_pct, device.unhealthy_components) == (
        0,
        "POWER_STATUS_VALID",
        63.12,
        "",
    )
    assert "retrans_timeout_events" in entry.efa_rates_per_s and "rdma_write_bytes" not in entry.efa_rates_per_s


def test_a_counter_that_went_back_gives_no_rate(tmp_path):
    ledger = Ledger("live")
    for k, tx in enumerate((100, 10)):
        write_host_tree(tmp_path, "i-0", {}, {}, {"rdmap0": {"tx_bytes": tx}})
        ledger.ingest(Line("sysfs", "sysfs", T0 + k, sample_sysfs(tmp_path)))
    assert ledger.sysfs["i-0"].efa_rates_per_s == {}


def test_watch_samples_a_tree_whose_counters_move(tmp_path):
    """`watch --stdin --sysfs-root` beside a simulated host's reports, while a writer moves the
    tree's EFA counters (1 MiB and one retransmit per 50 ms): the receipt's rates are positive,
    joined to the simulated host by its instance id."""
    from trnwatch.workloads.sim.fleet import SimHost
    from trnwatch.workloads.sim.topology import get_topology
    from tests.test_kernel_log_cli import watch_sim

    host = SimHost(get_topology("trn3-gen2-us"), 0, 0, "healthy")
    stop = threading.Event()

    def move_counters() -> None:
        k = 0
        while not stop.is_set():
            write_host_tree(tmp_path, None, {}, {}, {"rdmap0": _efa(k << 20, k << 20, k)})
            k += 1
            stop.wait(0.05)

    write_host_tree(tmp_path, host.instance_id, {0: POWER}, {0: ""}, {"rdmap0": _efa(0, 0)})
    writer = threading.Thread(target=move_counters, daemon=True)
    writer.start()
    receipt = tmp_path / "r.json"
    try:
        watch = watch_sim(
            ["--sysfs-root", str(tmp_path), "--period", "0.2", "--duration", "2", "--receipt", str(receipt)],
            ["--no-wait", "--count", "3"],
        )
    finally:
        stop.set()
        writer.join(5)
    assert watch.returncode == 0, watch.stderr
    r = json.loads(receipt.read_text())
    [entry] = r["sysfs"]
    assert entry["host"] == host.instance_id and entry["host"] in {h["host"] for h in r["hosts"]}
    assert (
        entry["samples"] >= 2
        and entry["efa_rates_per_s"]["tx_bytes"] > 0
        and entry["efa_rates_per_s"]["retrans_pkts"] > 0
    )
    assert entry["devices"][0]["power_avg_pct"] == 63.12


def test_host_view_shows_efa_rates_and_device_health_with_unavailable_figures_said(tmp_path):
    from trnwatch.themes.palettes import PALETTES
    from trnwatch.tui.host_model import host_model
    from trnwatch.tui.host_view import HostView
    from trnwatch.tui.scope import Frame, Selection

    ledger = _fleet(tmp_path, bad_host=0, hosts=1)
    # A third sample without the impaired counter: its rate is unavailable, not zero.
    write_host_tree(tmp_path / "h0-2", "i-0", {0: POWER}, {0: "hbm"}, {"rdmap0": {"tx_bytes": 8 << 30, "rx_drops": 0}})
    ledger.ingest(Line("sysfs-0", "sysfs", T0 + 4, sample_sysfs(tmp_path / "h0-2")))
    model = host_model(ledger.read(T0 + 4), "i-0")
    assert model is not None
    frame = Frame(ledger.read(T0 + 4), None, PALETTES["dark"], Selection(scope="host", host_id="i-0"), 120)
    text = "\n".join(line.plain for line in HostView()._detail(model, frame))
    # 4 GiB more in 2 s: 2 GiB/s = 17.18 Gb/s
    assert "EFA (between UltraServers) tx 17.18 Gb/s  rx n/a  drops 0/s  retrans n/a" in text
    assert "impaired n/a" in text and "chip 0   power 63.1% (POWER_STATUS_VALID)  unhealthy: hbm" in text


def test_efa_is_rolled_up_per_ultraserver_and_for_the_cluster(tmp_path):
    """Four hosts, two per UltraServer as their sysfs says; each moves 2 GiB/s, host 3 also
    retransmits 500 packets/s: each UltraServer sums its members, the cluster all of them."""
    from trnwatch.ledger.receipt_markdown import render_markdown

    ledger = Ledger("live")
    for h in range(4):
        ledger.ingest(Line(f"host-{h}", "neuron-monitor", T0, _report(f"i-{h}")))
        for k, t in enumerate((T0, T0 + 2)):
            root = tmp_path / f"h{h}-{k}"
            errors = 1000 * k if h == 3 else 0
            tree_efa = {"rdmap0": _efa(4 * k << 30, 2 * k << 30, errors)}
            write_host_tree(root, f"i-{h}", {0: POWER}, {0: ""}, tree_efa, ultraserver=(0xA if h < 2 else 0xB, h % 2))
            ledger.ingest(Line(f"sysfs-{h}", "sysfs", t, sample_sysfs(root)))
    r = build_receipt(ledger, "eof", written_at_s=T0 + 3)
    efa = {u.id: u.efa for u in r.ultraservers}
    gib = float(1 << 30)
    assert efa["000000000000000a"] is not None and efa["000000000000000b"] is not None
    assert (efa["000000000000000a"].hosts, efa["000000000000000a"].tx_bytes_per_s) == (2, 4 * gib)
    assert (efa["000000000000000a"].rx_bytes_per_s, efa["000000000000000a"].errors_per_s) == (2 * gib, 0.0)
    assert efa["000000000000000b"].errors_per_s == 500.0
    assert r.efa is not None and (r.efa.hosts, r.efa.tx_bytes_per_s, r.efa.errors_per_s) == (4, 8 * gib, 500.0)
    text = render_markdown(r)
    # 4 GiB/s = 34.36 Gb/s per UltraServer; 8 GiB/s = 68.72 Gb/s for the cluster.
    assert "| tx 34.36 Gb/s, rx 17.18 Gb/s, 500 errors/s over 2/2 hosts, most on i-3 (500/s) |" in text
    assert "| tx 34.36 Gb/s, rx 17.18 Gb/s, 0 errors/s over 2/2 hosts |" in text
    assert (
        "EFA (between UltraServers), cluster: tx 68.72 Gb/s, rx 34.36 Gb/s, 500 errors/s over 4/4 hosts, "
        "most on i-3 (500/s)." in text
    )


def test_without_sysfs_there_is_no_efa_figure_not_a_zero(tmp_path):
    ledger = Ledger("live", ultraservers={"i-0": "us1"})
    ledger.ingest(Line("host-0", "neuron-monitor", T0, _report("i-0")))
    r = build_receipt(ledger, "eof", written_at_s=T0 + 1)
    assert r.efa is None and [u.efa for u in r.ultraservers] == [None]


@pytest.mark.parametrize(
    "args, said",
    [
        (["--stdin", "--hosts", "h1"], "--hosts / --hosts-file go alone"),
        (["--hosts", "h1", "--hosts-file", "{hosts}"], "--hosts and --hosts-file: give one of them"),
        (["--stdin", "--remote-sysfs-command", "cat"], "--remote-sysfs-command goes with"),
    ],
)
def test_hosts_beside_another_device_source_are_refused_in_words(tmp_path, args, said):
    """`--hosts` / `--hosts-file` are the device source, or with `--scrape` the hosts whose sysfs is
    read over SSH; with any other device source they would be ignored, so they are refused."""
    import subprocess
    import sys

    hosts = tmp_path / "hosts"
    hosts.write_text("h1\n")
    run = subprocess.run(
        [sys.executable, "-m", "trnwatch", "watch", "--headless", *[a.format(hosts=hosts) for a in args]],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert run.returncode == 2 and said in run.stderr, run.stderr
