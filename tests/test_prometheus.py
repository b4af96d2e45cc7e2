"""Prometheus data into the ledger: real exporter scrapes, the simulator's exporter format checked
against prometheus_client itself, server answers split per host, and refused URLs and tokens."""

import asyncio
import json
import re

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Info, generate_latest

from trnwatch.cli import main
from trnwatch.collectors.lines import Line
from trnwatch.collectors.neuron_monitor import Report
from trnwatch.collectors.prometheus import parse_prometheus_line, scrape_samples
from trnwatch.collectors.prometheus_http import TokenError, UrlError, check_url, load_token
from trnwatch.collectors.prometheus_sources import host_lines, host_lines_in_slices, query_url
from trnwatch.ledger.ledger import Ledger
from trnwatch.workloads.sim.exporter import ExporterState
from trnwatch.workloads.sim.fleet import SimHost
from trnwatch.workloads.sim.topology import get_topology
from tests.test_neuron_monitor import realworld

GEN2 = get_topology("trn3-gen2-us")


def scrape_line(body: str, interval_s: float = 1.0) -> str:
    return json.dumps({"url": "http://10.0.0.5:8000/metrics", "interval_s": interval_s, "body": body})


def only(items: list) -> Report:
    (item,) = items
    assert isinstance(item, Report), item
    return item


# --- real scrapes -------------------------------------------------------------------------------


def test_real_scrape_of_a_running_host_maps_back_to_report_fields():
    report = only(parse_prometheus_line("prometheus", scrape_line(realworld("prom-inf1kr-running.txt"))))
    assert report.instance_info.instance_id == "i-0823d657f57057590"
    assert report.instance_info.instance_type == "inf1.xlarge"
    assert report.instance_info.instance_availability_zone == "us-east-2a"
    (runtime,) = report.neuron_runtime_data
    assert runtime.neuron_runtime_tag == "15439" and runtime.pid is None  # the exporter carries no pid
    cores = runtime.report.neuroncore_counters.neuroncores_in_use
    assert cores[0].neuroncore_utilization == pytest.approx(86.33101879976985)
    assert cores[1].neuroncore_utilization == 0.0
    assert cores[0].flops is None and cores[0].physical == {}  # the exporter does not carry them
    used = runtime.report.memory_used.neuron_runtime_used_bytes
    assert (used.host, used.neuron_device, used.usage_breakdown) == (1127288832, 63118912, None)
    stats = runtime.report.execution_stats
    assert stats.execution_summary["completed"] == 2977
    assert stats.latency_stats.total_latency["p50"] == pytest.approx(0.0033063888549804688)
    assert stats.latency_stats.device_latency is None
    ecc = report.system_data.neuron_hw_counters.neuron_devices
    assert [(d.neuron_device_index, d.mem_ecc_corrected) for d in ecc] == [(0, 0)]
    usage = report.system_data.vcpu_usage.average_usage
    assert usage["user"] == pytest.approx(27.98) and usage["idle"] == pytest.approx(100 - 27.98 - 2.93)
    assert report.system_data.memory_info.memory_total_bytes == 8033951744
    assert report.neuron_hardware_info is None  # this older exporter has no hardware-info series


def test_real_scrape_with_three_digit_exponents_and_per_core_memory():
    report = only(parse_prometheus_line("prometheus", scrape_line(realworld("prom-otel-trn1n-trimmed.txt"))))
    assert report.system_data.memory_info.memory_total_bytes == 532523487232
    per_core = report.neuron_runtime_data[0].report.memory_used.neuron_runtime_used_bytes.usage_breakdown
    assert per_core.neuroncore_memory_usage[0] == {
        "constants": 0,
        "model_code": 100752896,
        "model_shared_scratchpad": 0,
        "runtime_memory": 0,
        "tensors": 6315872,
    }


def test_idle_real_scrape_has_no_runtime():
    report = only(parse_prometheus_line("prometheus", scrape_line(realworld("prom-inf1kr-idle.txt"))))
    assert report.neuron_runtime_data == []


def test_scrape_without_hardware_info_gives_no_chip_figures_not_zeros():
    ledger = Ledger("live")
    ledger.ingest(Line("exp", "prometheus", 1000.0, scrape_line(realworld("prom-inf1kr-running.txt"))))
    (host,) = ledger.hosts.values()
    assert host.host_id == "i-0823d657f57057590" and host.chips == []
    assert [r.cores for r in host.runtimes.values()] == [(0, 1, 2, 3)]  # the runtime is known, its chips are not
    assert ledger.sources["exp"].reports == 1


# --- the simulator's exporter format ---------------------------------------------------------


def _vendor_text(reports: list[dict]) -> str:
    """What neuron-monitor-prometheus.py serves after `reports`, rebuilt here with real
    prometheus_client objects (its rules, abridged): the reference for the simulator's exporter."""
    registry = CollectorRegistry()
    made: dict = {}

    def metric(cls, name, doc, labels):
        if name not in made:
            made[name] = cls(name, doc, list(labels), registry=registry)
        return made[name]

    for report in reports:
        ii = report["instance_info"]
        inst = {
            "instance_name": ii["instance_name"],
            "instance_id": ii["instance_id"],
            "instance_type": ii["instance_type"],
            "availability_zone": ii["instance_availability_zone"],
            "region": ii["instance_region"],
            "subnet_id": ii["subnet_id"],
        }
        if not report["neuron_runtime_data"]:
            for m in made.values():
                m.clear()
        for rt in report["neuron_runtime_data"]:
            lab = {**inst, "runtime_tag": rt["neuron_runtime_tag"]}
            for group, data in rt["report"].items():
                if group == "execution_stats":
                    c = metric(Counter, "execution_errors_total", "Execution errors total", [*lab, "error_type"])
                    for k, v in data["error_summary"].items():
                        c.labels(**lab, error_type=k).inc(v)
                    c = metric(Counter, "execution_status_total", "Execution status total", [*lab, "status_type"])
                    for k, v in data["execution_summary"].items():
                        c.labels(**lab, status_type=k).inc(v)
                    g = metric(Gauge, "execution_latency_seconds", "Execution latency in seconds", [*lab, "percentile"])
                    for k, v in (data["latency_stats"]["total_latency"] or {}).items():
                        g.labels(**lab, percentile=k).set(v)
                elif group == "memory_used":
                    used = data["neuron_runtime_used_bytes"]
                    g = metric(
                        Gauge,
                        "neuron_runtime_memory_used_bytes",
                        "Runtime memory used bytes",
                        [*lab, "memory_location"],
                    )
                    for loc in ("host", "neuron_device"):
                        g.labels(**lab, memory_location=loc).set(used[loc])
                    for cat in ("constants", "model_code", "model_shared_scratchpad", "runtime_memory", "tensors"):
                        g = metric(
                            Gauge,
                            f"neuroncore_memory_usage_{cat}",
                            f"NeuronCore memory utilization for {cat}",
                            [*lab, "neuroncore", "memory_location"],
                        )
                        for core, usage in used["usage_breakdown"]["neuroncore_memory_usage"].items():
                            g.labels(**lab, neuroncore=int(core), memory_location=None).set(usage[cat])
                elif group == "neuron_runtime_vcpu_usage":
                    g = metric(
                        Gauge, "neuron_runtime_vcpu_usage_ratio", "Runtime vCPU utilization ratio", [*lab, "usage_type"]
                    )
                    for k in ("user", "system"):
                        g.labels(**lab, usage_type=k).set(data["vcpu_usage"][k] / 100.0)
                elif group == "neuroncore_counters":
                    g = metric(
                        Gauge, "neuroncore_utilization_ratio", "NeuronCore utilization ratio", [*lab, "neuroncore"]
                    )
                    for core, c in data["neuroncores_in_use"].items():
                        g.labels(**lab, neuroncore=int(core)).set(c["neuroncore_utilization"] / 100.0)
        for group, data in (report["system_data"] or {}).items():
            if group == "memory_info":
                for kind, prefix in (("memory", "system_memory"), ("swap", "system_swap")):
                    for stat in ("total_bytes", "used_bytes"):
                        metric(Gauge, f"{prefix}_{stat}", f"System {kind} {stat} bytes", inst).labels(**inst).set(
                            data[f"{kind}_{stat}"]
                        )
            elif group == "neuron_hw_counters":
                c = metric(
                    Counter,
                    "hardware_ecc_events_total",
                    "Hardware ecc events total",
                    [*inst, "event_type", "neuron_device_index"],
                )
                for dev in data["neuron_devices"]:
                    for event in (
                        "mem_ecc_corrected",
                        "mem_ecc_uncorrected",
                        "sram_ecc_corrected",
                        "sram_ecc_uncorrected",
                    ):
                        c.labels(**inst, event_type=event, neuron_device_index=dev["neuron_device_index"]).inc(
                            dev[event]
                        )
            elif group == "vcpu_usage":
                metric(Gauge, "system_vcpu_count", "System vCPU count", inst).labels(**inst).set(
                    len(data["usage_data"])
                )
                g = metric(Gauge, "system_vcpu_usage_ratio", "System CPU utilization ratio", [*inst, "usage_type"])
                avg = data["average_usage"]
                g.labels(**inst, usage_type="user").set(min(avg["user"] + avg["nice"], 100.0) / 100.0)
                g.labels(**inst, usage_type="system").set(
                    min(avg["system"] + avg["io_wait"] + avg["irq"] + avg["soft_irq"], 100.0) / 100.0
                )
        if "instance" not in made:
            made["instance"] = Info("instance", "EC2 instance information", registry=registry)
            made["instance"].info(inst)
            hw = report["neuron_hardware_info"]
            made["neuron_hardware"] = Info("neuron_hardware", "Neuron Hardware Information", registry=registry)
            made["neuron_hardware"].info(
                {
                    "neuron_device_count": str(hw["neuron_device_count"]),
                    "neuroncore_per_device_count": str(hw["neuroncore_per_device_count"]),
                    "neuron_device_memory_size": str(hw["neuron_device_memory_size"]),
                    **inst,
                }
            )
    return generate_latest(registry).decode()


def _without_created_times(text: str) -> str:
    return re.sub(r"(_created\{[^}]*\}) \S+", r"\1 T", text)


def _without_simulator_mark(text: str) -> str:
    return re.sub(
        r"# HELP trnwatch_simulator_info.*\n# TYPE trnwatch_simulator_info gauge\ntrnwatch_simulator_info\{.*\n",
        "",
        text,
    )


def test_simulator_exporter_writes_what_prometheus_client_writes_for_the_vendor_script():
    host = SimHost(GEN2, 7, 0, "ecc", 1.0)
    reports = [host.report(t) for t in (49, 50)]
    no_runtime = {**host.report(51), "neuron_runtime_data": []}  # the script clears everything
    reports += [no_runtime, host.report(52)]
    state = ExporterState()
    for report in reports:
        state.consume(report)
    ours = state.render()
    assert _without_created_times(_without_simulator_mark(ours)) == _without_created_times(_vendor_text(reports))
    assert 'memory_location="None"' in ours and "execution_errors_created{" in ours
    assert re.search(r'^trnwatch_simulator_info\{.*host="7".*\} 1\.0$', ours, re.M)


def _direct_and_scraped(host: SimHost, tick: int) -> tuple[Ledger, Ledger]:
    direct, scraped = Ledger("live"), Ledger("live")
    direct.ingest(Line("stream", "neuron-monitor", 1000.0, host.report_line(tick)))
    state = ExporterState()
    state.consume(host.report(tick))
    scraped.ingest(Line("exp", "prometheus", 1000.0, scrape_line(state.render())))
    return direct, scraped


@pytest.mark.parametrize("topology, tick", [("trn3-gen2-us", 25), ("trn3-gen1-us", 25), ("trn2.48xlarge", 31)])
def test_scraped_chip_figures_equal_the_hosts_own_stream(topology, tick):
    host = SimHost(get_topology(topology), 0, 3, "healthy", 1.0)
    direct, scraped = _direct_and_scraped(host, tick)
    (a,), (b,) = direct.hosts.values(), scraped.hosts.values()
    assert a.host_id == b.host_id and len(a.chips) == len(b.chips) > 0
    for x, y in zip(a.chips, b.chips, strict=True):
        assert y.hbm_bytes == x.hbm_bytes and y.hbm_capacity_bytes == x.hbm_capacity_bytes
        assert y.util_pct == pytest.approx(x.util_pct, rel=1e-12, abs=1e-9)
        assert y.hbm_by_category_bytes == x.hbm_by_category_bytes
    assert b.simulated and scraped.evidence == "simulated"  # the simulator's series say so
    assert b.memory_total_bytes == a.memory_total_bytes
    assert all(core.flops is None for chip in b.chips for core in chip.cores.values())
    assert all(r.device_latency_s == {} and r.loaded_models == [] for r in b.runtimes.values())


def test_exporter_without_runtimes_reads_as_idle_chips():
    host = SimHost(GEN2, 0, 0, "healthy", 1.0)
    state = ExporterState()
    state.consume(host.report(25))
    state.consume({**host.report(26), "neuron_runtime_data": []})
    ledger = Ledger("live")
    ledger.ingest(Line("exp", "prometheus", 1000.0, scrape_line(state.render())))
    (h,) = ledger.hosts.values()
    assert [(c.util_pct, c.hbm_bytes) for c in h.chips] == [(0.0, 0)] * 4


def test_a_bad_host_in_a_scrape_is_rejected_alone():
    good = ExporterState()
    good.consume(SimHost(GEN2, 0, 0, "healthy", 1.0).report(25))
    bad = ExporterState()
    bad.consume(SimHost(GEN2, 1, 0, "healthy", 1.0).report(25))
    # A core index beyond any host (a label: part of the series' identity, not a value of it).
    bad_text = re.sub(r'neuroncore="5"', 'neuroncore="2048"', bad.render(), count=1)
    ledger = Ledger("live")
    ledger.ingest(Line("exp", "prometheus", 1000.0, scrape_line(good.render() + bad_text)))
    assert len(ledger.hosts) == 1
    stats = ledger.sources["exp"]
    assert stats.reports == 1 and stats.rejected == {"schema": 1}
    assert "beyond the bound" in stats.last_rejection


UTIL_FIELD = "neuron_runtime_data[].report.neuroncore_counters.neuroncores_in_use{}.neuroncore_utilization"
CORE_MEMORY_FIELD = (
    "neuron_runtime_data[].report.memory_used.neuron_runtime_used_bytes.usage_breakdown.neuroncore_memory_usage{}{}"
)


def _as_promql_line(body: str) -> str:
    """A scrape body's samples as one host's "promql" line (server mode's shape, values as text)."""
    rows = [[name, labels, repr(value)] for name, labels, value in scrape_samples(body)]
    return json.dumps({"interval_s": 1.0, "eval_s": 1000.0, "instance_id": rows[0][1]["instance_id"], "samples": rows})


@pytest.mark.parametrize("kind", ["prometheus", "promql"])
def test_one_out_of_range_value_rejects_that_field_only_as_on_stdin(kind):
    # Issue 9.9: a utilisation of 100.01% on one core (chip 0) and negative bytes in one core's
    # memory (chip 2) once discarded the whole host report. Now each value goes alone, counted
    # under the field a neuron-monitor line names for it, with the same figures as that line gives.
    report = SimHost(GEN2, 0, 0, "healthy", 1.0).report(25)
    report["neuron_runtime_data"][0]["report"]["neuroncore_counters"]["neuroncores_in_use"]["1"][
        "neuroncore_utilization"
    ] = 100.01
    memory = report["neuron_runtime_data"][2]["report"]["memory_used"]["neuron_runtime_used_bytes"]
    memory["usage_breakdown"]["neuroncore_memory_usage"]["9"]["tensors"] = -5
    stdin = Ledger("live")
    stdin.ingest(Line("nm", "neuron-monitor", 1000.0, json.dumps(report)))
    state = ExporterState()
    state.consume(report)
    body = state.render()
    assert "1.0001" in body and "} -5" in body
    text = scrape_line(body) if kind == "prometheus" else _as_promql_line(body)
    ledger = Ledger("live")
    ledger.ingest(Line("exp", kind, 1000.0, text))
    stats = ledger.sources["exp"]
    assert stats.reports == 1 and not stats.rejected
    assert stats.rejected_fields == {UTIL_FIELD: 1, CORE_MEMORY_FIELD: 1} == stdin.sources["nm"].rejected_fields
    assert "is out of range" in stats.last_field_rejection
    (host,) = ledger.hosts.values()
    (direct,) = stdin.hosts.values()
    # Chip 0 has no utilisation sample this period, chip 2 no HBM figure; everything else is kept.
    assert [c.util_pct is None for c in host.chips] == [True, False, False, False]
    assert [c.hbm_bytes is None for c in host.chips] == [False, False, True, False]
    assert [(c.util_pct, c.hbm_bytes) for c in host.chips] == [(c.util_pct, c.hbm_bytes) for c in direct.chips]
    assert host.memory_used_bytes is not None and host.vcpu_busy_pct is not None


def test_a_value_beyond_a_float_is_a_removed_field():
    body = re.sub(r"(neuroncore_utilization_ratio\{[^}]*\}) \S+", r"\1 1" + "0" * 5000, _gen2_body(), count=1)
    ledger = Ledger("live")
    ledger.ingest(Line("exp", "prometheus", 1000.0, scrape_line(body)))  # float('1000...') is inf
    stats = ledger.sources["exp"]
    assert not stats.rejected and stats.rejected_fields == {UTIL_FIELD: 1} and len(ledger.hosts) == 1


@pytest.mark.parametrize(
    "kind, text, reason",
    [
        ("prometheus", "not json", "not-json"),
        ("prometheus", "[1, 2]", "not-object"),
        ("prometheus", json.dumps({"body": 5}), "schema"),
        ("prometheus", json.dumps({"body": 'neuroncore_utilization_ratio{instance_id="i-1" 0.5\n'}), "not-exposition"),
        (
            "promql",
            json.dumps({"instance_id": "i-1", "samples": [["neuroncore_utilization_ratio", {"neuroncore": 1}, "2"]]}),
            "schema",
        ),
        (
            "promql",
            json.dumps({"instance_id": "i-1", "samples": [["instance_info", {"instance_type": 5}, "1"]]}),
            "schema",
        ),
        ("promql", json.dumps({"instance_id": "i-1", "samples": [["x", {}]]}), "schema"),
        ("promql", json.dumps({"samples": []}), "schema"),
    ],
)
def test_unusable_prometheus_lines_are_counted_by_reason(kind, text, reason):
    ledger = Ledger("live")
    ledger.ingest(Line("src", kind, 1000.0, text))
    assert ledger.sources["src"].rejected == {reason: 1} and not ledger.hosts


# --- server mode: answers split per host -----------------------------------------------------


def _answer(rows: list[tuple[dict, str]]) -> bytes:
    return json.dumps(
        {
            "status": "success",
            "data": {
                "resultType": "vector",
                "result": [{"metric": labels, "value": [1000.0, value]} for labels, value in rows],
            },
        }
    ).encode()


def test_server_answers_become_one_line_per_host_with_ecc_detail_only_where_needed():
    hw = {
        "__name__": "neuron_hardware_info",
        "instance_id": "i-a",
        "instance_type": "trn3pds.16xlarge",
        "neuron_device_count": "2",
        "neuroncore_per_device_count": "4",
        "neuron_device_memory_size": "154618822656",
        "job": "neuron",
        "instance": "10.0.0.5:8000",
    }
    answers = [
        (None, _answer([(hw, "1"), ({**hw, "instance_id": "i-b"}, "1")])),
        (
            "neuroncore_utilization_ratio",
            _answer(
                [
                    ({"instance_id": "i-a", "runtime_tag": "r0", "neuroncore": "1"}, "0.5"),
                    ({"instance_id": "i-a", "runtime_tag": "r1", "neuroncore": "4"}, "1"),
                ]
            ),
        ),
        (
            "neuroncore_memory_usage_total",
            _answer(
                [
                    ({"instance_id": "i-a", "runtime_tag": "r0", "neuroncore": "1"}, "1000"),
                    ({"instance_id": "i-a", "runtime_tag": "r1", "neuroncore": "4"}, "2e3"),
                ]
            ),
        ),
        (
            "hardware_ecc_events_total",
            _answer(
                [
                    ({"instance_id": "i-a", "neuron_device_index": "0"}, "0"),
                    ({"instance_id": "i-a", "neuron_device_index": "1"}, "3"),
                ]
            ),
        ),
        (
            "hardware_ecc_events_total",
            _answer([({"instance_id": "i-a", "neuron_device_index": "1", "event_type": "mem_ecc_corrected"}, "3")]),
        ),
        ("system_memory_total_bytes", _answer([({"instance_id": "i-a"}, "1e12"), ({}, "5")])),
    ]
    lines = host_lines(answers, 5.0, 1000.0)
    assert [json.loads(line)["instance_id"] for line in lines] == ["i-a", "i-b"]
    assert "10.0.0.5:8000" not in lines[0]  # Prometheus' own target labels are dropped
    ledger = Ledger("live")
    for line in lines:
        ledger.ingest(Line("http://prom:9090", "promql", 1000.0, line))
    a, b = ledger.hosts["i-a"], ledger.hosts["i-b"]
    assert [c.util_pct for c in a.chips] == [12.5, 25.0]
    assert [c.hbm_bytes for c in a.chips] == [1000, 2000]
    assert a.chips[0].hbm_by_category_bytes == {"total": 1000}
    assert a.chips[0].ecc.totals() == dict.fromkeys(
        ["mem_ecc_corrected", "mem_ecc_uncorrected", "sram_ecc_corrected", "sram_ecc_uncorrected"], 0
    )
    assert a.chips[1].ecc.series["mem_ecc_corrected"].last == 3
    assert a.memory_total_bytes == 10**12 and a.period_s == 5.0
    assert [(c.util_pct, c.hbm_bytes) for c in b.chips] == [(0.0, 0), (0.0, 0)]  # no runtime series: idle
    cluster = ledger.read(1001.0).cluster
    assert (cluster.hosts_fresh, cluster.chips, cluster.hbm_used_bytes) == (2, 4, 3000)


def test_prometheus_layout_decoded_row_by_row_equals_a_whole_decode():
    rows = [
        ({"instance_id": f"i-{i % 3}", "runtime_tag": 'tag "quoted", {braced}', "neuroncore": str(i)}, f"0.{i}")
        for i in range(10)
    ]
    spaced = _answer(rows)  # json.dumps' default separators: decoded whole
    compact = json.dumps(json.loads(spaced), separators=(",", ":")).encode()  # Prometheus' own layout
    assert compact.startswith(b'{"status":"success","data":{"resultType":"vector","result":[')
    name = "neuroncore_utilization_ratio"
    assert host_lines([(name, compact)], 1.0, 0.0) == host_lines([(name, spaced)], 1.0, 0.0)
    assert len(host_lines([(name, compact)], 1.0, 0.0)) == 3
    empty = b'{"status":"success","data":{"resultType":"vector","result":[]}}'
    assert host_lines([(name, empty)], 1.0, 0.0) == []


def _refresh_answers() -> list[tuple[str | None, bytes]]:
    """One refresh's answers in Prometheus' own layout: three hosts interleaved in every answer,
    Prometheus' target labels, a series with no instance_id, and an answer keeping its names."""

    def compact(rows):
        return json.dumps(json.loads(_answer(rows)), separators=(",", ":")).encode()

    target = {"job": "neuron", "instance": "10.0.0.5:8000"}
    util = [
        ({"instance_id": f"i-{h}", "runtime_tag": "r0", "neuroncore": str(c), **target}, f"0.{ord(h) - 96}{c}")
        for c in range(8)
        for h in "cab"
    ]
    info = [({"__name__": "instance_info", "instance_id": f"i-{h}", **target}, "1") for h in "bca"]
    info.append(({"__name__": "up", **target}, "1"))  # not an exporter series
    memory = [({"instance_id": f"i-{h}"}, str(10**12 + i)) for i, h in enumerate("abc")]
    return [
        (None, compact(info)),
        ("neuroncore_utilization_ratio", compact(util)),
        ("system_memory_total_bytes", compact(memory)),
    ]


def _lines_by_whole_decode(answers, interval_s: float, eval_s: float) -> list[str]:
    """The split's contract from a whole `json.loads` of each answer (the reference)."""
    hosts: dict[str, list] = {}
    for name, body in answers:
        for row in json.loads(body)["data"]["result"]:
            labels = {k: v for k, v in row["metric"].items() if k not in ("instance_id", "job", "instance")}
            if "instance_id" in row["metric"]:
                series = name or labels.pop("__name__")
                hosts.setdefault(row["metric"]["instance_id"], []).append([series, labels, row["value"][1]])
    return [
        json.dumps(
            {"interval_s": interval_s, "eval_s": eval_s, "instance_id": i, "samples": samples}, separators=(",", ":")
        )
        for i, samples in sorted(hosts.items())
    ]


def test_split_gives_the_lines_and_records_a_whole_decode_gives():
    answers = _refresh_answers()
    lines = host_lines(answers, 15.0, 1000.0)
    assert lines == _lines_by_whole_decode(answers, 15.0, 1000.0)
    assert [json.loads(line)["instance_id"] for line in lines] == ["i-a", "i-b", "i-c"]
    reference = [parse_prometheus_line("promql", line) for line in _lines_by_whole_decode(answers, 15.0, 1000.0)]
    assert [parse_prometheus_line("promql", line) for line in lines] == reference
    assert all(len(records) == 1 and isinstance(records[0], Report) for records in reference)


def test_split_on_the_event_loop_pauses_for_it_and_gives_the_same_lines():
    answers = _refresh_answers()
    turns = []

    async def main():
        done = asyncio.Event()

        async def other_work():  # runs only when the split pauses
            while not done.is_set():
                turns.append(1)
                await asyncio.sleep(0)

        watcher = asyncio.create_task(other_work())
        await asyncio.sleep(0)
        lines = await host_lines_in_slices(answers, 15.0, 1000.0, slice_s=0.0)  # a pause after every step
        done.set()
        await watcher
        return lines

    assert asyncio.run(main()) == host_lines(answers, 15.0, 1000.0)
    rows = 3 * 8 + 3 + 3  # the rows with an instance_id, then one step per host line
    assert len(turns) >= rows + 3


def test_a_failed_answer_fails_the_split_on_the_event_loop_too():
    from trnwatch.collectors.prometheus_sources import AnswerUnreadable

    cut = _refresh_answers()[1][1][:200]
    with pytest.raises(AnswerUnreadable, match="unreadable"):
        asyncio.run(host_lines_in_slices([("neuroncore_utilization_ratio", cut)], 1.0, 0.0, slice_s=0.0))


def test_failed_query_answer_is_an_error_not_data():
    from trnwatch.collectors.prometheus_http import FetchError

    with pytest.raises(FetchError, match="bad_data: parse error"):
        host_lines(
            [(None, json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error"}).encode())],
            1.0,
            0.0,
        )
    with pytest.raises(FetchError, match="unreadable"):
        host_lines([(None, b"<html>")], 1.0, 0.0)
    with pytest.raises(FetchError, match="unreadable"):  # cut short in Prometheus' own layout
        host_lines([(None, b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{}')], 1.0, 0.0)


def test_query_url_keeps_a_path_prefix_and_encodes_the_query():
    url = query_url("https://gw.example/prometheus/", 'sum by (a) (x{b="c"})', 12.5)
    assert url.startswith("https://gw.example/prometheus/api/v1/query?query=sum+by+%28a%29")
    assert url.endswith("&time=12.500")


# --- URLs and tokens from outside ---------------------------------------------------------------


@pytest.mark.parametrize(
    "url, message",
    [
        ("file:///etc/passwd", "only http:// and https://"),
        ("javascript:alert(1)", "only http:// and https://"),
        ("ftp://prom:21/", "only http:// and https://"),
        ("prom:9090", "only http:// and https://"),
        ("http://user:secret@prom:9090", "carries credentials"),
        ("http://token@prom:9090", "carries credentials"),
        ("http:///api", "has no host"),
        ("http://:9090", "has no host"),
        ("http://prom:99999/", "cannot be read"),
        ("http://prom:9090/ metrics", "whitespace"),
        ("http://prom:9090/\nHost: evil", "whitespace"),
        ("http://prom:9090/#frag", "fragment"),
        ("", "empty"),
    ],
)
def test_hostile_urls_are_refused(url, message):
    with pytest.raises(UrlError, match=message) as refused:
        check_url(url)
    assert "secret" not in str(refused.value)


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:9090", "https://prom.internal/prometheus", "http://[::1]:8000/metrics"]
)
def test_ordinary_urls_pass(url):
    assert check_url(url) == url


def test_fetch_of_a_url_without_a_host_is_refused_not_sent_to_this_host():
    from trnwatch.collectors.prometheus_http import fetch

    with pytest.raises(UrlError, match="has no host"):
        fetch("http:///metrics", None, 1.0, 100)


def test_token_from_file_or_environment_and_never_in_errors(tmp_path):
    path = tmp_path / "token"
    path.write_text("s3cr3t-token\n")
    assert load_token(path, {}) == "s3cr3t-token"
    assert load_token(None, {"TRNWATCH_PROMETHEUS_TOKEN": "from-env"}) == "from-env"
    assert load_token(None, {}) is None
    path.write_text("s3cr3t\nInjected: header\n")
    with pytest.raises(TokenError) as refused:
        load_token(path, {})
    assert "s3cr3t" not in str(refused.value)
    path.write_text("  \n")
    with pytest.raises(TokenError, match="empty"):
        load_token(path, {})


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--scrape", "file:///etc/passwd"], "only http:// and https://"),
        (["--prometheus", "http://admin:hunter2@prom:9090"], "carries credentials"),
        (["--prometheus", "javascript:alert(1)"], "only http:// and https://"),
        (
            ["--scrape", "http://ok:8000/metrics", "--ssh-config", "/dev/null"],
            "--ssh-config and --remote-command go with",
        ),
    ],
)
def test_cli_refuses_bad_prometheus_options(tmp_path, capsys, argv, message):
    status = main(["watch", *argv, "--headless", "--duration", "1", "--receipt", str(tmp_path / "r.json")])
    assert status == 2
    err = capsys.readouterr().err
    assert message in err and "hunter2" not in err
    assert not (tmp_path / "r.json").exists()


# --- bad input: one line never ends a source (issue 9.1, 9.2) --------------------------------


def _gen2_body(host_index: int = 0, tick: int = 25) -> str:
    state = ExporterState()
    state.consume(SimHost(GEN2, host_index, 0, "healthy", 1.0).report(tick))
    return state.render()


def test_a_scrape_line_starting_with_a_brace_is_a_counted_rejection_and_the_source_goes_on():
    ledger = Ledger("live")
    body = _gen2_body() + '{__name__="neuroncore_utilization_ratio",instance_id="i-x",neuroncore="0"} 0.5\n'
    ledger.ingest(Line("exp", "prometheus", 1000.0, scrape_line(body)))
    ledger.ingest(Line("exp", "prometheus", 1001.0, scrape_line(_gen2_body(tick=26))))
    stats = ledger.sources["exp"]
    assert stats.rejected == {"not-exposition": 1} and "inside the braces" in stats.last_rejection
    assert stats.reports == 1 and len(ledger.hosts) == 1


@pytest.mark.parametrize(
    "kind, text",
    [
        ("promql", "[" * 5000),
        ("promql", '{"instance_id": "i-1", "samples": ' + "[" * 5000 + "]" * 5000 + "}"),
        ("prometheus", '{"body": ' + "[" * 5000 + "}"),
    ],
)
def test_deeply_nested_json_is_a_counted_rejection_not_a_recursion_error(kind, text):
    ledger = Ledger("live")
    ledger.ingest(Line("src", kind, 1000.0, text))
    assert sum(ledger.sources["src"].rejected.values()) == 1 and not ledger.hosts


def test_deeply_nested_server_answer_is_unreadable_not_a_recursion_error():
    from trnwatch.collectors.prometheus_sources import AnswerUnreadable

    with pytest.raises(AnswerUnreadable, match="RecursionError"):
        host_lines([(None, b"[" * 5000)], 1.0, 0.0)
    with pytest.raises(AnswerUnreadable):  # in Prometheus' own layout, decoded row by row
        host_lines([(None, b'{"status":"success","data":{"resultType":"vector","result":[' + b"[" * 5000)], 1.0, 0.0)


@pytest.mark.parametrize(
    "label, value",
    [
        ("neuron_device_count", "1000000"),
        ("neuron_device_count", "18446744073709551616"),
        ("neuroncore_per_device_count", "9" * 400),
        ("neuroncore_per_device_count", "0"),
        ("neuron_device_memory_size", "9" * 5000),
        ("neuron_device_count", "\u00b2"),  # a digit to str.isdigit, not to int()
    ],
)
def test_hardware_counts_from_labels_are_bounded(label, value):
    body = re.sub(rf'{label}="[^"]*"', f'{label}="{value}"', _gen2_body())
    ledger = Ledger("live")
    ledger.ingest(Line("exp", "prometheus", 1000.0, scrape_line(body)))
    stats = ledger.sources["exp"]
    assert stats.rejected == {"schema": 1} and not ledger.hosts
    assert label in stats.last_rejection


@pytest.mark.parametrize(
    "pattern, replacement, reason",
    [
        (r'neuroncore="15"', 'neuroncore="2048"', "schema"),
        (r'neuron_device_index="3"', 'neuron_device_index="64"', "schema"),
        (r"(neuroncore_utilization_ratio\{[^}]*\}) \S+", r"\1 1" + "0" * 400, "not-exposition"),  # beyond a float
    ],
)
def test_indices_and_values_from_input_are_bounded(pattern, replacement, reason):
    body = re.sub(pattern, replacement, _gen2_body(), count=1)
    assert body != _gen2_body()
    ledger = Ledger("live")
    ledger.ingest(Line("exp", "prometheus", 1000.0, scrape_line(body)))
    assert ledger.sources["exp"].rejected == {reason: 1} and not ledger.hosts


def test_scrapes_become_typed_records_that_declare_their_counters():
    from trnwatch.collectors.prometheus import ExporterReport

    (report,) = parse_prometheus_line("prometheus", scrape_line(_gen2_body()))
    assert type(report) is ExporterReport and report.declared_counters
    assert not Report.declared_counters  # neuron-monitor's own reports declare nothing


# --- stale utilisation gauges (issue 9.8) --------------------------------------------------------


def _hang_side_by_side(ticks: range, host_index: int = 2):
    """The hang scenario's host read from its own stream and through the simulator's exporter,
    scraped once per report: per tick, (direct chip utilisations, scraped ones, scraped host)."""
    host = SimHost(GEN2, host_index, 0, "hang", 1.0)
    state, direct, scraped = ExporterState(), Ledger("live"), Ledger("live")
    for tick in ticks:
        state.consume(host.report(tick))
        direct.ingest(Line("stream", "neuron-monitor", 1000.0 + tick, host.report_line(tick)))
        scraped.ingest(Line("exp", "prometheus", 1000.0 + tick, scrape_line(state.render())))
        (a,), (b,) = direct.hosts.values(), scraped.hosts.values()
        yield [c.util_pct for c in a.chips], [c.util_pct for c in b.chips], b


def test_exporter_keeps_a_hung_hosts_last_busy_gauges():
    host = SimHost(GEN2, 2, 0, "hang", 1.0)
    state = ExporterState()
    for tick in range(25, 35):  # the hang starts at tick 30: no core is listed from then on
        state.consume(host.report(tick))
    assert host.report(34)["neuron_runtime_data"][0]["report"]["neuroncore_counters"]["neuroncores_in_use"] == {}
    busy = re.findall(r"^neuroncore_utilization_ratio\{.*\} (\S+)$", state.render(), re.M)
    assert len(busy) == 16 and all(float(v) > 0.5 for v in busy)  # as the vendor script: never removed


def test_stale_gauges_of_a_hung_host_read_as_its_own_stream_and_are_marked():
    for tick, (direct, scraped, host) in zip(range(20, 40), _hang_side_by_side(range(20, 40)), strict=True):
        assert scraped == pytest.approx(direct, rel=1e-12, abs=1e-9), tick
        stale = [chip.util_stale_cores for chip in host.chips]
        if tick < 30:
            assert stale == [()] * 4 and all(u > 50 for u in scraped)
        else:
            assert scraped == [0.0] * 4 and stale == [(4 * c, 4 * c + 1, 4 * c + 2, 4 * c + 3) for c in range(4)]
    assert [c.util_stale_samples for c in host.chips] == [10] * 4


def test_a_repeated_scrape_between_exporter_updates_changes_no_judgement():
    host = SimHost(GEN2, 2, 0, "hang", 1.0)
    state, ledger = ExporterState(), Ledger("live")
    for tick in (27, 28):
        state.consume(host.report(tick))
        for again in range(2):  # polled twice per report: nothing moved the second time
            ledger.ingest(Line("exp", "prometheus", 1000.0 + tick + again / 2, scrape_line(state.render())))
    (h,) = ledger.hosts.values()
    assert all(c.util_stale_cores == () and c.util_pct > 50 for c in h.chips)
    state.consume(host.report(30))
    for again in range(2):
        ledger.ingest(Line("exp", "prometheus", 1030.0 + again / 2, scrape_line(state.render())))
        assert all(len(c.util_stale_cores) == 4 and c.util_pct == 0.0 for c in h.chips)


def test_receipt_says_how_many_samples_had_stale_gauges(tmp_path):
    from trnwatch.ledger.receipt import build_receipt

    *_, (_, _, host) = _hang_side_by_side(range(26, 36))
    ledger = Ledger("live")
    ledger.hosts[host.host_id] = host
    receipt = build_receipt(ledger, "eof", written_at_s=2000.0)
    assert [c.util_stale_samples for c in receipt.chips] == [6] * 4


def test_a_bad_count_removes_its_counter_map_only_as_on_stdin():
    # A counter map none of whose entries may be null goes whole, by either path: rank0's errors,
    # while its statuses and every other runtime's counters are folded.
    report = SimHost(GEN2, 0, 0, "healthy", 1.0).report(25)
    report["neuron_runtime_data"][0]["report"]["execution_stats"]["error_summary"]["generic"] = -1
    stdin = Ledger("live")
    stdin.ingest(Line("nm", "neuron-monitor", 1000.0, json.dumps(report)))
    body = re.sub(
        r'(execution_errors_total\{[^}]*error_type="generic"[^}]*runtime_tag="llama3-pretrain-rank0"[^}]*\}) \S+',
        r"\1 -1.0",
        _gen2_body(),
        count=1,
    )
    assert body != _gen2_body()
    ledger = Ledger("live")
    ledger.ingest(Line("exp", "prometheus", 1000.0, scrape_line(body)))
    field = "neuron_runtime_data[].report.execution_stats.error_summary{}"
    assert ledger.sources["exp"].rejected_fields == {field: 1} == stdin.sources["nm"].rejected_fields
    assert not ledger.sources["exp"].rejected
    for direct in (ledger, stdin):
        (host,) = direct.hosts.values()
        totals = {r.tag: r.executions.totals() for r in host.runtimes.values()}
        assert not any(k.startswith("error.") for k in totals["llama3-pretrain-rank0"])
        assert any(k.startswith("status.") for k in totals["llama3-pretrain-rank0"])
        assert all(
            any(k.startswith("error.") for k in t) for tag, t in totals.items() if tag != "llama3-pretrain-rank0"
        )


def test_a_refresh_past_its_series_bound_keeps_the_bound_and_counts_the_rest(monkeypatch):
    """A server answering with 800,000 distinct series took 1.35 GiB: a refresh keeps at most
    MAX_SERIES_PER_REFRESH series (in answer order) and says how many it dropped, a rejection of
    its own (`series-over-limit`); the hosts of the series kept are folded."""
    monkeypatch.setattr("trnwatch.collectors.prometheus_sources.MAX_SERIES_PER_REFRESH", 4)
    rows = [({"instance_id": f"i-{i}", "runtime_tag": "r", "neuroncore": "0"}, "0.5") for i in range(10)]
    compact = json.dumps(json.loads(_answer(rows)), separators=(",", ":")).encode()
    lines = host_lines([("neuroncore_utilization_ratio", compact)], 1.0, 1000.0)
    assert json.loads(lines[0]) == {"series_dropped": 6, "series_kept": 4}
    assert [json.loads(line)["instance_id"] for line in lines[1:]] == ["i-0", "i-1", "i-2", "i-3"]
    ledger = Ledger("live")
    for line in lines:
        ledger.ingest(Line("http://prom:9090", "promql", 1000.0, line))
    assert dict(ledger.sources["http://prom:9090"].rejected) == {"series-over-limit": 1}
    assert sorted(ledger.hosts) == ["i-0", "i-1", "i-2", "i-3"]
