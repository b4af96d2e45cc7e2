"""Parsing neuron-monitor reports: every group, LNC=1/2, Trn2/Trn3, real captures, bad lines."""

import json
from pathlib import Path

import pytest

from trnwatch.collectors.neuron_monitor import MAX_LINE_BYTES, ReportRejected, decode_report
from tests import reports as R

# Real captures: in the repository those whose source's licence allows it (fixtures/realworld/
# SOURCES.md); the rest only in the development machines' ../shared/realworld beside the checkout.
REALWORLD = Path(__file__).resolve().parent / "fixtures" / "realworld"
SHARED_REALWORLD = Path(__file__).resolve().parents[1].parent / "shared" / "realworld"


def parse_report(text: str):
    """The report of a line that must decode whole (no value removed for crossing a bound)."""
    report, rejected_fields = decode_report(text)
    assert rejected_fields == []
    return report


def realworld(name: str) -> str:
    """A real capture's text: the repository's copy, else the development machines' (see above)."""
    for folder in (REALWORLD, SHARED_REALWORLD):
        if (folder / name).exists():
            return (folder / name).read_text()
    pytest.skip(
        f"{name}: a real capture whose source's licence is unknown, so not in this repository "
        f"(tests/fixtures/realworld/SOURCES.md); only in ../shared/realworld beside a development checkout"
    )


def test_every_documented_group_is_read_from_a_trn3_lnc2_report():
    rt = R.runtime(
        48213, "llama3-pretrain-rank0", [0, 1], util={0: 88.37, 1: 86.9}, executions=R.executions(), physical_key="v4d"
    )
    r = parse_report(R.line(R.report([rt])))
    entry = r.neuron_runtime_data[0]
    counters = entry.report.neuroncore_counters.neuroncores_in_use
    assert counters[0].neuroncore_utilization == 88.37
    assert counters[1].physical == {"nc_v4.2": counters[1].v4d["nc_v4.2"], "nc_v4.3": counters[1].v4d["nc_v4.3"]}
    assert entry.report.execution_stats.latency_stats.total_latency["p99"] == 0.604
    assert (
        entry.report.memory_used.neuron_runtime_used_bytes.usage_breakdown.neuroncore_memory_usage[1]["tensors"]
        == R.GIB
    )
    assert entry.report.memory_used.loaded_models[0].subgraphs["sg_00"].neuron_device_index == 0
    assert entry.report.neuron_runtime_vcpu_usage.vcpu_usage.user == 6.42
    assert r.system_data.neuron_hw_counters.neuron_devices[1].neuron_device_index == 1
    assert r.system_data.vcpu_usage.usage_data[3]["idle"] == 88.0
    assert r.system_data.memory_info.memory_total_bytes == 824633720832
    assert r.neuron_hardware_info.neuroncore_version == "v4d"
    assert r.neuron_hardware_info.neuron_device_memory_size == 144 * R.GIB


def test_trn2_lnc2_reports_its_per_physical_split_under_v3d():
    rt = R.runtime(1, "t", [0], util={0: 50.0}, physical_key="v3d")
    r = parse_report(R.line(R.report([rt], hardware=R.hardware_trn2())))
    assert set(r.neuron_runtime_data[0].report.neuroncore_counters.neuroncores_in_use[0].physical) == {
        "nc_v3.0",
        "nc_v3.1",
    }
    assert r.neuron_hardware_info.neuron_device_type == "trainium2"


def test_lnc1_reports_have_eight_cores_per_chip_and_no_physical_split():
    rt = R.runtime(1, "t", list(range(8)), util={c: 10.0 for c in range(8)})
    r = parse_report(R.line(R.report([rt], hardware=R.hardware_trn3(lnc=1))))
    assert r.neuron_hardware_info.neuroncore_per_device_count == 8
    assert r.neuron_runtime_data[0].report.neuroncore_counters.neuroncores_in_use[7].physical == {}


def test_effective_flops_integer_utilisation_and_unknown_fields_are_accepted():
    text = R.line(
        {
            "neuron_runtime_data": [
                {
                    "pid": 3,
                    "report": {
                        "neuroncore_counters": {
                            "neuroncores_in_use": {
                                "0": {"neuroncore_utilization": 100, "effective_flops": 123, "future_field": [1, 2]}
                            },
                            "period": 1.0,
                            "error": "",
                        }
                    },
                }
            ],
            "brand_new_group": {"x": 1},
        }
    )
    core = parse_report(text).neuron_runtime_data[0].report.neuroncore_counters.neuroncores_in_use[0]
    assert core.neuroncore_utilization == 100.0 and core.effective_flops == 123


def test_missing_and_null_groups_are_tolerated():
    r = parse_report(
        '{"neuron_runtime_data": null, "system_data": null, "instance_info": {}, "neuron_hardware_info": null}'
    )
    assert r.neuron_runtime_data is None and r.system_data is None
    assert parse_report("{}").instance_info is None


@pytest.mark.parametrize(
    "name",
    [
        "nm-wandb-trn1-1.json",
        "nm-wandb-trn1-2.json",
        "nm-wandb-trn1-3.json",
        "nm-allsmi-trn1-1.json",
        "nm-inf1kr-1.json",
        "nm-inf1kr-2.json",
        "nm-cwat-dummy-edited-1.json",
    ],
)
def test_every_real_capture_parses(name):
    r = parse_report(realworld(name))
    assert r.instance_info.instance_id.startswith("i-")
    assert r.neuron_hardware_info.neuroncore_per_device_count in (2, 4)


def test_old_style_hardware_info_has_no_capacity():
    hw = parse_report(realworld("nm-inf1kr-1.json")).neuron_hardware_info
    assert hw.neuron_device_memory_size is None and hw.neuron_device_type is None and hw.neuron_device_count == 1


def test_error_string_beside_zeroed_values_is_kept():
    r = parse_report(realworld("nm-cwat-dummy-edited-1.json"))
    vcpu = r.neuron_runtime_data[0].report.neuron_runtime_vcpu_usage
    assert vcpu.error and not vcpu.ok


GOOD = json.loads(R.line(R.report([R.runtime(1, "t", [0], util={0: 50.0})])))


def _mutated(path, value):
    obj = json.loads(json.dumps(GOOD))
    target = obj
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return R.line(obj)


BAD_LINES = {
    "not json at all": ("hello world", "not-json"),
    "truncated report": (R.line(GOOD)[:-40], "not-json"),
    "a JSON array": ("[1, 2, 3]", "not-object"),
    "a JSON string": ('"neuron"', "not-object"),
    "JSON null": ("null", "not-object"),
    "pid as string": (_mutated(["neuron_runtime_data", 0, "pid"], "1234"), "schema"),
    "utilisation as string": (
        _mutated(
            [
                "neuron_runtime_data",
                0,
                "report",
                "neuroncore_counters",
                "neuroncores_in_use",
                "0",
                "neuroncore_utilization",
            ],
            "88.3",
        ),
        "schema",
    ),
    "count as float": (_mutated(["system_data", "memory_info", "memory_used_bytes"], 5.0), "schema"),
    "device count as bool": (_mutated(["neuron_hardware_info", "neuron_device_count"], True), "schema"),
    "core index not a number": (
        _mutated(
            ["neuron_runtime_data", 0, "report", "neuroncore_counters", "neuroncores_in_use"],
            {"core0": {"neuroncore_utilization": 1.0}},
        ),
        "schema",
    ),
    "runtime list is an object": (_mutated(["neuron_runtime_data"], {"pid": 1}), "schema"),
    # NaN and Infinity are not JSON (RFC 8259), whatever some encoders write.
    "NaN utilisation": (
        R.line(GOOD).replace('"neuroncore_utilization":50.0', '"neuroncore_utilization":NaN'),
        "not-json",
    ),
    "Infinity bytes": (
        _mutated(["system_data", "memory_info", "memory_used_bytes"], 7).replace(
            '"memory_used_bytes":7', '"memory_used_bytes":Infinity'
        ),
        "not-json",
    ),
    "nesting deeper than the decoder goes": (R.line(GOOD)[:-1] + ',"x":' + "[" * 5000 + "]" * 5000 + "}", "not-json"),
    "an integer of 5000 digits": (
        _mutated(["system_data", "memory_info", "memory_used_bytes"], 7).replace(
            '"memory_used_bytes":7', '"memory_used_bytes":' + "9" * 5000
        ),
        "schema",
    ),
    "device index missing": (
        _mutated(["system_data", "neuron_hw_counters", "neuron_devices", 0], {"mem_ecc_corrected": 1}),
        "schema",
    ),
    "group is a number": (_mutated(["system_data", "vcpu_usage"], 7), "schema"),
}


@pytest.mark.parametrize("label", sorted(BAD_LINES))
def test_bad_line_is_rejected_with_a_reason(label):
    text, reason = BAD_LINES[label]
    with pytest.raises(ReportRejected) as exc:
        parse_report(text)
    assert exc.value.reason == reason


def test_oversize_line_is_rejected_before_parsing():
    with pytest.raises(ReportRejected) as exc:
        parse_report("{" + " " * MAX_LINE_BYTES + "}")
    assert exc.value.reason == "oversize"


# --- bounds: a value past its bound costs that value, not the report (issue 9.1, 9.2, 9.9) --------

UTIL_0 = [
    "neuron_runtime_data",
    0,
    "report",
    "neuroncore_counters",
    "neuroncores_in_use",
    "0",
    "neuroncore_utilization",
]


def _fields(text):
    report, rejected = decode_report(text)
    return report, {r.field for r in rejected}


def test_utilisation_a_hair_over_100_rejects_that_value_and_keeps_the_report():
    report, fields = _fields(_mutated(UTIL_0, 100.01))
    assert fields == {"neuron_runtime_data[].report.neuroncore_counters.neuroncores_in_use{}.neuroncore_utilization"}
    core = report.neuron_runtime_data[0].report.neuroncore_counters.neuroncores_in_use[0]
    assert core.neuroncore_utilization is None and core.flops == 50_000_000_000_000
    assert report.system_data.memory_info.memory_total_bytes == 824633720832


@pytest.mark.parametrize("host", [10**9, -1, "x" * 10])
def test_an_unreadable_simulator_mark_rejects_the_report_rather_than_reading_it_as_live(host):
    """A bound-breaking field is normally removed alone; the simulator's mark cannot be: without
    it the report's figures would pass as live."""
    obj = json.loads(R.line(R.report([R.runtime(1, "r", [0], util={0: 40.0})])))
    obj["trnwatch_simulator"] = {"topology": "trn3-gen2-us", "host": host, "seed": 0, "scenario": "healthy"}
    with pytest.raises(ReportRejected) as info:
        decode_report(json.dumps(obj))
    assert info.value.reason == "schema" and "trnwatch_simulator" in info.value.detail


def test_negative_bytes_reject_that_value_only():
    report, fields = _fields(_mutated(["system_data", "memory_info", "memory_used_bytes"], -5))
    assert fields == {"system_data.memory_info.memory_used_bytes"}
    assert report.system_data.memory_info.memory_used_bytes is None
    assert report.system_data.memory_info.memory_total_bytes == 824633720832


@pytest.mark.parametrize("count", [18446744073709551616, 10**6, 65, int("9" * 400)])
def test_device_count_past_the_host_limit_is_rejected(count):
    text = f'{{"neuron_hardware_info":{{"neuron_device_count":{count},"neuroncore_per_device_count":2}}}}'
    report, fields = _fields(text)
    assert fields == {"neuron_hardware_info.neuron_device_count"}
    assert report.neuron_hardware_info.neuron_device_count is None
    assert report.neuron_hardware_info.neuroncore_per_device_count == 2


def test_cores_per_chip_of_400_digits_is_rejected():
    text = '{"neuron_hardware_info":{"neuron_device_count":2,"neuroncore_per_device_count":%s}}' % ("9" * 400)
    report, fields = _fields(text)
    assert fields == {"neuron_hardware_info.neuroncore_per_device_count"}
    assert report.neuron_hardware_info.neuron_device_count == 2


def test_a_core_memory_value_past_its_bound_makes_that_core_unknown_not_smaller():
    path = [
        "neuron_runtime_data",
        0,
        "report",
        "memory_used",
        "neuron_runtime_used_bytes",
        "usage_breakdown",
        "neuroncore_memory_usage",
        "0",
        "tensors",
    ]
    report, fields = _fields(_mutated(path, -1))
    usage = report.neuron_runtime_data[0].report.memory_used.neuron_runtime_used_bytes.usage_breakdown
    assert usage.neuroncore_memory_usage == {0: None}
    assert fields == {
        "neuron_runtime_data[].report.memory_used.neuron_runtime_used_bytes.usage_breakdown.neuroncore_memory_usage{}{}"
    }


def test_a_core_index_past_the_host_limit_rejects_that_runtime_group_map():
    obj = json.loads(R.line(GOOD))
    in_use = obj["neuron_runtime_data"][0]["report"]["neuroncore_counters"]["neuroncores_in_use"]
    in_use["5000"] = in_use["0"]
    report, fields = _fields(R.line(obj))
    assert report.neuron_runtime_data[0].report.neuroncore_counters.neuroncores_in_use is None
    assert fields == {"neuron_runtime_data[].report.neuroncore_counters.neuroncores_in_use{}"}
    assert report.neuron_runtime_data[0].report.memory_used is not None


def test_more_runtimes_than_any_host_runs_reject_the_runtime_list():
    from trnwatch.collectors.limits import MAX_RUNTIMES_PER_REPORT

    obj = json.loads(R.line(GOOD))
    obj["neuron_runtime_data"] = [{"pid": i, "neuron_runtime_tag": "t"} for i in range(MAX_RUNTIMES_PER_REPORT + 1)]
    report, fields = _fields(R.line(obj))
    assert report.neuron_runtime_data is None and fields == {"neuron_runtime_data"}
    assert report.neuron_hardware_info.neuron_device_count == 2


def test_a_tag_longer_than_neuron_process_tag_allows_is_rejected():
    report, fields = _fields(_mutated(["neuron_runtime_data", 0, "neuron_runtime_tag"], "x" * 256))
    assert fields == {"neuron_runtime_data[].neuron_runtime_tag"}
    assert report.neuron_runtime_data[0].neuron_runtime_tag is None and report.neuron_runtime_data[0].pid == 1


def test_a_required_field_past_its_bound_takes_its_object_and_the_list_goes_null():
    report, fields = _fields(
        _mutated(["system_data", "neuron_hw_counters", "neuron_devices", 0, "neuron_device_index"], 64)
    )
    assert fields == {"system_data.neuron_hw_counters.neuron_devices[].neuron_device_index"}
    assert report.system_data.neuron_hw_counters.neuron_devices is None
    assert report.system_data.memory_info is not None


def test_report_schema_states_the_bounds():
    from trnwatch.collectors.neuron_monitor import report_json_schema

    schema = report_json_schema()
    hw = schema["$defs"]["HardwareInfo"]["properties"]["neuron_device_count"]
    assert {"type": "integer", "minimum": 0, "maximum": 64} in hw["anyOf"]
