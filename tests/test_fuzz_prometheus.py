"""Fuzzing the Prometheus decoders and the fold (issue 9): mutated exporter scrapes (real captures
and the simulator's exporter) and mutated server answers (promql lines), one stream each.

Checks that no exception escapes `Ledger.ingest`, that no line needs the last-resort rejection
(`internal`, `undecodable`: a defect, not bad input), that every promql line (one host each) is
counted exactly once (folded or rejected with a reason), that memory stays under a bound, and
that a receipt still renders. Bounded in time by `max_examples` (no deadline: the machine is noisy).
"""

import json
import re
import tracemalloc

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trnwatch.collectors.lines import Line
from trnwatch.collectors.prometheus_sources import host_lines
from trnwatch.ledger.ledger import Ledger
from trnwatch.ledger.receipt import build_receipt
from trnwatch.ledger.receipt_markdown import render_markdown
from trnwatch.workloads.sim.exporter import ExporterState
from trnwatch.workloads.sim.fleet import SimHost
from trnwatch.workloads.sim.topology import get_topology
from tests.test_neuron_monitor import REALWORLD


def _sim_body() -> str:
    state = ExporterState()
    state.consume(SimHost(get_topology("trn3-gen2-us"), 1, 0, "healthy", 1.0).report(25))
    return state.render()


BODIES = [_sim_body(), *[p.read_text() for p in sorted(REALWORLD.glob("prom-*.txt"))]]
HOSTILE = st.sampled_from(
    [
        "-1",
        "0",
        "1e400",
        "1" + "0" * 5000,
        "NaN",
        "+Inf",
        "-Inf",
        "1.5",
        "100.01",
        "2048",
        "1000000",
        "18446744073709551616",
        "\u00b2",
        "",
        "x",
        '"',
        "\\",
        "{",
        "}",
        "\\n",
    ]
)
TEXT = st.one_of(HOSTILE, st.text(max_size=12))


@st.composite
def mutated_scrape(draw) -> str:
    lines = draw(st.sampled_from(BODIES)).split("\n")
    for _ in range(draw(st.integers(min_value=1, max_value=5))):
        i = draw(st.integers(min_value=0, max_value=len(lines) - 1))
        line = lines[i]
        action = draw(st.sampled_from(["value", "label", "splice", "copy", "drop"]))
        if action == "value" and " " in line:
            lines[i] = line.rsplit(" ", 1)[0] + " " + draw(HOSTILE)
        elif action == "label" and '="' in line:
            values = list(re.finditer(r'="([^"]*)"', line))
            m = values[draw(st.integers(min_value=0, max_value=len(values) - 1))]
            lines[i] = line[: m.start(1)] + draw(HOSTILE) + line[m.end(1) :]
        elif action == "splice":
            at = draw(st.integers(min_value=0, max_value=len(line)))
            lines[i] = line[:at] + draw(TEXT) + line[at:]
        elif action == "copy":  # the same series again, under another core or device index
            lines.insert(
                i, re.sub(r'(neuroncore|neuron_device_index)="\d+"', lambda m: f'{m.group(1)}="{draw(HOSTILE)}"', line)
            )
        else:
            del lines[i]
    return json.dumps({"url": "u", "interval_s": 1.0, "body": "\n".join(lines)})


def _answer(rows) -> bytes:
    return json.dumps(
        {
            "status": "success",
            "data": {
                "resultType": "vector",
                "result": [{"metric": labels, "value": [1000.0, value]} for labels, value in rows],
            },
        },
        separators=(",", ":"),
    ).encode()


_HW = {
    "__name__": "neuron_hardware_info",
    "instance_id": "i-f",
    "neuron_device_count": "2",
    "neuroncore_per_device_count": "4",
    "neuron_device_memory_size": "1000",
}
_UTIL = {"instance_id": "i-f", "runtime_tag": "r0", "neuroncore": "1"}


@st.composite
def mutated_promql(draw) -> str:
    hw, util = dict(_HW), dict(_UTIL)
    for labels in (hw, util):
        if draw(st.booleans()):
            key = draw(st.sampled_from(sorted(set(labels) - {"instance_id", "__name__"})))
            labels[key] = draw(st.one_of(TEXT, st.integers(), st.none()))
    value = draw(st.one_of(HOSTILE, st.integers().map(str), st.floats().map(str)))
    (line,) = host_lines(
        [(None, _answer([(hw, "1")])), ("neuroncore_utilization_ratio", _answer([(util, value)]))], 1.0, 1000.0
    )
    return line


def _fold(kind: str, lines: list[str]) -> tuple[Ledger, int]:
    ledger = Ledger("live")
    tracemalloc.start()
    try:
        for i, text in enumerate(lines):
            ledger.ingest(Line("fuzz", kind, 1000.0 + i, text))  # must not raise
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    stats = ledger.sources["fuzz"]
    assert not {"internal", "undecodable"} & set(stats.rejected), stats.last_rejection
    render_markdown(build_receipt(ledger, "eof", written_at_s=2000.0))
    return ledger, peak_bytes


@settings(
    max_examples=100,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(mutated_scrape(), min_size=1, max_size=4))
def test_mutated_scrapes_are_folded_or_rejected_within_a_memory_bound(lines):
    ledger, peak_bytes = _fold("prometheus", lines)
    assert peak_bytes < 32 << 20
    assert all(len(h.chips) <= 16 for h in ledger.hosts.values())


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(mutated_promql(), min_size=1, max_size=6))
def test_mutated_server_answers_are_folded_or_rejected_once_each(lines):
    ledger, peak_bytes = _fold("promql", lines)
    stats = ledger.sources["fuzz"]
    assert stats.reports + sum(stats.rejected.values()) == len(lines)
    assert peak_bytes < 16 << 20
