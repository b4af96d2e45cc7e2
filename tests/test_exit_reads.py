"""Nothing lost on exit: when a session ends (SIGTERM, Ctrl-C, --duration, the screen quitting),
each file follower reads once more what is on disk by then, so a line written just before the
end is in the receipt. The followers here poll once an hour: only that last read can see the
second line."""

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from trnwatch.collectors import job_files
from trnwatch.collectors.checkpoints import follow_checkpoint_dir
from trnwatch.collectors.job_files import follow_run_dir
from trnwatch.collectors.job_log import follow_job_log
from trnwatch.collectors.log_profiles import profile_registry
from trnwatch.ledger.ledger import Ledger
from trnwatch.ledger.receipt import build_receipt
from trnwatch.session import Session, SourceSpec
from tests.job_story import run_start, step
from tests.recordings import recorded_lines
from tests.waiting import until, wait_until

HOUR_S = 3600.0


def append(path, text: str) -> None:
    with open(path, "a") as f:
        f.write(text)


def end_after_append(ledger: Ledger, spec: SourceSpec, source_id: str, path, text: str, first_reports: int) -> int:
    """Run a session until `source_id` folded `first_reports` lines, append `text` to `path`, end
    the session as SIGTERM does; return how many lines that source folded in all."""
    session = Session(ledger, [spec])

    async def run() -> str:
        task = asyncio.create_task(session.run())
        await until(
            lambda: source_id in ledger.sources and ledger.sources[source_id].reports >= first_reports,
            f"the first {first_reports} line(s) of {source_id}",
        )
        append(path, text)
        session.stop("sigterm")
        return await task

    assert asyncio.run(run()) == "sigterm"
    return ledger.sources[source_id].reports


def test_a_rank_line_written_just_before_the_end_is_folded(tmp_path):
    rank_file = tmp_path / "rank-00000.jsonl"
    rank_file.write_text(json.dumps(run_start(time.time(), world_size=1)) + "\n")
    spec = SourceSpec(f"job-dir:{tmp_path}", "job", lambda: follow_run_dir(str(tmp_path), poll_s=HOUR_S), relay=True)
    ledger = Ledger("live")
    folded = end_after_append(
        ledger, spec, "job:rank-00000.jsonl", rank_file, json.dumps(step(time.time(), 1, 0.5)) + "\n", first_reports=1
    )
    assert folded == 2
    assert ledger.job.ranks[0].last_step == 1


def test_a_rank_file_that_appears_just_before_the_end_is_folded(tmp_path):
    (tmp_path / "rank-00000.jsonl").write_text(json.dumps(run_start(time.time(), world_size=2)) + "\n")
    late = tmp_path / "rank-00001.jsonl"
    spec = SourceSpec(f"job-dir:{tmp_path}", "job", lambda: follow_run_dir(str(tmp_path), poll_s=HOUR_S), relay=True)
    ledger = Ledger("live")
    end_after_append(
        ledger,
        spec,
        "job:rank-00000.jsonl",
        late,
        json.dumps(run_start(time.time(), rank=1, world_size=2)) + "\n",
        first_reports=1,
    )
    assert ledger.sources["job:rank-00001.jsonl"].reports == 1


def test_a_log_line_written_just_before_the_end_is_folded(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("step 21 step_time 3.25s throughput 78.8 seq/s step loss 1.95 grad norm 0.77\n")
    spec = SourceSpec(
        "joblog:train.log",
        "job",
        lambda: follow_job_log(str(log), profile_registry(), poll_s=HOUR_S, source_id="joblog:train.log"),
    )
    ledger = Ledger("live")
    folded = end_after_append(
        ledger,
        spec,
        "joblog:train.log",
        log,
        "step 22 step_time 3.25s throughput 78.8 seq/s step loss 1.90 grad norm 0.70\nnoise\n",
        first_reports=1,
    )
    assert folded == 2
    assert ledger.sources["joblog:train.log"].unparsed_lines == 1  # the counts after the last read, too


def test_a_checkpoint_finished_just_before_the_end_is_folded(tmp_path):
    (tmp_path / "step_10").mkdir()
    (tmp_path / "step_10" / "checkpoint").write_text("")
    spec = SourceSpec(f"ckpt:{tmp_path.name}", "job", lambda: follow_checkpoint_dir(str(tmp_path), "r", poll_s=HOUR_S))
    ledger = Ledger("live")
    folded = end_after_append(ledger, spec, f"ckpt:{tmp_path.name}", tmp_path / "step_10" / "done", "", first_reports=1)
    assert folded == 2  # the save's begin, then its end


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_rank_line_written_just_before_a_signal_is_in_the_receipt(tmp_path, signum):
    """The real command: it records, so the test knows when the first line was read; then a step
    line and the signal go at once (the follower polls every 0.25 s; only the last read sees it)."""
    run_dir, receipt, recording = tmp_path / "run", tmp_path / "r.json", tmp_path / "s.trnrec"
    run_dir.mkdir()
    rank_file = run_dir / "rank-00000.jsonl"
    rank_file.write_text(json.dumps(run_start(time.time(), world_size=1)) + "\n")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trnwatch",
            "watch",
            "--headless",
            "--job-dir",
            str(run_dir),
            "--receipt",
            str(receipt),
            "--record",
            str(recording),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PATH": "/usr/bin:/bin"},
    )  # no neuron-monitor: job scope only
    try:
        wait_until(
            lambda: recorded_lines(recording),
            "the monitor to record the rank file's first line",
            detail=lambda: f"monitor running: {proc.poll() is None}",
        )
        append(rank_file, json.dumps(step(time.time(), 1, 0.5)) + "\n")
        proc.send_signal(signum)
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    r = json.loads(receipt.read_text())
    (source,) = [s for s in r["sources"] if s["id"] == "job:rank-00000.jsonl"]
    assert source["reports"] == 2, source


def test_a_backlog_on_disk_at_exit_is_read_whole_before_the_receipt(tmp_path, monkeypatch):
    """Thousands of reads' worth of lines land just before the end (4 KiB reads here, so a
    backlog of ~600 KiB is ~150 reads: the exit read used to stop after 16): every line is folded."""
    monkeypatch.setattr(job_files, "CHUNK_BYTES", 4096)
    rank_file = tmp_path / "rank-00000.jsonl"
    rank_file.write_text(json.dumps(run_start(time.time(), world_size=1)) + "\n")
    spec = SourceSpec(f"job-dir:{tmp_path}", "job", lambda: follow_run_dir(str(tmp_path), poll_s=HOUR_S), relay=True)
    ledger = Ledger("live")
    now = time.time()
    backlog = "".join(json.dumps(step(now, i, 0.5)) + "\n" for i in range(1, 4001))
    folded = end_after_append(ledger, spec, "job:rank-00000.jsonl", rank_file, backlog, first_reports=1)
    assert len(backlog) > 150 * 4096 and folded == 4001
    assert ledger.sources["job:rank-00000.jsonl"].end_error is None


@pytest.mark.parametrize("follower", ["run-dir", "job-log"])
def test_the_exit_read_is_bounded_and_the_receipt_says_how_much_was_left(tmp_path, monkeypatch, follower):
    monkeypatch.setattr(job_files, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(job_files, "EXIT_READ_LIMIT_S", 0.0)  # one read, then the limit
    now = time.time()
    if follower == "run-dir":
        path, source_id = tmp_path / "rank-00000.jsonl", "job:rank-00000.jsonl"
        path.write_text(json.dumps(run_start(now, world_size=1)) + "\n")
        spec = SourceSpec(
            f"job-dir:{tmp_path}", "job", lambda: follow_run_dir(str(tmp_path), poll_s=HOUR_S), relay=True
        )
        backlog = "".join(json.dumps(step(now - 2001 + i, i, 0.5)) + "\n" for i in range(1, 2001))
    else:
        path, source_id = tmp_path / "train.log", "joblog:train.log"
        line = "step {} step_time 3.25s throughput 78.8 seq/s step loss 1.95 grad norm 0.77\n"
        path.write_text(line.format(1))
        spec = SourceSpec(
            source_id,
            "job",
            lambda: follow_job_log(str(path), profile_registry(), poll_s=HOUR_S, source_id=source_id),
        )
        backlog = "".join(line.format(i) for i in range(2, 2002))
    ledger = Ledger("live")
    folded = end_after_append(ledger, spec, source_id, path, backlog, first_reports=1)
    stats = ledger.sources[source_id]
    said = re.fullmatch(
        r"(?:([\d,]+) lines, )?([\d,]+) bytes on disk left unread at exit \(the exit read stops after 0 s\)",
        stats.end_error or "",
    )
    assert 1 < folded < 2001 and said, (folded, stats.end_error)
    assert len(backlog) - 2 * 4096 < int(said[2].replace(",", "")) < len(backlog)  # one or two reads were made
    receipt = build_receipt(ledger, "sigterm", "live", written_at_s=time.time())
    (entry,) = [s for s in receipt.sources if s.id == source_id]
    assert entry.end_error == stats.end_error
    if follower == "run-dir":  # the rank file's follower counts what it left, line for line
        assert said[1] is not None and folded + int(said[1].replace(",", "")) == 2001
        assert (stats.unread_lines, stats.unread_bytes) == (2001 - folded, int(said[2].replace(",", "")))


def test_a_stop_in_the_middle_of_a_long_poll_leaves_its_rest_to_the_bounded_exit_read(tmp_path, monkeypatch):
    """The session is asked to stop while its follower is in the middle of one poll of 300 rank
    files (6,300 lines, more than the intake holds) with the exit read's bound already spent: the
    poll is not read on to its end; the files it did not reach are counted unread, and every line
    is folded or counted. Before: the consumer folded the poll's lines itself once the session was
    stopping and read every file it had left (at 18,432 ranks on a starved machine: tens of
    seconds past --duration before the bounded exit read even began)."""
    from trnwatch.collectors.job_files import RunDirFollower

    now = time.time()
    for r in range(300):
        lines = [run_start(now, r, world_size=300)] + [step(now, n, 0.5, r) for n in range(1, 21)]
        (tmp_path / f"rank-{r:05d}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    monkeypatch.setattr(job_files, "EXIT_READ_LIMIT_S", 0.0)
    follower = RunDirFollower(str(tmp_path), poll_s=HOUR_S)
    ledger = Ledger("live")
    session: Session

    async def stopping_lines():
        async for n, item in _numbered(follower.lines()):
            yield item
            if n == 100:  # the first poll, in its fifth file
                session.stop("sigterm")

    session = Session(
        ledger, [SourceSpec(f"job-dir:{tmp_path}", "job", stopping_lines, relay=True, drain=follower.drain)]
    )
    assert asyncio.run(session.run()) == "sigterm"
    rank_sources = [s for s in ledger.sources.values() if s.source_id.startswith("job:rank-")]
    assert len(rank_sources) == 300  # each file: read, or counted unread (none of its lines read)
    unread = [s for s in rank_sources if s.unread_lines]
    assert unread and len(unread) < 300
    assert sum(s.reports for s in rank_sources) + sum(s.unread_lines for s in unread) == 300 * 21
    assert all(s.reports + s.unread_lines in (0, 21) for s in rank_sources)  # never part of a file lost


async def _numbered(items):
    n = 0
    async for item in items:
        n += 1
        yield n, item
