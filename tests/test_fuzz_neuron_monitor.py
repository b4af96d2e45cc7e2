"""Fuzzing the neuron-monitor decoder and the fold (issue 9): mutated reports, one stream.

Each example mutates real and hand-written reports (values replaced by hostile ones, keys
dropped, huge numeric keys added, text cut or spliced), feeds the lines to one ledger and checks
that no exception escapes, that every line is counted exactly once (folded, or rejected with a
reason, never as `internal`), that memory stays under a bound, and that a receipt still renders.
Bounded in time by `max_examples` (no deadline: the shared machine is noisy).
"""

import json
import tracemalloc

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trnwatch.collectors.lines import Line
from trnwatch.ledger.ledger import Ledger
from trnwatch.ledger.receipt import build_receipt
from trnwatch.ledger.receipt_markdown import render_markdown
from tests import reports as R
from tests.test_neuron_monitor import REALWORLD

BASES = [
    R.report(
        [
            R.runtime(
                7, "rank0", [0, 1], util={0: 88.0, 1: 12.5}, executions=R.executions(generic=2), physical_key="v4d"
            ),
            R.runtime(8, "rank1", [4], util={4: 50.0}, executions=R.executions()),
        ],
        system_data=R.system(ecc={1: 3}),
    ),
    R.report([], hardware=R.hardware_trn2(chips=1, lnc=1)),
    *[json.loads(p.read_text()) for p in sorted(REALWORLD.glob("nm-*.json")) if p.stat().st_size < 8000],
]

HOSTILE_NUMBERS = st.sampled_from([-1, 0, 1, 65, 100, 101, 10**6, 2**63, 2**64, 2**1024, 10**400, 1e308, -0.0, 100.01])
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    HOSTILE_NUMBERS,
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
    st.text(alphabet="x", min_size=250, max_size=5000),
)
KEYS = st.one_of(st.text(max_size=6), st.integers(min_value=0, max_value=10**5).map(str), HOSTILE_NUMBERS.map(str))
VALUES = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4), max_leaves=12
)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, prefix + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _paths(value, prefix + (i,))


def _at(node, path):
    for key in path:
        node = node[key]
    return node


@st.composite
def mutated_lines(draw) -> str:
    obj = json.loads(json.dumps(draw(st.sampled_from(BASES))))
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        paths = [p for p in _paths(obj) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = _at(obj, path[:-1])
        action = draw(st.sampled_from(["number", "number", "replace", "drop", "grow"]))
        if action == "number":  # a number of the right type, past its bound or close to it
            numeric = [p for p in paths if isinstance(_at(obj, p), (int, float)) and not isinstance(_at(obj, p), bool)]
            if numeric:
                path = draw(st.sampled_from(numeric))
                parent = _at(obj, path[:-1])
            parent[path[-1]] = draw(HOSTILE_NUMBERS)
        elif action == "drop":
            del parent[path[-1]]
        elif action == "grow" and isinstance(parent, dict):
            parent[draw(KEYS)] = parent[path[-1]]  # e.g. core "0" copied under core "99999"
        else:
            parent[path[-1]] = draw(VALUES)
    text = json.dumps(obj, separators=(",", ":"))
    cut = draw(st.sampled_from(["none", "none", "none", "truncate", "splice"]))
    if cut == "truncate":
        text = text[: draw(st.integers(min_value=0, max_value=len(text)))]
    elif cut == "splice":
        at = draw(st.integers(min_value=0, max_value=len(text)))
        text = text[:at] + draw(st.text(max_size=8)) + text[at:]
    return text.replace("\n", " ")


@settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(mutated_lines(), min_size=1, max_size=6))
def test_mutated_reports_are_folded_or_rejected_once_each_within_a_memory_bound(lines):
    ledger = Ledger("live")
    tracemalloc.start()
    try:
        for i, text in enumerate(lines):
            ledger.ingest(Line("fuzz", "neuron-monitor", 1000.0 + i, text))  # must not raise
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    stats = ledger.sources["fuzz"]
    assert "internal" not in stats.rejected, stats.last_rejection  # a defect, not bad input
    assert stats.reports + sum(stats.rejected.values()) == sum(1 for t in lines if t.strip())
    assert peak_bytes < 16 << 20
    render_markdown(build_receipt(ledger, "eof", written_at_s=2000.0))
