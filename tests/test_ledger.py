"""The ledger: chip figures as the receipt contract defines them, scopes kept apart, staleness."""

from pathlib import Path

import pytest

from trnwatch.collectors.lines import Line
from trnwatch.collectors.ultraserver_map import UltraServerMapError, load_ultraserver_map
from trnwatch.ledger.counters import CounterFamily
from trnwatch.ledger.hosts import HISTORY_SAMPLES, ChipHistory
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
        feed(
            ledger,
            R.report([R.runtime(10, "r", [0], util={0: util}, memory={0: R.core_memory(tensors=tensors)})]),
            t=1000.0 + i,
        )
    chip = only_host(ledger).chips[0]
    assert chip.hbm_peak_bytes == sum(R.core_memory(tensors=900).values())
    assert chip.util_mean_pct == pytest.approx((10 + 50 + 30) / 3 / 4)
    assert chip.util_max_pct == pytest.approx(50 / 4)
    assert chip.samples == 3


def test_counters_with_error_give_no_utilisation_sample():
    ledger = Ledger("live")
    feed(
        ledger,
        R.report([R.runtime(10, "r", [0], util={0: 0.0}, counters_error="open /dev/neuron0: permission denied")]),
    )
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
    rollup = ledger.read(1021.0).ultraserver("us1", ledger.ultraservers()["us1"])
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


# --- bad input: bounded, counted, never the end of a source (issues 9.1, 9.2, 9.9, 10.7) --------


def _with(obj, path, value):
    target = obj
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return obj


@pytest.mark.parametrize("count", [18446744073709551616, 10**6])
def test_a_device_count_from_input_never_sizes_memory(count):
    import tracemalloc

    ledger = Ledger("live")
    tracemalloc.start()
    try:
        feed(ledger, f'{{"neuron_hardware_info":{{"neuron_device_count":{count},"neuroncore_per_device_count":2}}}}')
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
    assert only_host(ledger).chips == [] and only_host(ledger).cores_per_chip == 2
    assert dict(ledger.sources["h0"].rejected_fields) == {"neuron_hardware_info.neuron_device_count": 1}
    assert ledger.sources["h0"].reports == 1


def test_cores_per_chip_of_400_digits_does_not_end_the_source():
    ledger = Ledger("live")
    line = R.line(R.report([R.runtime(10, "r", [0], util={0: 80.0})]))
    feed(ledger, line.replace('"neuroncore_per_device_count":4', '"neuroncore_per_device_count":' + "9" * 400))
    feed(ledger, line, t=1001.0)
    host = only_host(ledger)
    assert ledger.sources["h0"].reports == 2 and host.chips[0].util_pct == pytest.approx(20.0)
    assert ledger.sources["h0"].rejected_fields["neuron_hardware_info.neuroncore_per_device_count"] == 1


def test_a_memory_size_past_2_to_the_1024_leaves_a_renderable_receipt():
    from trnwatch.ledger.receipt import build_receipt
    from trnwatch.ledger.receipt_markdown import render_markdown

    ledger = Ledger("live")
    obj = _with(R.report([]), ["neuron_hardware_info", "neuron_device_memory_size"], 2**1024)
    feed(ledger, obj)
    md = render_markdown(build_receipt(ledger, "eof", written_at_s=2000.0))
    assert "| unknown |" in md  # capacity rejected, so unknown, never a made-up figure
    assert only_host(ledger).chips[0].hbm_capacity_bytes is None


def test_receipt_markdown_formats_a_byte_count_no_float_can_hold():
    from trnwatch.ledger.receipt_markdown import _gib

    assert _gib(2**1100) == "2^1100+ bytes" and _gib(3 * 2**30) == "3.00 GiB"


def test_every_byte_formatter_of_the_screens_says_a_count_no_float_can_hold():
    """units.size (the job view's collective bytes) and used_of (HBM) divide like gib did: an
    unbounded int from input past 2**1064 would raise OverflowError there."""
    from trnwatch.ledger import units

    assert units.size(2**1100) == "2^1100+ bytes" and units.size(3 * 2**40) == "3.00 TiB"
    assert units.used_of(2**1100, 2**1200) == "2^1100+ bytes of 2^1200+ bytes"
    assert units.used_of(2**1100, None) == "2^1100+ bytes of unknown capacity"
    assert units.used_of(12 * 2**30, 144 * 2**30) == "12.00 / 144.00 GiB (8.3%)"


def test_one_utilisation_over_100_costs_that_chip_its_sample_and_nothing_else():
    from trnwatch.ledger.receipt import build_receipt

    ledger = Ledger("live")
    good = R.report([R.runtime(10, "r", [0, 4], util={0: 80.0, 4: 40.0})])
    feed(ledger, good, t=1000.0)
    bad = _with(
        R.report([R.runtime(10, "r", [0, 4], util={0: 80.0, 4: 40.0})]),
        [
            "neuron_runtime_data",
            0,
            "report",
            "neuroncore_counters",
            "neuroncores_in_use",
            "0",
            "neuroncore_utilization",
        ],
        100.01,
    )
    feed(ledger, bad, t=1001.0)
    host = only_host(ledger)
    chip0, chip1 = host.chips
    assert (chip0.samples, chip1.samples) == (1, 2)  # chip 0: no sample from the bad report
    assert chip0.util_pct == pytest.approx(20.0) and chip1.util_pct == pytest.approx(10.0)
    assert chip0.hbm_at_s == 1001.0 and host.memory_total_bytes == 824633720832  # the rest was folded
    assert [s.util_pct for s in chip0.history] == [pytest.approx(20.0), None]
    stats = ledger.sources["h0"]
    assert stats.reports == 2 and sum(stats.rejected.values()) == 0
    field = "neuron_runtime_data[].report.neuroncore_counters.neuroncores_in_use{}.neuroncore_utilization"
    assert dict(stats.rejected_fields) == {field: 1}
    (source,) = build_receipt(ledger, "eof", written_at_s=2000.0).sources
    assert source.rejected_fields == {field: 1} and "100.01" in source.last_field_rejection


def test_a_core_with_unknown_memory_gives_its_chip_no_hbm_sample():
    ledger = Ledger("live")
    obj = _with(
        R.report([R.runtime(10, "r", [0, 4])]),
        [
            "neuron_runtime_data",
            0,
            "report",
            "memory_used",
            "neuron_runtime_used_bytes",
            "usage_breakdown",
            "neuroncore_memory_usage",
            "0",
            "tensors",
        ],
        -1,
    )
    feed(ledger, obj)
    chip0, chip1 = only_host(ledger).chips
    assert chip0.hbm_bytes is None and chip1.hbm_bytes == sum(R.core_memory().values())


def test_an_unexpected_fold_error_costs_one_line_counted_as_internal(monkeypatch):
    from trnwatch.ledger.hosts import HostState

    ledger = Ledger("live")
    real_fold = HostState.fold

    def fold_that_fails_once(self, report, received_s, runtime_room):
        if received_s == 1000.0:
            raise ZeroDivisionError("a defect in the fold")
        real_fold(self, report, received_s, runtime_room)

    monkeypatch.setattr(HostState, "fold", fold_that_fails_once)
    feed(ledger, R.report([]), t=1000.0)
    feed(ledger, R.report([]), t=1001.0)
    stats = ledger.sources["h0"]
    assert dict(stats.rejected) == {"internal": 1} and stats.reports == 1
    assert stats.last_rejection == "ZeroDivisionError: a defect in the fold"


def test_gone_runtimes_are_evicted_after_the_documented_time():
    from trnwatch.collectors.limits import RUNTIME_EVICT_MIN_S

    ledger = Ledger("live")
    feed(ledger, R.report([R.runtime(10, "old", [0], util={0: 50.0})]), t=1000.0)
    feed(ledger, R.report([R.runtime(11, "new", [0], util={0: 50.0})]), t=1000.0 + RUNTIME_EVICT_MIN_S)
    host = only_host(ledger)
    assert host.runtimes[(10, "old")].cores == ()  # gone from the report, still in the receipt
    feed(ledger, R.report([R.runtime(11, "new", [0], util={0: 50.0})]), t=1000.0 + RUNTIME_EVICT_MIN_S + 1)
    assert set(host.runtimes) == {(11, "new")} and host.runtimes_evicted == 1


def test_lines_full_of_fresh_pids_keep_a_bounded_number_of_runtimes():
    from trnwatch.collectors.limits import MAX_RUNTIMES_PER_HOST, MAX_RUNTIMES_PER_REPORT

    ledger = Ledger("live")
    for i in range(10):
        pids = range(i * MAX_RUNTIMES_PER_REPORT, (i + 1) * MAX_RUNTIMES_PER_REPORT)
        feed(ledger, R.report([{"pid": p, "neuron_runtime_tag": "t", "error": ""} for p in pids]), t=1000.0 + i)
    host = only_host(ledger)
    assert len(host.runtimes) == MAX_RUNTIMES_PER_HOST
    assert host.runtimes_evicted == 10 * MAX_RUNTIMES_PER_REPORT - MAX_RUNTIMES_PER_HOST
    assert host.anomalies["runtimes-over-limit"] == host.runtimes_evicted
    assert (9 * MAX_RUNTIMES_PER_REPORT, "t") in host.runtimes  # the newest are kept


def test_a_runtime_vcpu_error_is_cleared_when_the_group_recovers():
    ledger = Ledger("live")
    failing = R.report([R.runtime(10, "r", [0])])
    failing["neuron_runtime_data"][0]["report"]["neuron_runtime_vcpu_usage"]["error"] = "no such process"
    feed(ledger, failing, t=1000.0)
    (runtime,) = only_host(ledger).runtimes.values()
    assert runtime.group_errors == {"neuron_runtime_vcpu_usage": "no such process"}
    feed(ledger, R.report([R.runtime(10, "r", [0])]), t=1001.0)
    assert runtime.group_errors == {} and runtime.vcpu_user_pct == 6.42


def test_system_vcpu_and_memory_group_errors_are_recorded_then_cleared():
    ledger = Ledger("live")
    system = R.system()
    system["vcpu_usage"]["error"] = "cannot read /proc/stat"
    system["memory_info"]["error"] = "cannot read /proc/meminfo"
    feed(ledger, R.report([], system_data=system), t=1000.0)
    host = only_host(ledger)
    assert host.group_errors == {"vcpu_usage": "cannot read /proc/stat", "memory_info": "cannot read /proc/meminfo"}
    assert host.memory_total_bytes is None and host.vcpu_busy_pct is None
    feed(ledger, R.report([]), t=1001.0)
    assert host.group_errors == {} and host.memory_total_bytes == 824633720832


def test_chip_history_is_a_ring_the_garbage_collector_does_not_walk():
    import gc

    from trnwatch.ledger.hosts import ChipHistory

    history = ChipHistory(size=4)
    before = len(gc.get_objects())
    for i in range(6):
        history.append(float(i), None if i == 4 else i * 10.0, i << 30)
    assert len(gc.get_objects()) == before  # numbers in arrays, no object per sample
    assert [tuple(s) for s in history] == [
        (2.0, 20.0, 2 << 30),
        (3.0, 30.0, 3 << 30),
        (4.0, None, 4 << 30),
        (5.0, 50.0, 5 << 30),
    ]


def test_counter_names_from_input_are_bounded_per_runtime():
    from trnwatch.collectors.limits import MAX_COUNTERS_PER_FAMILY, MAX_NAMED_VALUES

    ledger = Ledger("live")
    for i in range(6):
        names = {f"kind{i}-{k}": 1 for k in range(MAX_NAMED_VALUES)}
        execs = {"period": 1.0, "error_summary": names, "execution_summary": {}, "error": ""}
        feed(ledger, R.report([R.runtime(10, "r", [0], executions=execs)]), t=1000.0 + i)
    host = only_host(ledger)
    (runtime,) = host.runtimes.values()
    assert len(runtime.executions.series) == MAX_COUNTERS_PER_FAMILY
    assert host.anomalies["counter-names-over-limit"] == 6 * MAX_NAMED_VALUES - MAX_COUNTERS_PER_FAMILY


def test_hosts_beyond_the_limit_are_rejected_lines_not_memory(monkeypatch):
    monkeypatch.setattr("trnwatch.ledger.ledger.MAX_HOSTS", 3)
    ledger = Ledger("live")
    for i in range(5):
        feed(ledger, R.report([], instance_info=R.instance(f"i-{i}")), t=1000.0 + i)
    feed(ledger, R.report([], instance_info=R.instance("i-0")), t=1010.0)  # a kept host goes on
    assert set(ledger.hosts) == {"i-0", "i-1", "i-2"}
    assert ledger.sources["h0"].rejected == {"too-many-hosts": 2} and ledger.sources["h0"].reports == 4


def test_a_full_host_table_forgets_a_host_lost_past_the_documented_age_to_admit_a_live_one(monkeypatch):
    """Once MAX_HOSTS instance ids had been seen, a new live host was rejected for good, even with
    every kept host long lost; now the longest silent host past HOST_FORGET_AFTER_S makes room,
    and the forgetting is counted."""
    from trnwatch.ledger.ledger import HOST_FORGET_AFTER_S
    from trnwatch.ledger.receipt import build_receipt

    monkeypatch.setattr("trnwatch.ledger.ledger.MAX_HOSTS", 3)
    ledger = Ledger("live")
    for i in range(3):
        feed(ledger, R.report([], instance_info=R.instance(f"i-{i}")), t=1000.0 + i)
    feed(ledger, R.report([], instance_info=R.instance("i-1")), t=1010.0)
    feed(ledger, R.report([], instance_info=R.instance("i-new")), t=1000.0 + HOST_FORGET_AFTER_S - 1)
    assert "i-new" not in ledger.hosts  # every kept host heard from within the age: still refused
    t = 1002.0 + HOST_FORGET_AFTER_S + 1  # i-0 and i-2 are past it; i-0 the longest silent
    feed(ledger, R.report([], instance_info=R.instance("i-new")), t=t)
    feed(ledger, R.report([], instance_info=R.instance("i-newer")), t=t)
    assert set(ledger.hosts) == {"i-1", "i-new", "i-newer"} and ledger.hosts_forgotten == 2
    assert ledger.sources["h0"].rejected == {"too-many-hosts": 1}
    assert build_receipt(ledger, "eof", written_at_s=t).hosts_forgotten == 2


def test_a_full_host_table_under_node_churn_keeps_taking_new_hosts_and_the_receipt_counts_the_lost(monkeypatch):
    """A long `record` on a fleet with node churn: every 130 s the fleet's nodes are replaced by new
    instance ids (reports and sysfs samples both). The sysfs table never freed: once MAX_HOSTS
    ids had been seen, every new host's sysfs was rejected as too-many-hosts for good. Now every
    generation is taken, the lost ones are forgotten oldest first, and the receipt (JSON and
    Markdown) says how many."""
    import json

    from trnwatch.collectors.sysfs_sample import SCHEMA as SYSFS_SCHEMA
    from trnwatch.ledger.receipt import build_receipt
    from trnwatch.ledger.receipt_markdown import render_markdown

    monkeypatch.setattr("trnwatch.ledger.ledger.MAX_HOSTS", 3)
    ledger = Ledger("live")
    generations, t = 8, 1000.0
    for gen in range(generations):
        for k in range(3):
            instance_id = f"i-{gen}-{k}"
            for beat in range(3):  # each node reports for 2 s, then is gone
                feed(ledger, R.report([], instance_info=R.instance(instance_id)), t=t + beat, source=f"h{k}")
                sample = json.dumps({"v": SYSFS_SCHEMA, "instance_id": instance_id})
                ledger.ingest(Line(f"sysfs-{k}", "sysfs", t + beat, sample))
        assert set(ledger.hosts) == set(ledger.sysfs) == {f"i-{gen}-{k}" for k in range(3)}
        t += 130.0
    forgotten = 3 * (generations - 1)
    assert ledger.hosts_forgotten == ledger.sysfs_hosts_forgotten == forgotten
    assert not any(s.rejected for s in ledger.sources.values())
    receipt = build_receipt(ledger, "eof", written_at_s=t)
    assert (receipt.hosts_forgotten, receipt.sysfs_hosts_forgotten) == (forgotten, forgotten)
    assert [h.host for h in receipt.hosts] == [f"i-{generations - 1}-{k}" for k in range(3)]
    markdown = render_markdown(receipt)
    assert f"- {forgotten} lost host(s) forgotten to admit new ones" in markdown
    assert "hosts' reports)" in markdown and "hosts' sysfs)" in markdown


def test_a_full_sysfs_table_refuses_a_new_host_while_every_kept_one_is_recent(monkeypatch):
    """The sysfs table frees only hosts silent HOST_FORGET_AFTER_S or more: before that a new
    host is still a counted too-many-hosts rejection, and none is forgotten."""
    import json

    from trnwatch.collectors.sysfs_sample import SCHEMA as SYSFS_SCHEMA
    from trnwatch.ledger.ledger import HOST_FORGET_AFTER_S

    monkeypatch.setattr("trnwatch.ledger.ledger.MAX_HOSTS", 2)
    ledger = Ledger("live")

    def sample(instance_id, t):
        ledger.ingest(Line("sysfs", "sysfs", t, json.dumps({"v": SYSFS_SCHEMA, "instance_id": instance_id})))

    sample("i-0", 1000.0)
    sample("i-1", 1001.0)
    sample("i-new", 1000.0 + HOST_FORGET_AFTER_S - 1)
    assert set(ledger.sysfs) == {"i-0", "i-1"} and ledger.sysfs_hosts_forgotten == 0
    assert ledger.sources["sysfs"].rejected == {"too-many-hosts": 1}
    sample("i-new", 1000.0 + HOST_FORGET_AFTER_S)  # i-0 silent exactly the age: forgotten
    assert set(ledger.sysfs) == {"i-1", "i-new"} and ledger.sysfs_hosts_forgotten == 1


def test_a_forgotten_host_leaves_nothing_kept_per_report_in_the_read_model(monkeypatch):
    """The read model keeps figures per host report (`Kept.per_report`) from one refresh to the
    next; a host the full table forgot kept its entries (and its whole HostState) alive for good."""
    from trnwatch.ledger.ledger import HOST_FORGET_AFTER_S

    monkeypatch.setattr("trnwatch.ledger.ledger.MAX_HOSTS", 2)
    ledger = Ledger("live")
    for i in range(2):
        feed(
            ledger,
            R.report([R.runtime(10, "r", [0], util={0: 50.0})], instance_info=R.instance(f"i-{i}")),
            t=1000.0 + i,
        )
    read = ledger.read(1002.0)
    _ = read.findings  # computes (and keeps) figures per host report
    assert {host_id for _, host_id in read.kept.per_report} == {"i-0", "i-1"}
    t = 1001.0 + HOST_FORGET_AFTER_S + 1
    feed(ledger, R.report([R.runtime(10, "r", [0], util={0: 50.0})], instance_info=R.instance("i-new")), t=t)
    assert set(ledger.hosts) == {"i-1", "i-new"} and ledger.hosts_forgotten == 1
    read = ledger.read(t)
    assert {host_id for _, host_id in read.kept.per_report} == {"i-1"}  # i-0's are gone
    _ = read.findings
    assert {host_id for _, host_id in read.kept.per_report} == {"i-1", "i-new"}


def test_runtimes_are_bounded_across_hosts_and_the_ones_past_the_budget_counted(monkeypatch):
    """A stream with a new instance id and fresh pids in every report grew 2.8 MiB per host up to
    4,096 hosts; the runtimes kept across all hosts are bounded (MAX_RUNTIMES_TOTAL), the ones
    past the budget counted per host as `runtimes-over-budget`, and kept error strings are cut."""
    from trnwatch.ledger.report_groups import MAX_KEPT_ERROR_CHARS

    monkeypatch.setattr("trnwatch.ledger.ledger.MAX_RUNTIMES_TOTAL", 10)
    ledger = Ledger("live")
    for host in range(4):
        runtimes = [R.runtime(100 * host + i, "t", [0], util={0: 50.0}) for i in range(4)]
        for entry in runtimes:
            entry["error"] = "x" * 4096
        feed(ledger, R.report(runtimes, instance_info=R.instance(f"i-{host}")), t=1000.0 + host)
    kept = {h: len(s.runtimes) for h, s in ledger.hosts.items()}
    assert kept == {"i-0": 4, "i-1": 4, "i-2": 2, "i-3": 0}
    assert {h: s.anomalies["runtimes-over-budget"] for h, s in ledger.hosts.items()} == {
        "i-0": 0,
        "i-1": 0,
        "i-2": 2,
        "i-3": 4,
    }
    error = next(iter(ledger.hosts["i-1"].runtimes.values())).error
    assert error.startswith("x" * MAX_KEPT_ERROR_CHARS + "...") and len(error) < MAX_KEPT_ERROR_CHARS + 40


def test_chip_history_hbm_growth_reads_the_arrays_as_the_samples_read():
    # What the leak rule reads (ledger/findings.py `_rose_lately`): the growth from the count-th
    # newest sample with an HBM figure up to a time to the newest, across the ring's wrap,
    # skipping unknown figures.
    history = ChipHistory(size=6)
    for t in range(10):
        history.append(float(t), 50.0, None if t % 3 == 0 else 1000 * t)
    by_samples = [(s.t_s, s.hbm_bytes) for s in reversed(history) if s.t_s <= 8.0 and s.hbm_bytes is not None]
    assert by_samples == [(8.0, 8000), (7.0, 7000), (5.0, 5000), (4.0, 4000)]
    assert history.hbm_growth_per_s(3, 8.0) == (8000 - 5000) / (8.0 - 5.0)
    assert history.hbm_growth_per_s(3, 9.0) == (8000 - 5000) / (8.0 - 5.0)  # the newest sample has none
    assert history.hbm_growth_per_s(5, 8.0) is None  # fewer than asked for


def test_executions_that_timed_out_are_errors_in_the_rate_the_runtimes_list_and_the_chip_view():
    """One rule says which execution counters are errors (ledger/runtimes.py): the receipt's error
    rate, its Markdown's troubled runtimes and the chip view agree. Before it, a runtime whose
    executions timed out (error_summary all zero) was counted in the rate but listed by neither."""
    from trnwatch.ledger.receipt import build_receipt
    from trnwatch.ledger.receipt_markdown import render_markdown
    from trnwatch.tui.chip_model import chip_model

    ledger = Ledger("live")
    for t, timed_out in ((1000.0, 2), (1001.0, 0), (1002.0, 1)):  # a decrease: per-period counts
        executions = R.executions(completed=3, timed_out=timed_out)
        feed(ledger, R.report([R.runtime(7, "rank0", [0, 1], util={0: 90.0}, executions=executions)]), t)
    receipt = build_receipt(ledger, "eof", written_at_s=2000.0)
    assert (receipt.failure_rate.executions, receipt.failure_rate.execution_errors) == (12, 3)
    runtimes = render_markdown(receipt).split("## Runtimes")[1].split("## Chips")[0]
    host_id = only_host(ledger).host_id
    assert f"- {host_id} pid 7 tag rank0: status.timed_out 3" in runtimes
    chip = chip_model(ledger.read(1002.5), host_id, 0)
    assert chip is not None and ("status.timed_out", 3) in chip.execution_errors


def test_loaded_models_follow_each_report_though_an_unchanged_list_is_not_rebuilt():
    """The simulated host's runtimes load their NEFFs at tick 9 (not running) and run them from
    the warmup on: the ledger's runtime state follows every change, and a report whose list
    equals the previous one keeps the same state objects (nothing rebuilt per report)."""
    from trnwatch.workloads.sim.fleet import SimHost
    from trnwatch.workloads.sim.topology import get_topology

    host = SimHost(get_topology("trn3-gen2-us"), 0, 0, "healthy")
    ledger = Ledger("simulated")

    def runtime_models(tick):
        feed(ledger, host.report_line(tick), t=1000.0 + tick)
        (h,) = ledger.hosts.values()
        return {r.tag: r.loaded_models for r in h.runtimes.values()}

    assert all(models == [] for models in runtime_models(8).values())
    loaded = runtime_models(9)
    assert all(len(m) == 4 and not any(x.is_running for x in m) for m in loaded.values())
    running = runtime_models(25)
    assert all(len(m) == 4 and all(x.is_running for x in m) for m in running.values())
    again = runtime_models(26)
    assert all(again[tag] is running[tag] for tag in running)


def test_outside_strings_in_the_receipt_markdown_are_text_not_links_or_entities():
    """Issue 36 item 5: a runtime tag from the stream is a string from outside. Rendered by a real
    CommonMark renderer (markdown-it-py, which Textual already installs), `[text](url)` from it
    was a live link and `&amp;` rendered as `&`; now both read as typed."""
    from markdown_it import MarkdownIt

    from trnwatch.ledger.receipt import build_receipt
    from trnwatch.ledger.receipt_markdown import render_markdown

    hostile = "[open me](https://evil.example/x) &amp; ![img](https://evil.example/i.png)"
    ledger = Ledger("live")
    for t, timed_out in ((1000.0, 2), (1001.0, 0)):  # a troubled runtime: the Markdown names its tag
        executions = R.executions(completed=3, timed_out=timed_out)
        feed(ledger, R.report([R.runtime(7, hostile, [0], util={0: 90.0}, executions=executions)]), t)
    markdown = render_markdown(build_receipt(ledger, "eof", written_at_s=2000.0))
    html = MarkdownIt("commonmark").enable("table").render(markdown)
    assert "evil.example" in html  # the tag is there, as text
    assert 'href="https://evil' not in html
    assert 'src="https://evil' not in html
    assert "&amp;amp;" in html  # shown as the five characters `&amp;`, not as `&`
