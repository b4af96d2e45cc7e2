"""The ledger: chip figures as the receipt contract defines them, scopes kept apart, staleness."""

from pathlib import Path

import pytest

from trnwatch.collectors.lines import Line
from trnwatch.collectors.ultraserver_map import UltraServerMapError, load_ultraserver_map
from trnwatch.ledger.counters import CounterFamily
from trnwatch.ledger.hosts import HISTORY_SAMPLES
from trnwatch.ledger.ledger import Ledger
from tests import reports as R
from tests.test_neuron_monitor import realworld


def feed(ledger, obj_or_text, t=1000.0, source="h0"):
    text = obj_or_text if isinstance(obj_or_text, str) else R.line(obj_or_text)
    ledger.ingest(Line(source, "neuron-monitor", t, text))


def only_host(ledger):
    (host,) = ledger.hosts.values()
    return host


def test_chip_hbm_sums_all_categories_over_runtimes_and_the_chips_cores():
    # chip 0 = cores 0-3 (LNC=2, 4 logical cores per chip); two runtimes share the chip.
    a = R.runtime(10, "rank0", [0, 1], memory={0: R.core_memory(tensors=100), 1: R.core_memory(tensors=200)})
    b = R.runtime(11, "rank1", [2, 4], memory={2: R.core_memory(tensors=300), 4: R.core_memory(tensors=7)})
    ledger = Ledger("live")
    feed(ledger, R.report([a, b]))
    chips = only_host(ledger).chips
    other = sum(R.core_memory(tensors=0).values())
    assert chips[0].hbm_bytes == 3 * other + 600
    assert chips[1].hbm_bytes == other + 7
    assert chips[0].hbm_by_category_bytes["tensors"] == 600


def test_chip_utilisation_is_the_mean_over_its_cores_with_absent_cores_as_zero():
    ledger = Ledger("live")
    feed(ledger, R.report([R.runtime(10, "r", [0, 1], util={0: 80.0, 1: 40.0})]))
    chips = only_host(ledger).chips
    assert chips[0].util_pct == pytest.approx(30.0)  # (80 + 40 + 0 + 0) / 4
    assert chips[1].util_pct == 0.0


def test_peak_and_mean_over_reports():
    ledger = Ledger("live")
    for i, (util, tensors) in enumerate([(10.0, 5), (50.0, 900), (30.0, 20)]):
        feed(ledger, R.report([R.runtime(10, "r", [0], util={0: util}, memory={0: R.core_memory(tensors=tensors)})]), t=1000.0 + i)
    chip = only_host(ledger).chips[0]
    assert chip.hbm_peak_bytes == sum(R.core_memory(tensors=900).values())
    assert chip.util_mean_pct == pytest.approx((10 + 50 + 30) / 3 / 4)
    assert chip.util_max_pct == pytest.approx(50 / 4)
    assert chip.samples == 3


def test_counters_with_error_give_no_utilisation_sample():
    ledger = Ledger("live")
    feed(ledger, R.report([R.runtime(10, "r", [0], util={0: 0.0}, counters_error="open /dev/neuron0: permission denied")]))
    chip = only_host(ledger).chips[0]
    assert chip.samples == 0 and chip.util_pct is None
    assert chip.hbm_bytes is not None  # memory_used had no error


def test_no_runtime_at_all_is_a_zero_sample_but_missing_runtime_groups_are_not():
    ledger = Ledger("live")
    feed(ledger, R.report([]))
    assert only_host(ledger).chips[0].samples == 1
    assert only_host(ledger).chips[0].util_pct == 0.0
    ledger2 = Ledger("live")
    feed(ledger2, {"instance_info": R.instance(), "neuron_hardware_info": R.hardware_trn3(), "system_data": R.system()})
    assert only_host(ledger2).chips[0].samples == 0


def test_runtimes_sharing_a_tag_are_kept_apart_by_pid():
    ledger = Ledger("live")
    feed(ledger, R.report([R.runtime(10, "same", [0], util={0: 10.0}), R.runtime(11, "same", [4], util={4: 20.0})]))
    assert set(only_host(ledger).runtimes) == {(10, "same"), (11, "same")}


def test_a_core_reported_twice_counts_once_at_the_higher_figure():
    ledger = Ledger("live")
    feed(ledger, R.report([R.runtime(10, "a", [0], util={0: 40.0}), R.runtime(11, "b", [0], util={0: 60.0})]))
    assert only_host(ledger).chips[0].util_pct == pytest.approx(15.0)


def test_core_beyond_chip_count_is_counted_as_an_anomaly_not_crashing():
    ledger = Ledger("live")
    feed(ledger, R.report([R.runtime(10, "a", [0, 99], util={0: 40.0, 99: 10.0})]))
    host = only_host(ledger)
    assert host.anomalies["core-beyond-chip-count"] >= 1
    assert host.chips[0].util_pct == pytest.approx(10.0)


def test_lnc1_maps_eight_cores_per_chip():
    ledger = Ledger("live")
    feed(ledger, R.report([R.runtime(10, "a", [7, 8], util={7: 80.0, 8: 40.0})], hardware=R.hardware_trn3(lnc=1)))
    chips = only_host(ledger).chips
    assert chips[0].util_pct == pytest.approx(10.0) and chips[1].util_pct == pytest.approx(5.0)


def test_host_id_is_instance_id_else_stream_label():
    ledger = Ledger("live")
    feed(ledger, R.report([]), source="label-a")
    feed(ledger, R.report([], instance_info=R.instance(instance_id="")), source="label-b")
    assert set(ledger.hosts) == {"i-0a1b2c3d4e5f60718", "label-b"}


def test_bad_lines_are_counted_per_source_and_the_stream_goes_on():
    ledger = Ledger("live")
    feed(ledger, "not json", source="a")
    feed(ledger, "[1]", source="a")
    ledger.ingest(Line("a", "neuron-monitor", 1000.0, "", oversize_bytes=9_000_000))
    feed(ledger, R.report([]), source="a")
    feed(ledger, "{", source="b")
    assert dict(ledger.sources["a"].rejected) == {"not-json": 1, "not-object": 1, "oversize": 1}
    assert ledger.sources["a"].reports == 1
    assert ledger.sources["b"].rejected["not-json"] == 1


def test_history_is_bounded():
    ledger = Ledger("live")
    text = R.line(R.report([R.runtime(10, "r", [0], util={0: 50.0})]))
    for i in range(HISTORY_SAMPLES + 50):
        feed(ledger, text, t=1000.0 + i)
    assert len(only_host(ledger).chips[0].history) == HISTORY_SAMPLES


def test_ultraserver_from_report_and_config_override():
    ledger = Ledger("live", ultraservers={"i-b": "us-config"})
    feed(ledger, R.report([], instance_info=R.instance("i-a", ultraserver_id="us-reported")), source="a")
    feed(ledger, R.report([], instance_info=R.instance("i-b", ultraserver_id="us-reported")), source="b")
    feed(ledger, R.report([], instance_info=R.instance("i-c")), source="c")
    groups = ledger.ultraservers()
    assert [h.host_id for h in groups["us-reported"]] == ["i-a"]
    assert [h.host_id for h in groups["us-config"]] == ["i-b"]
    assert "i-c" not in {h.host_id for hs in groups.values() for h in hs}


def test_stale_host_drops_out_of_the_ultraserver_rollup():
    ledger = Ledger("live", ultraservers={"a": "us1", "b": "us1"})
    feed(ledger, R.report([R.runtime(1, "r", [0], util={0: 80.0})], instance_info=R.instance("")), t=1000.0, source="a")
    feed(ledger, R.report([R.runtime(1, "r", [0], util={0: 40.0})], instance_info=R.instance("")), t=1000.0, source="b")
    feed(ledger, R.report([R.runtime(1, "r", [0], util={0: 40.0})], instance_info=R.instance("")), t=1020.0, source="b")
    rollup = ledger.rollup_ultraserver("us1", ledger.ultraservers()["us1"], now_s=1021.0)
    assert (rollup.hosts_total, rollup.hosts_fresh, rollup.chips) == (2, 1, 2)
    assert rollup.hbm_capacity_bytes == 2 * 144 * R.GIB
    assert rollup.util_mean_pct == pytest.approx(5.0)  # chips of b only: (10 + 0) / 2
    assert ledger.sources["b"].gaps == 1 and ledger.sources["b"].gap_s == pytest.approx(20.0)
    assert ledger.sources["a"].state(1021.0, None) == "stale"


def test_simulator_mark_makes_a_live_session_simulated():
    ledger = Ledger("live")
    obj = R.report([])
    obj["trnwatch_simulator"] = {"topology": "trn3-gen2-us", "host": 0, "seed": 0, "scenario": "healthy"}
    feed(ledger, obj)
    assert ledger.evidence == "simulated"
    assert Ledger("replayed").evidence == "replayed"


def test_wandb_capture_reads_cumulative_and_never_sums_to_71095():
    ledger = Ledger("live")
    for i in (1, 2, 3):
        feed(ledger, realworld(f"nm-wandb-trn1-{i}.json"), t=1000.0 + i)
    (runtime,) = only_host(ledger).runtimes.values()
    assert runtime.executions.reading == "cumulative"
    assert runtime.executions.totals()["error.generic"] == 23749 - 23654
    assert runtime.executions.totals()["status.completed"] == 0


def test_real_captures_give_sensible_host_figures():
    ledger = Ledger("live")
    feed(ledger, realworld("nm-allsmi-trn1-1.json"), source="allsmi")
    feed(ledger, realworld("nm-inf1kr-1.json"), t=1000.0, source="inf1")
    feed(ledger, realworld("nm-inf1kr-2.json"), t=1001.0, source="inf1")
    feed(ledger, realworld("nm-cwat-dummy-edited-1.json"), source="cwat")
    trn1 = ledger.hosts["i-0421ea5496c852415"]
    assert trn1.chips[0].hbm_capacity_bytes == 32 * R.GIB and trn1.chips[0].util_pct == 0.0
    inf1 = ledger.hosts["i-0823d657f57057590"]
    assert inf1.chips[0].hbm_capacity_bytes is None  # old-style hardware info: unknown, not guessed
    assert inf1.chips[0].hbm_peak_bytes == 61766864 + 1308832 + 43216
    assert inf1.chips[0].util_pct == pytest.approx(89.01827638996558 / 4)
    cwat = ledger.hosts["i-09db9b55e0095612f"]
    assert len(cwat.chips) == 16 and len(cwat.runtimes) == 2  # same pid, two tags: two runtimes
    assert cwat.chips[3].util_pct == pytest.approx(41.4 / 2)
    assert all(r.group_errors.get("neuron_runtime_vcpu_usage") for r in cwat.runtimes.values())


def test_counter_family_readings():
    per_period = CounterFamily()
    for v in (3, 1, 2):
        per_period.add({"n": v})
    assert per_period.reading == "per_period" and per_period.totals() == {"n": 6}
    cumulative = CounterFamily()
    for v in (5, 5, 9):
        cumulative.add({"n": v})
    assert cumulative.reading == "cumulative" and cumulative.totals() == {"n": 4}
    rising = CounterFamily()
    for v in (1, 2, 3):
        rising.add({"n": v})
    assert rising.reading == "undecided" and rising.totals() == {"n": None}
    assert rising.both_readings() == {"n": {"per_period": 6, "cumulative": 2}}
    zeros = CounterFamily()
    for _ in range(3):
        zeros.add({"n": 0})
    assert zeros.reading == "undecided" and zeros.totals() == {"n": 0}


def test_a_family_that_later_decreases_is_reread_as_per_period():
    family = CounterFamily()
    for v in (4, 4, 4, 1):
        family.add({"n": v})
    assert family.reading == "per_period" and family.totals() == {"n": 13}


def test_ultraserver_map_file(tmp_path: Path):
    path = tmp_path / "us.txt"
    path.write_text("# host  ultraserver\ni-a us-1\nlabel-b   us-1  # trailing comment\n\n")
    assert load_ultraserver_map(path) == {"i-a": "us-1", "label-b": "us-1"}
    path.write_text("i-a us-1 extra\n")
    with pytest.raises(UltraServerMapError, match=":1:"):
        load_ultraserver_map(path)
    path.write_text("i-a us-1\ni-a us-2\n")
    with pytest.raises(UltraServerMapError, match="already"):
        load_ultraserver_map(path)


def test_declared_counters_sum_their_rises_across_a_reset():
    family = CounterFamily(declared_counter=True)
    for v in (10, 12, 15, 2, 5):  # the exporter restarted after 15
        family.add({"n": v})
    assert family.reading == "counter" and family.totals() == {"n": (15 - 10) + 2 + 3}


def test_prometheus_ecc_counters_are_read_as_running_totals():
    """Scrapes of the simulator's exporter during the `ecc` scenario: the exporter's running totals
    (2, 1, 3, ... corrected events per tick from tick 40 on the fault-site chip) give the window's rise."""
    import json

    from trnwatch.workloads.sim.exporter import ExporterState
    from trnwatch.workloads.sim.fleet import SimHost
    from trnwatch.workloads.sim.topology import get_topology

    host = SimHost(get_topology("trn3-gen2-us"), 7, seed=0, scenario="ecc")
    exporter = ExporterState()
    ledger = Ledger("live")
    for tick in range(38, 46):
        exporter.consume(host.report(tick))
        body = json.dumps({"url": "http://127.0.0.1:9000/metrics", "interval_s": 1.0, "body": exporter.render()})
        ledger.ingest(Line("scrape", "prometheus", 1000.0 + tick, body))
    chip = only_host(ledger).chips[2]
    assert chip.ecc.reading == "counter"
    assert chip.ecc.totals()["mem_ecc_corrected"] == 2 + 1 + 3 + 2 + 1 + 3  # ticks 40..45, after the first scrape at 38
    assert only_host(ledger).chips[0].ecc.totals()["mem_ecc_corrected"] == 0
