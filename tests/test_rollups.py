"""The rollups add up each host's `figures` (summed over its chips in its fold), not the chips
themselves: checked against the rollup's definition computed chip by chip, on the cluster
fleet (ECC events, a host that stopped reporting, a host in no UltraServer)."""

import pytest

from trnwatch.ledger.counters import CounterFamily
from trnwatch.ledger.ledger import Ledger
from trnwatch.ledger.rollups import Rollup, chip_ecc
from tests.tui_fleet import CLUSTER_LAST_TICK, cluster_hosts, cluster_ledger, cluster_line, now_at


def chip_by_chip(ledger: Ledger, hosts, now_s: float) -> dict:
    """The rollup's chip figures by their definition: over every chip of the fresh hosts."""
    freshness = ledger.read(now_s).freshness
    chips = [c for h in hosts if freshness[h.host_id] == "fresh" for c in h.chips]
    utils = [c.util_pct for c in chips if c.util_pct is not None]
    capacities = [c.hbm_capacity_bytes for c in chips]
    ecc = [chip_ecc(c) for c in chips]
    return dict(
        chips=len(chips),
        hbm_used_bytes=sum(c.hbm_bytes or 0 for c in chips),
        hbm_capacity_bytes=None if None in capacities else sum(capacities),
        util_mean_pct=pytest.approx(sum(utils) / len(utils), rel=1e-12) if utils else None,
        util_min_pct=min(utils) if utils else None,
        chips_idle=sum(1 for u in utils if u == 0.0),
        chips_with_ecc=sum(1 for e in ecc if e.had_ecc),
        chips_with_uncorrected_ecc=sum(1 for e in ecc if e.uncorrected),
    )


def figures(rollup: Rollup) -> dict:
    names = ("chips", "hbm_used_bytes", "hbm_capacity_bytes", "util_mean_pct", "util_min_pct", "chips_idle")
    return {name: getattr(rollup, name) for name in names + ("chips_with_ecc", "chips_with_uncorrected_ecc")}


@pytest.mark.parametrize("later_s", [0.0, 3.0, 30.0])
def test_cluster_rollup_from_host_figures_equals_the_chip_by_chip_definition(later_s):
    ledger = cluster_ledger()
    now_s = now_at(CLUSTER_LAST_TICK) + later_s  # 30 s later every host is stale: empty figures
    cluster = ledger.read(now_s).cluster
    placed = ledger.ultraservers()
    for row in cluster.ultraservers:
        assert figures(row) == chip_by_chip(ledger, placed[row.ultraserver], now_s), row.ultraserver
    assert cluster.unplaced is not None
    loose = [h for h in ledger.hosts.values() if ledger.ultraserver_of(h) is None]
    assert figures(cluster.unplaced) == chip_by_chip(ledger, loose, now_s)
    assert figures(cluster) == chip_by_chip(ledger, list(ledger.hosts.values()), now_s)
    if later_s == 0.0:  # the fleet's facts the comparison runs over
        assert cluster.chips_with_ecc > 0 and cluster.hosts_stale > 0 and cluster.chips < cluster.chips_total
    if later_s == 30.0:
        assert (cluster.hosts_fresh, cluster.chips, cluster.util_mean_pct) == (0, 0, None)


def test_a_host_figures_follow_its_latest_report():
    ledger = cluster_ledger()
    host = next(iter(ledger.hosts.values()))
    chips = host.chips
    assert host.figures.chips == len(chips)
    assert host.figures.utils == tuple(c.util_pct for c in chips if c.util_pct is not None)
    assert host.figures.hbm_used_bytes == sum(c.hbm_bytes or 0 for c in chips)


def test_counter_family_nonzero_is_set_by_the_first_nonzero_count_and_kept():
    family = CounterFamily()
    family.add({"mem_ecc_corrected": 0, "sram_ecc_uncorrected": 0})
    assert not family.nonzero and not any(family.totals().values())
    family.add({"mem_ecc_corrected": 2, "sram_ecc_uncorrected": 0})
    family.add({"mem_ecc_corrected": 0, "sram_ecc_uncorrected": 0})  # per-period counts: 2, then 0
    assert family.nonzero and family.totals()["mem_ecc_corrected"] == 2


def test_kept_rows_follow_a_host_that_reports_and_hosts_that_go_stale():
    """The cluster rollup keeps each UltraServer's row until one of its hosts reports or changes
    freshness: after one host's next report only its row is computed again, and every row (kept
    or not) and the totals still equal the definition; later, as hosts go stale, they all do."""
    ledger = cluster_ledger()
    now_s = now_at(CLUSTER_LAST_TICK)
    before = {r.ultraserver: r for r in ledger.read(now_s).cluster.ultraservers}
    host = next(h for h in cluster_hosts() if h.alive(CLUSTER_LAST_TICK + 1))
    ledger.ingest(cluster_line(host, CLUSTER_LAST_TICK + 1))
    reported = ledger.ultraserver_of(ledger.hosts[host.report(0)["instance_info"]["instance_id"]])
    placed = ledger.ultraservers()
    # 5.5 s: the earlier reports are stale, the new one is not; 30 s: the silent hosts are lost
    for later_s in (0.5, 3.0, 5.5, 30.0):
        cluster = ledger.read(now_s + later_s).cluster
        for row in cluster.ultraservers:
            assert figures(row) == chip_by_chip(ledger, placed[row.ultraserver], now_s + later_s), row.ultraserver
            if later_s == 0.5:  # the same object where nothing changed, a new one where a host reported
                assert (row is before[row.ultraserver]) == (row.ultraserver != reported)
        assert figures(cluster) == chip_by_chip(ledger, list(ledger.hosts.values()), now_s + later_s)
        assert sum(r.hosts_fresh for r in cluster.rows) == cluster.hosts_fresh
        if later_s == 5.5:
            assert cluster.hosts_fresh == 1
    assert (cluster.hosts_fresh, cluster.hosts_stale) == (0, 1) and cluster.hosts_lost > 0
