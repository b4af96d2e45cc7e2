"""Passive log source: follow_job_log reads a log through its profile and yields trnwatch.job/1
lines plus its counts; the ledger folds them like the emitter's files and names the profile."""

import asyncio
import io
from pathlib import Path

import pytest

from trnwatch.collectors.job_events import JobLogStats, parse_job_line, parse_job_log_stats
from trnwatch.collectors.job_files import FileTail
from trnwatch.collectors.job_log import follow_job_log, log_sources
from trnwatch.collectors.lines import Line
from trnwatch.collectors.log_profiles import LogTranslator, profile_registry
from trnwatch.ledger.ledger import Ledger
from tests import generated_logs, nxd_logs

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
PROFILES = profile_registry()


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> dict:
    return generated_logs.write_all(tmp_path_factory.mktemp("generated"))


async def collect(agen, until):
    got = []
    async with asyncio.timeout(10):
        async for line in agen:
            got.append(line)
            if until(got):
                break
    await agen.aclose()
    return got


def test_file_tail_for_logs_ends_lines_at_carriage_returns(tmp_path):
    path = tmp_path / "bar.log"
    path.write_bytes(b"a\r\nb\rc\nd\re")  # "e" is still being drawn
    tail = FileTail(str(path), split_cr=True)
    lines, _ = tail.read_lines()
    tail.close()
    assert [line.text for line in lines] == ["a", "b", "c", "d"]
    plain = FileTail(str(path))
    lines, _ = plain.read_lines()
    plain.close()
    assert [line.text for line in lines] == ["a", "b\rc"]  # rank files keep newline-only framing


def test_follow_job_log_yields_events_counts_and_passes_invalid_event_lines_on(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(
        "noise\nstep 21 step_time 3.25s throughput 78.8 seq/s step loss 1.95 grad norm 0.77\n"
        "step 22 step_time 1e999s throughput 1 seq/s step loss 1.0 grad norm 1\n"
    )
    got = asyncio.run(collect(follow_job_log(str(log), PROFILES, poll_s=0.02), lambda got: got[-1].kind == "job-log"))
    assert {line.source_id for line in got} == {"joblog:train.log"}
    step, raw, counts = got
    assert parse_job_line(step.text).step == 21 and parse_job_line(step.text).run == "train"
    assert raw.kind == "job" and raw.text.startswith("step 22")  # to be rejected and counted by the ledger
    assert parse_job_log_stats(counts.text).model_dump() == {
        "profile": "nxd",
        "lines": 3,
        "unparsed": 1,
        "note": None,
        "error_files": {},
    }


def test_a_progress_bar_that_never_writes_a_newline_still_yields_its_steps(tmp_path):
    # The first epoch's redraws of a real NxD Training bar (Lightning 2.5.0), its first four steps.
    with open(FIXTURES / "nxdt_lightning_2.5.0_file.log", encoding="utf-8", newline="") as real:
        redraws = [r for r in real.read().split("\r") if r.startswith("Epoch 0: ")][:8]  # up to 4/16's counter
    log = tmp_path / "nxdt.log"
    log.write_text("".join("\r" + redraw for redraw in redraws))
    got = asyncio.run(collect(follow_job_log(str(log), PROFILES, poll_s=0.02), lambda got: got[-1].kind == "job-log"))
    assert [parse_job_line(line.text).step for line in got if line.kind == "job"] == [1, 2, 3]  # 4 is being drawn


def test_one_log_per_rank_gets_the_rank_from_its_path():
    run, logs = log_sources(["/fsx/logs/run7/attempt_0/0/stdout.log", "/fsx/logs/run7/attempt_0/1/stdout.log"])
    assert run == "attempt_0"
    assert [(log.source_id, log.default_rank) for log in logs] == [
        ("joblog:0/stdout.log", 0),
        ("joblog:1/stdout.log", 1),
    ]
    run, [log] = log_sources(["/fsx/train.log"])
    assert (run, log.source_id, log.default_rank) == ("train", "joblog:train.log", 0)


def test_the_ledger_folds_a_passive_log_and_names_its_profile(generated):
    ledger = Ledger("live")
    path, truth = generated["torchtitan_plain.log"]

    async def read():
        return await collect(
            follow_job_log(str(path), PROFILES, global_batch=8, seq_len=8192, poll_s=0.02),
            lambda got: got[-1].kind == "job-log",
        )

    for line in asyncio.run(read()):
        ledger.ingest(line)
    stats = ledger.sources["joblog:torchtitan_plain.log"]
    assert (stats.kind, stats.log_profile, stats.unparsed_lines, sum(stats.rejected.values())) == (
        "job",
        "torchtitan",
        0,  # every line TorchTitan printed is read (Starting job is start-up)
        0,
    )
    summary = ledger.job.summary(ledger.job.last_event_ts).model_dump(mode="json")
    assert summary["log_profiles"] == {"joblog:torchtitan_plain.log": "torchtitan"}
    steady = sorted(truth.step_time_s[step] for step in (12, 13, 15))  # 14 follows a save and is not timed
    assert summary["throughput"]["tokens_per_s"] == pytest.approx(8 * 8192 / steady[1], rel=0.05)


def test_a_bad_counts_line_is_rejected_and_counted():
    ledger = Ledger("live")
    ledger.ingest(Line("joblog:x.log", "job-log", 1.0, '{"profile": 3}'))
    assert ledger.sources["joblog:x.log"].rejected["job-log"] == 1


def fold_fixture(name: str, received_s: float = 1_900_000_000.0, **options):
    import re

    from trnwatch.collectors.log_profiles import LogTranslator
    from trnwatch.ledger.job import JobLedger

    translator = LogTranslator("run", PROFILES, **options)
    job = JobLedger()
    last_ts = None
    for text in re.split(r"\r\n|\r|\n", (FIXTURES / name).read_text(encoding="utf-8")):
        for event in translator.feed(text, received_s):
            job.ingest(event, received_s)
            last_ts = event.ts
    return job, last_ts


def test_an_open_async_nxd_save_never_masks_a_hang(tmp_path):
    # The log ends with step 50 after `async saving of checkpoint step_40 requested`: the
    # save's `completed` would only be logged inside the next save's wait, which never comes.
    nxd_logs.tp_zero1_fixture(tmp_path / "nxd_tp_zero1.log")
    job, last_ts = fold_fixture(str(tmp_path / "nxd_tp_zero1.log"), global_batch=64, seq_len=4096)
    assert job.diagnose(last_ts + 4).verdict == "steady"
    hung = job.diagnose(last_ts + 40)
    assert hung.verdict == "stalled" and "checkpoint" not in hung.reason


def test_torchrun_summary_blames_the_root_cause_not_the_ranks_the_agent_stopped():
    job, last_ts = fold_fixture("torchrun_sigkill.log")
    diagnosis = job.diagnose(last_ts + 1)
    assert diagnosis.verdict == "failed"
    assert diagnosis.reason.startswith("first failure rank 1 ") and "SIGKILL" in diagnosis.reason


def test_torchtitan_tps_stays_per_device_in_the_receipt_section(generated):
    path, truth = generated["torchtitan_plain.log"]
    job, last_ts = fold_fixture(str(path), global_batch=8, seq_len=8192)
    throughput = job.summary(last_ts).throughput
    # Median "tps" of the timed steady steps (12, 13, 15; 14 follows a save and is not timed).
    assert throughput.tokens_per_s_per_device == sorted(truth.tps[step] for step in (12, 13, 15))[1]
    steady = sorted(truth.step_time_s[step] for step in (12, 13, 15))
    # the job's rate, from batch shape and time (the log's ms timestamps)
    assert throughput.tokens_per_s == pytest.approx(8 * 8192 / steady[1], rel=1e-3)


def test_a_runtime_warning_is_counted_as_evidence_and_never_fails_the_job():
    # Defect: every `error` event read as a failure, so a retried `CCOM WARN` made the job FAILED
    # and rank 1 its suspect while rank 0 kept stepping.
    job, last_ts = fold_fixture("neuron_ccom_warnings.log")
    section = job.summary(last_ts + 1)
    assert section.verdict == "steady" and section.failures == [] and section.suspects == []
    assert section.ranks.failed == 0
    assert (section.warnings.count, section.warnings.ranks) == (4, 1)
    latest = section.warnings.latest[-1]
    assert (latest.rank, latest.source) == (1, "runtime")
    assert latest.message.startswith("Timeout waiting for incoming connection (waited 120 sec)")


def test_a_warning_stays_evidence_on_a_suspect_once_the_job_does_fail():
    job, last_ts = fold_fixture("neuron_runtime_errors.log")
    diagnosis = job.diagnose(last_ts + 1)
    assert diagnosis.verdict == "failed" and diagnosis.reason.startswith("first failure rank 3 ")
    assert 5 not in {failure.rank for failure in job.failure_reports(last_ts + 1)}  # its CCOM WARN is not a failure
    assert job.ranks[5].status == "running" and job.ranks[5].warnings == 1
    assert job.summary(last_ts + 1).warnings.latest[0].message.startswith("Timeout waiting for RX (waited 120 sec)")


def test_a_detected_profile_that_reads_no_step_says_so_and_checkpoint_lines_alone_never_stall():
    # A layout no rule reads (the banner detects nxd; tp_zero1's step lines cut off after the
    # step, as a user's own print might), with the library's save lines every 2 s.
    stream = io.StringIO()
    clock = nxd_logs.VirtualClock(1_790_000_000.0)
    nxd_logs.run(stream, "tp_zero1", clock, steps=6, step_s=2.0, save_every=2, save_s=0.5, banner=True)
    ledger = Ledger("live")
    translator = LogTranslator("run", PROFILES)
    for text in stream.getvalue().splitlines():
        text = text.split(" step_loss")[0]
        for event in translator.feed(text, 1_790_000_000.0):
            ledger.ingest(Line("joblog:run.log", "job", 1_790_000_000.0, event.model_dump_json()))
    stats = JobLogStats(profile=translator.profile_name, lines=translator.lines, unparsed=translator.unparsed)
    ledger.ingest(Line("joblog:run.log", "job-log", 1_790_000_000.0, stats.model_dump_json()))
    assert ledger.job is not None and translator.profile_name == "nxd"
    for later_s in (0, 70, 600):
        diagnosis = ledger.job.diagnose(clock.now() + later_s)
        assert diagnosis.verdict == "no-data", diagnosis
    assert diagnosis.reason == "no step read: joblog:run.log (nxd) read 14 line(s), 8 matched no rule"
