"""Goodput and segments on passive logs (issue 19 item 7): steps after the last compile are steady
unless the log says otherwise, the warm-up inferred as the job ledger infers it; TorchTitan's
first step's time is its compile; the parts add up for every built-in profile. Logs are printed by
the generators of the public statements (tests/nxd_logs.py, tests/torchtitan_logs.py,
tests/generated_logs.py) or are real captures (Lightning 2.5.0 run for real)."""

import io
import re
from pathlib import Path

import pytest

from trnwatch.collectors.job_events import JobLogStats
from trnwatch.collectors.lines import Line
from trnwatch.collectors.log_profiles import LogTranslator, profile_registry
from trnwatch.ledger.ledger import Ledger
from trnwatch.ledger.receipt import build_receipt
from tests import generated_logs, nxd_logs, torchtitan_logs

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
PROFILES = profile_registry()
T0 = 1_790_000_000.0


def receipt_of(text: str, received_s: float, **options):
    """The log read in one go (after the fact), as follow_job_log reads it, to a receipt."""
    ledger = Ledger("live")
    translator = LogTranslator("run", PROFILES, **options)
    events = []
    for line in re.split(r"\r\n|\r|\n", text):
        events += translator.feed(line, received_s)
    for event in translator.settle(events, received_s):
        ledger.ingest(Line("joblog:run.log", "job", received_s, event.model_dump_json()))
    stats = JobLogStats(profile=translator.profile_name, lines=translator.lines, unparsed=translator.unparsed)
    ledger.ingest(Line("joblog:run.log", "job-log", received_s, stats.model_dump_json()))
    return build_receipt(ledger, "eof", written_at_s=received_s), translator


def adds_up(goodput) -> None:
    parts = goodput.productive_s + sum(goodput.badput_s.model_dump().values())
    assert parts == pytest.approx(goodput.window.seconds, abs=1e-5)
    assert min(goodput.badput_s.model_dump().values()) >= -1e-5 and goodput.productive_s >= 0  # rounding residue


@pytest.mark.parametrize("layout", sorted(nxd_logs.TIMESTAMPED))
def test_nxd_steps_after_the_compile_are_productive_and_the_compile_is_its_own_badput(layout):
    stream = io.StringIO()
    clock = nxd_logs.VirtualClock(T0)
    truth = nxd_logs.run(stream, layout, clock, steps=30, step_s=2.0, compile_s=60.0, banner=True)
    receipt, _ = receipt_of(stream.getvalue(), clock.now(), global_batch=nxd_logs.SEQS_PER_STEP)
    goodput = receipt.goodput
    assert goodput is not None
    adds_up(goodput)
    assert goodput.badput_s.compile == pytest.approx(60.0, abs=1.0)  # the compile lines' own times
    # Every step after the compile is steady (1 s timestamps; 2 s steps): the first line's step
    # gives no time of its own, the rest do.
    assert goodput.productive_s == pytest.approx(truth.step_end_s[30] - truth.step_end_s[1], abs=2.0)


def test_an_inferred_warm_up_goes_to_startup_as_the_steady_state_figures_infer_it():
    stream = io.StringIO()
    clock = nxd_logs.VirtualClock(T0)
    # tp_pp prints each step's own time: two slow first steps (graph tracing), then 2 s steps.
    truth = nxd_logs.run(stream, "tp_pp", clock, steps=11, step_s=2.0, first_steps_s=(40.0, 30.0))
    ledger = Ledger("live")
    translator = LogTranslator("run", PROFILES)
    for line in stream.getvalue().splitlines():  # watched live: each line received as it is printed
        received_s = truth.step_end_s[int(line.split()[1])]
        for event in translator.feed(line, received_s):
            ledger.ingest(Line("joblog:run.log", "job", received_s, event.model_dump_json()))
    receipt = build_receipt(ledger, "eof", written_at_s=clock.now())
    assert receipt.job is not None and receipt.job.throughput is not None
    assert (receipt.job.throughput.boundary, receipt.job.throughput.warmup_steps) == ("inferred", 2)
    goodput = receipt.goodput
    assert goodput is not None
    adds_up(goodput)
    # The window starts at step 1's line: step 2's 30 s is the warm-up inside it, at start-up.
    assert goodput.badput_s.startup == pytest.approx(30.0, abs=1e-3)
    assert goodput.productive_s == pytest.approx(9 * 2.0, abs=1e-3)


def test_torchtitans_first_step_is_its_compile():
    stream = io.StringIO()
    clock = nxd_logs.VirtualClock(T0)
    truth = torchtitan_logs.run(stream, clock, steps=12, step_s=2.0, init_s=15.0, first_step_s=45.0)
    receipt, translator = receipt_of(stream.getvalue(), clock.now(), global_batch=8, seq_len=8192)
    assert translator.profile_name == "torchtitan"
    goodput = receipt.goodput
    assert goodput is not None
    adds_up(goodput)
    assert goodput.window.seconds == pytest.approx(truth.step_end_s[12] - truth.started_s, abs=0.01)
    assert goodput.badput_s.startup == pytest.approx(15.0, abs=0.01)  # Starting job -> Training starts
    assert goodput.badput_s.compile == pytest.approx(truth.step_time_s[1], abs=0.01)
    assert goodput.productive_s == pytest.approx(sum(truth.step_time_s[n] for n in range(2, 13)), abs=0.01)
    assert receipt.job is not None and receipt.job.cold_compile_s == pytest.approx(45.0, abs=0.01)


@pytest.mark.parametrize(
    "name, profile",
    [
        ("nxd_tp_pp.log", "nxd"),
        ("nxdt_lightning_2.5.0_file.log", "nxdt"),
        ("torchtitan_plain.log", "torchtitan"),
        ("torchtitan_torchrun_color.log", "torchtitan"),
        ("lightning_2.5.0_file.log", "lightning"),
    ],
)
def test_goodput_adds_up_for_every_builtin_profile(name, profile, tmp_path):
    path = generated_logs.path_of(generated_logs.write_all(tmp_path), name)
    receipt, translator = receipt_of(path.read_text(encoding="utf-8"), 2_000_000_000.0, global_batch=8)
    assert translator.profile_name == profile
    assert receipt.goodput is not None
    adds_up(receipt.goodput)
