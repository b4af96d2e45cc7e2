"""EFA (between UltraServers) on the UltraServer and cluster screens (issue 23 item 2): one rollup
in the read model (`ReadModel.efa`, `efa_cluster`) that the screens and the receipt both read,
"n/m hosts" with every figure, "unavailable" rather than a zero, nothing when sysfs is not
sampled, every line whole at 80 and 40 columns. The fleet: tests/efa_fleet.py."""

import pytest

from trnwatch.collectors.lines import Line
from trnwatch.collectors.sysfs_reader import sample_sysfs
from trnwatch.ledger.ledger import Ledger
from trnwatch.ledger.receipt import build_receipt
from trnwatch.themes.palettes import PALETTES
from trnwatch.tui.cluster_view import ClusterView
from trnwatch.tui.efa_lines import LABEL
from trnwatch.tui.scope import Frame, Selection
from trnwatch.tui.ultraserver_view import UltraServerView
from trnwatch.workloads.sim.sysfs_tree import write_host_tree
from tests.efa_fleet import BAD_LINK, RETRANS_PER_S, efa_cluster_ledger, make_efa_cluster_app
from tests.tui_fleet import CLUSTER_LAST_TICK, cluster_hosts, cluster_ledger, now_at

NOW_S = now_at(CLUSTER_LAST_TICK)


@pytest.fixture(scope="module")
def efa_ledger(tmp_path_factory) -> Ledger:
    return efa_cluster_ledger(tmp_path_factory.mktemp("sysfs"))


def _bad_host():
    return next(h for h in cluster_hosts() if (h.seed, h.host_index) == BAD_LINK)


def _screen(view, read, scope: str, group: str, width: int) -> tuple[list[str], list[str]]:
    screen = view.lines(Frame(read, None, PALETTES["dark"], Selection(scope=scope, group=group), width))
    return [line.plain for line in screen.summary], [line.plain for line in screen.detail + screen.side]


def _efa_block(lines: list[str]) -> list[str]:
    """The lines from the first EFA label to the end (the detail's EFA lines come last)."""
    start = next(i for i, line in enumerate(lines) if line.startswith(LABEL))
    return lines[start:]


def test_the_receipt_reads_the_screens_efa_rollup(efa_ledger):
    read = efa_ledger.read(efa_ledger.latest_s())
    r = build_receipt(efa_ledger, "eof", written_at_s=NOW_S)
    assert r.efa is not None and read.efa_cluster is not None
    assert (r.efa.hosts, r.efa.members) == (read.efa_cluster.hosts, read.efa_cluster.members) == (107, 109)
    assert r.efa.tx_bytes_per_s == round(read.efa_cluster.tx_bytes_per_s, 3)
    assert (r.efa.worst_host, r.efa.worst_errors_per_s) == (_bad_host().instance_id, RETRANS_PER_S)
    for u in r.ultraservers:
        e = read.efa(u.id)
        assert u.efa is not None and e is not None
        assert (u.efa.hosts, u.efa.members, u.efa.errors_per_s) == (e.hosts, e.members, round(e.errors_per_s, 3))
    assert sorted((u.efa.hosts, u.efa.members) for u in r.ultraservers if u.efa) == [(35, 36), (36, 36), (36, 36)]


@pytest.mark.parametrize("width", [80, 40])
def test_cluster_screen_shows_efa_per_ultraserver_whole_at_any_width(efa_ledger, width):
    read = efa_ledger.read(NOW_S)
    summary, detail = _screen(ClusterView(), read, "cluster", read.groups[0], width)
    block = (_efa_block(summary)[:2] if width >= 80 else []) + _efa_block(detail)
    assert all(len(line) <= width for line in block), block
    text = "\n".join(block)
    assert "107/109 hosts" in text  # the cluster: the lost host and the server without sysfs left out
    assert "35/36 hosts" in text  # the UltraServer with the lost host says it
    assert "(no UltraServer)  unavailable  0/1 host" in text  # never a zero
    assert f"worst {_bad_host().instance_id} (400/s)" in text
    assert text.count("errors 400/s") == 2  # the bad link's UltraServer and the cluster


@pytest.mark.parametrize("width", [80, 40])
def test_ultraserver_screen_shows_its_efa_its_hosts_spread_and_the_worst_host(efa_ledger, width):
    read = efa_ledger.read(NOW_S)
    group = efa_ledger.ultraserver_of(efa_ledger.hosts[_bad_host().instance_id])
    summary, detail = _screen(UltraServerView(), read, "ultraserver", group, width)
    block = (_efa_block(summary)[:2] if width >= 80 else []) + _efa_block(detail)
    assert all(len(line) <= width for line in block), block
    text = " ".join(line.strip() for line in block)
    assert "36/36 hosts tx/rx 482.40/468.00 Gb/s errors 400/s worst host 7 (400/s)" in text.replace("  ", " ")
    assert "per host" in text and "errors 0.0/s–400/s" in text
    assert "tx 12.00 Gb/s–14.80 Gb/s" in text  # hosts 0 and 35: 1.50 and 1.85 GB/s


def test_without_sysfs_neither_screen_says_efa():
    read = cluster_ledger().read(NOW_S)
    for view, scope in ((ClusterView(), "cluster"), (UltraServerView(), "ultraserver")):
        summary, detail = _screen(view, read, scope, read.groups[0], 80)
        assert not [line for line in summary + detail if "EFA" in line]
    assert read.efa_cluster is None and read.efa(read.groups[0]) is None


def test_one_sample_or_a_stale_one_is_unavailable_not_zero(tmp_path):
    """Rates need two samples; a host whose sysfs stopped is left out of the sums."""
    ledger = Ledger("live", ultraservers={"i-0": "us1"})
    write_host_tree(tmp_path, "i-0", {}, {}, {"rdmap0": {"tx_bytes": 1 << 30}})
    ledger.ingest(Line("sysfs-0", "sysfs", 100.0, sample_sysfs(tmp_path)))
    e = ledger.read(100.5).efa_cluster
    assert e is not None and (e.hosts, e.members, e.tx_bytes_per_s) == (0, 1, None)
    write_host_tree(tmp_path, "i-0", {}, {}, {"rdmap0": {"tx_bytes": 2 << 30}})
    ledger.ingest(Line("sysfs-0", "sysfs", 101.0, sample_sysfs(tmp_path)))
    assert ledger.read(101.5).efa_cluster.tx_bytes_per_s == 1 << 30  # type: ignore[union-attr]
    stale = ledger.read(101.0 + 5.1).efa_cluster  # 5 s without a sample (at least 3 periods)
    assert stale is not None and (stale.hosts, stale.members, stale.tx_bytes_per_s) == (0, 1, None)


@pytest.fixture
def colour_terminal(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)


@pytest.mark.parametrize("size", [(80, 24), (40, 10)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_cluster_view_with_efa(snap_compare, colour_terminal, tmp_path, size):
    assert snap_compare(make_efa_cluster_app(tmp_path), press=("l", "down"), terminal_size=size)


@pytest.mark.parametrize("size", [(80, 24), (40, 10)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_ultraserver_view_of_the_bad_efa_link(snap_compare, colour_terminal, tmp_path, size):
    assert snap_compare(make_efa_cluster_app(tmp_path), press=("l", "down", "enter"), terminal_size=size)
