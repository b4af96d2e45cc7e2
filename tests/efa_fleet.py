"""The cluster view's fleet (tests/tui_fleet.py) with each host's sysfs sampled twice, as
collectors/sysfs_reader.py reads a tree written by workloads/sim/sysfs_tree.py: every host of the
three UltraServers moves EFA traffic, host 7 of the second one also retransmits (a bad EFA link),
the lost host of the third gives no sample (its sysfs went with it), and the server in no
UltraServer has no sysfs source at all."""

import functools
from pathlib import Path

from trnwatch.collectors.lines import Line
from trnwatch.collectors.sysfs_reader import sample_sysfs
from trnwatch.ledger.ledger import Ledger
from trnwatch.tui.app import TrnwatchApp
from trnwatch.workloads.sim.sysfs_tree import write_host_tree
from tests.tui_fleet import CLUSTER_LAST_TICK, cluster_hosts, cluster_report_lines, now_at, received_s

BAD_LINK = (1, 7)  # (UltraServer seed, host index): retransmits RETRANS_PER_S packets a second
RETRANS_PER_S = 400
POWER = ("POWER_STATUS_VALID", 1_800_000_000, 41.25, 78.90, 63.12)


def efa_counters(seed: int, host_index: int, tick: int) -> dict[str, int]:
    """Cumulative counters at `tick`: about 1.5 GB/s out and in, a little more for later hosts."""
    rate = 1_500_000_000 + 10_000_000 * host_index
    bad = (seed, host_index) == BAD_LINK
    return {
        "tx_bytes": rate * tick,
        "rx_bytes": (rate - 50_000_000) * tick,
        "rx_drops": 0,
        "retrans_pkts": RETRANS_PER_S * tick if bad else 0,
    }


@functools.cache
def efa_cluster_ledger(root: Path) -> Ledger:
    """The cluster fleet's reports, and two sysfs samples of each UltraServer host still reporting."""
    ledger = Ledger("simulated")
    for line in cluster_report_lines():
        ledger.ingest(line)
    sampled = [h for h in cluster_hosts() if h.topology.is_ultraserver]
    for tick in (CLUSTER_LAST_TICK - 1, CLUSTER_LAST_TICK):
        for host in (h for h in sampled if h.alive(tick)):
            tree = root / f"us{host.seed}-{host.host_index:02d}"
            efa = {"rdmap0": efa_counters(host.seed, host.host_index, tick)}
            write_host_tree(tree, host.instance_id, {0: POWER}, {0: ""}, efa)
            source = f"sysfs:us{host.seed}-host-{host.host_index:02d}"
            ledger.ingest(Line(source, "sysfs", received_s(tick, host.host_index) + 0.2, sample_sysfs(tree)))
    return ledger


def make_efa_cluster_app(root: Path, **kwargs) -> TrnwatchApp:
    now_s = now_at(CLUSTER_LAST_TICK)
    return TrnwatchApp(efa_cluster_ledger(root), clock=lambda: now_s, theme="dark", **kwargs)
