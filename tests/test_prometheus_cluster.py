"""The cluster rollup above the UltraServer (what Prometheus server mode feeds at cluster scale):
rows per UltraServer over fresh hosts, configured members that never reported, unplaced hosts."""

import pytest

from trnwatch.collectors.lines import Line
from trnwatch.ledger.ledger import Ledger
from tests import reports as R

GIB = 1 << 30


def feed(ledger: Ledger, instance_id: str, t: float, util: float = 80.0, tensors: int = GIB, ecc: int = 0) -> None:
    runtime = R.runtime(
        1,
        "rank",
        [0, 1, 2, 3],
        util={c: util for c in range(4)},
        memory={c: R.core_memory(tensors=tensors) for c in range(4)},
    )
    report = R.report(
        [runtime],
        hardware=R.hardware_trn3(chips=2),
        system_data=R.system(chips=2, ecc={0: ecc}),
        instance_info=R.instance(instance_id=instance_id),
    )
    ledger.ingest(Line(instance_id, "neuron-monitor", t, R.line(report)))


def test_cluster_rows_count_fresh_hosts_configured_members_and_unplaced_hosts():
    ledger = Ledger("live", ultraservers={"i-a1": "us-a", "i-a2": "us-a", "i-a3": "us-a", "i-b1": "us-b"})
    for t in (100.0, 101.0):
        feed(ledger, "i-a1", t, util=80.0)
        feed(ledger, "i-b1", t, util=40.0, ecc=2 if t == 100.0 else 0)  # per-period counts: 2 then 0
        feed(ledger, "i-loose", t, util=10.0)
    feed(ledger, "i-a2", 10.0)  # reported long ago: stale now
    # i-a3 is configured but never reported
    cluster = ledger.read(101.5).cluster
    a, b = cluster.ultraservers
    assert (a.ultraserver, a.hosts_total, a.hosts_fresh, a.chips) == ("us-a", 3, 1, 2)
    assert (b.ultraserver, b.hosts_total, b.hosts_fresh, b.chips, b.chips_with_ecc) == ("us-b", 1, 1, 2, 1)
    assert a.hbm_used_bytes == 4 * sum(R.core_memory().values())  # cores 0-3 are chip 0; chip 1 holds nothing
    assert a.util_mean_pct == pytest.approx(40.0)  # chip 0 at 80, chip 1 idle at 0
    assert cluster.unplaced.hosts_total == 1 and cluster.unplaced.chips == 2
    assert (cluster.hosts_total, cluster.hosts_fresh, cluster.chips) == (5, 3, 6)
    assert cluster.hbm_capacity_bytes == 6 * 144 * GIB
    assert cluster.util_mean_pct == pytest.approx((80 + 0 + 40 + 0 + 10 + 0) / 6)
    assert cluster.chips_with_ecc == 1
    assert cluster.hbm_used_bytes == a.hbm_used_bytes + b.hbm_used_bytes + cluster.unplaced.hbm_used_bytes


def test_ultraserver_with_no_host_reporting_still_has_a_row():
    ledger = Ledger("live", ultraservers={"trn3-001": "us-down", "trn3-002": "us-down"})
    cluster = ledger.read(0.0).cluster
    (row,) = cluster.ultraservers
    assert (row.ultraserver, row.hosts_total, row.hosts_fresh, row.chips, row.util_mean_pct) == (
        "us-down",
        2,
        0,
        0,
        None,
    )
    assert cluster.unplaced is None and cluster.hbm_capacity_bytes == 0


def test_reported_ultraserver_ids_form_rows_without_configuration():
    ledger = Ledger("live")
    report = R.report([], hardware=R.hardware_trn3(chips=4), instance_info=R.instance("i-1", ultraserver_id="us-0abc"))
    ledger.ingest(Line("h1", "neuron-monitor", 5.0, R.line(report)))
    (row,) = ledger.read(5.0).cluster.ultraservers
    assert (row.ultraserver, row.hosts_fresh, row.chips, row.util_mean_pct, row.hbm_used_bytes) == (
        "us-0abc",
        1,
        4,
        0.0,
        0,
    )


def test_an_ultraserver_rollup_counts_its_configured_members_that_never_reported_as_the_cluster_row_does():
    ledger = Ledger("live", ultraservers={"i-a1": "us-a", "i-a2": "us-a", "i-a3": "us-a"})
    feed(ledger, "i-a1", 100.0)
    members = ledger.ultraservers()["us-a"]
    alone = ledger.read(100.5).ultraserver("us-a", members)
    (row,) = ledger.read(100.5).cluster.ultraservers
    assert (alone.hosts_total, alone.hosts_silent, alone.hosts_fresh) == (3, 2, 1)
    assert alone == row
