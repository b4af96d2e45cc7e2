"""The receipt builder on any mix of timestamped and untimestamped job log lines (issue 19 item 9,
issue 25): NxD Core lines printed by tests/nxd_logs.py (tp_pp step lines carry no time, the
library's checkpoint lines do), read through the real translator and folded into a ledger,
with line times in the past, the future, equal, out of order, and receive times likewise. The
receipt, its Markdown and its picture are always built; no event older than the plausible span
reaches the window."""

import io

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trnwatch.collectors.job_events import JobLogStats
from trnwatch.collectors.lines import Line
from trnwatch.collectors.log_profiles import LogTranslator, profile_registry
from trnwatch.ledger.job import MAX_TS_BEHIND_S
from trnwatch.ledger.ledger import Ledger
from trnwatch.ledger.receipt import build_receipt
from trnwatch.ledger.receipt_markdown import render_markdown
from trnwatch.ledger.timeline_svg import render_timeline_svg
from tests import nxd_logs

T0 = 1_790_000_000.0
PROFILES = profile_registry()
YEAR_S = 365.25 * 86400


def tp_pp_line(step: int, step_time_s: float) -> str:
    return nxd_logs.tp_pp_new(
        None, step=step, loss=2.0, tput=64 / step_time_s, grad_norm=1.0, iteration_time=step_time_s
    )


def library_line(ts: float, text: str) -> str:
    stream = io.StringIO()
    nxd_logs.library_logger(stream, nxd_logs.VirtualClock(ts)).info(text)
    return stream.getvalue().rstrip("\n")


def fold(lines: list[tuple[str, float]], **options) -> tuple[Ledger, LogTranslator]:
    """Each (text, received_s) through the translator into a ledger, as follow_job_log does."""
    ledger = Ledger("live")
    translator = LogTranslator("run", PROFILES, **options)
    for text, received_s in lines:
        try:
            events = translator.feed(text, received_s)
        except ValueError:
            ledger.ingest(Line("joblog:run.log", "job", received_s, text))
            continue
        for event in events:
            ledger.ingest(Line("joblog:run.log", "job", received_s, event.model_dump_json()))
        stats = JobLogStats(profile=translator.profile_name, lines=translator.lines, unparsed=translator.unparsed)
        ledger.ingest(Line("joblog:run.log", "job-log", received_s, stats.model_dump_json()))
    return ledger, translator


def receipt_of(ledger: Ledger):
    receipt = build_receipt(ledger, "eof", written_at_s=T0)
    render_markdown(receipt, "r.svg")
    render_timeline_svg(receipt)
    return receipt


def test_untimestamped_steps_read_in_one_poll_with_timestamped_saves_build_a_receipt():
    # The case that ended in ZeroDivisionError: tp_pp steps (no time on the line) read after the
    # fact all get the same receive time; the library's save lines carry their own.
    lines = [(tp_pp_line(step, 2.0), T0) for step in range(1, 11)]
    lines.insert(5, (library_line(T0 - 30, "synced saving of checkpoint step_5 began"), T0))
    lines.insert(6, (library_line(T0 - 28, "synced saving of checkpoint step_5 completed"), T0))
    ledger, _ = fold(lines, global_batch=64, seq_len=4096)
    receipt = receipt_of(ledger)
    assert receipt.job is not None and ledger.job is not None and ledger.job.ranks[0].last_step == 10
    assert receipt.timeline.bucket_s > 0


def test_an_event_stamped_decades_before_it_was_received_is_rejected_not_a_56_year_window():
    lines = [(tp_pp_line(1, 2.0), T0), (library_line(0.0, "synced saving of checkpoint step_1 began"), T0)]
    lines += [(tp_pp_line(2, 2.0), T0 + 2)]
    ledger, _ = fold(lines)
    receipt = receipt_of(ledger)
    [source] = receipt.sources
    assert source.rejected_by_reason == {"job-ts-behind": 1}
    assert receipt.goodput is not None and receipt.goodput.window.seconds == 2.0


TIME = st.one_of(
    st.floats(-1e9, 1e9).map(lambda offset: T0 + offset),  # past and future, decades each way
    st.floats(-5, 5).map(lambda offset: T0 + offset),  # close together, out of order
    st.sampled_from([0.0, -1.0, T0, T0 - 11 * YEAR_S, T0 + 3600 * 24]),
)
ENTRY = st.one_of(
    st.tuples(st.just("step"), st.integers(0, 40), st.floats(0.001, 100.0)),
    st.tuples(st.just("save"), st.integers(0, 40), TIME),
    st.tuples(st.just("noise"), st.just(0), st.just(0.0)),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries=st.lists(st.tuples(ENTRY, TIME), max_size=40), batch=st.sampled_from([None, 64]))
def test_any_mix_of_line_times_and_receive_times_builds_a_receipt(entries, batch):
    lines = []
    for (kind, step, value), received_s in entries:
        if kind == "step":
            lines.append((tp_pp_line(step, value), received_s))
        elif kind == "save":
            state = "began" if step % 2 else "completed"
            lines.append((library_line(value, f"synced saving of checkpoint step_{step} {state}"), received_s))
        else:
            lines.append(("Setting OMP_NUM_THREADS environment variable", received_s))
    ledger, translator = fold(lines, global_batch=batch, seq_len=4096 if batch else None)
    receipt = receipt_of(ledger)
    folded = sum(s.reports + s.rejected for s in receipt.sources if s.kind == "job")
    assert folded >= translator.events  # every event folded or counted as rejected (job-log lines too)
    if receipt.goodput is not None:
        latest = max(received_s for _, received_s in lines)
        assert receipt.goodput.window.seconds <= latest + 60 - (min(r for _, r in lines) - MAX_TS_BEHIND_S)
        parts = receipt.goodput.productive_s + sum(receipt.goodput.badput_s.model_dump().values())
        assert abs(parts - receipt.goodput.window.seconds) < 1e-3 * max(1.0, receipt.goodput.window.seconds)
