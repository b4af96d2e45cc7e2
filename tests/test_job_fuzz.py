"""Fuzz the job decoder and fold (hypothesis, bounded by example count): mutated trnwatch.job/1
lines never raise out of `Ledger.ingest`, and every line is counted exactly once, folded or
rejected by reason."""

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trnwatch.collectors.lines import Line
from trnwatch.ledger.ledger import Ledger

T0 = 1_800_000_000.0
VALID = {
    "run_start": {
        "world_size": 4,
        "host": "h0",
        "pid": 1,
        "local_rank": 0,
        "backend": "cpu",
        "core": 0,
        "chip": 0,
        "model": {"name": "m", "params": 10},
        "precision": "bf16",
        "global_batch": 8,
        "micro_batch": 1,
        "seq_len": 16,
        "parallel": {"tp": 1, "pp": 1, "dp": 4},
        "versions": {"torch": "2"},
        "restart": 0,
    },
    "phase": {"phase": "steady", "state": "begin"},
    "step": {"step": 3, "step_time_s": 0.5, "compute_s": 0.4, "tokens": 128, "loss": 2.0},
    "collective": {"op": "all_reduce", "bytes": 1024, "latency_s": 0.01, "wait_s": 0.001, "step": 3},
    "checkpoint": {"action": "save", "state": "begin", "step": 3, "blocking": False},
    "heartbeat": {"step": 3, "region": "compute", "region_since": T0},
    "error": {"message": "boom", "source": "runtime", "exit_code": 1, "signal": "SIGKILL", "failed_ts": T0},
    "run_end": {"status": "failed"},
}
ODD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


@st.composite
def job_line(draw) -> str:
    kind = draw(st.sampled_from(sorted(VALID)))
    event = {
        "v": "trnwatch.job/1",
        "ts": T0 + draw(st.floats(0, 100)),
        "run": draw(st.sampled_from(["r", "r", "other"])),
        "rank": draw(st.integers(0, 6)),
        "event": kind,
        **VALID[kind],
    }
    for key in draw(st.lists(st.sampled_from(sorted(event) + ["extra", "lnc", "seq_len", "blocking"]), max_size=3)):
        if draw(st.booleans()):
            event[key] = draw(ODD_VALUES)
        else:
            event.pop(key, None)
    if draw(st.integers(0, 9)) == 0:
        event["ts"] = draw(st.sampled_from([T0 * 1000, -1.0, 0.0, 1e308]))
    text = json.dumps(event)
    if draw(st.integers(0, 9)) == 0:  # a torn or garbled line
        cut = draw(st.integers(1, max(1, len(text) - 1)))
        text = text[:cut] + draw(st.text(max_size=5))
    return text if text.strip() else "x"


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(job_line(), min_size=1, max_size=40))
def test_every_job_line_is_folded_or_rejected_exactly_once_and_nothing_raises(lines):
    ledger = Ledger("live")
    for n, text in enumerate(lines):
        ledger.ingest(Line("job:rank-00000.jsonl", "job", T0 + n, text))
        if ledger.job is not None:  # every query works on whatever was folded
            ledger.job.summary(T0 + n)
    stats = ledger.sources["job:rank-00000.jsonl"]
    assert stats.reports + sum(stats.rejected.values()) == len(lines)
    if ledger.job is not None:
        section = ledger.job.summary(T0 + len(lines) + 60)
        counts = section.ranks
        assert counts.running + counts.finished + counts.failed + counts.dead == counts.seen
