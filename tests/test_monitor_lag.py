"""The monitor knows its own lag and never blames the job for it (ledger/lag.py): silence is
judged only on what was read, and trnwatch being behind is its own finding (kind `monitor`)."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trnwatch.collectors.job_files import RunDirFollower
from trnwatch.collectors.lines import ClockMark, ReadMark
from trnwatch.intake import Intake
from trnwatch.ledger.ledger import Ledger
from tests.job_story import event, run_start, step
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[1]
WRITER = [sys.executable, str(ROOT / "tests" / "job_scale_writer.py")]
TRNWATCH = [sys.executable, "-m", "trnwatch"]


def _write(path: Path, events: list[dict]) -> None:
    with open(path, "a") as f:
        f.write("".join(json.dumps(e) + "\n" for e in events))


def _read_once(follower: RunDirFollower, ledger: Ledger) -> None:
    """One poll of the real follower, folded in its order (its mark last) as the intake folds it."""
    intake = Intake(ledger)
    for item in follower._poll():
        intake.put(item)
    intake.fold_queued()


def _heartbeating_job(run_dir: Path, ranks: int, t0: float, steps: int) -> None:
    for r in range(ranks):
        events = [run_start(t0, r, world_size=ranks)]
        for n in range(1, steps + 1):
            events += [
                step(t0 + n, n, 1.0, r),
                event("heartbeat", t0 + n, r, step=n + 1, region="forward", region_since=t0 + n),
            ]
        _write(run_dir / f"rank-{r:05d}.jsonl", events)


def test_a_source_that_delivers_its_backlog_late_never_makes_a_rank_dead(tmp_path):
    """The follower read the job up to one poll; the job went on writing, but trnwatch did not
    read (its follower behind, its machine starved): 40 s later the ranks are not dead, the
    finding is trnwatch's own, and once the backlog is read the job is steady again."""
    now = time.time()
    t0 = now - 20
    _heartbeating_job(tmp_path, 4, t0, 20)
    ledger = Ledger("live")
    follower = RunDirFollower(str(tmp_path))
    _read_once(follower, ledger)
    read_at_s = ledger.lag.followers[f"job-dir:{tmp_path}"].caught_up_s
    assert read_at_s is not None and read_at_s >= now

    later = read_at_s + 40.0  # 40 s on, nothing more read
    read = ledger.read(later)
    assert read.diagnosis is not None and read.diagnosis.verdict not in ("dead", "stalled", "late"), read.diagnosis
    assert read.job_judged_s == read_at_s
    assert ledger.job.dead_ranks(read.job_judged_s) == []
    (behind,) = [f for f in read.findings if f.kind == "monitor"]
    assert behind.what.startswith(f"trnwatch is 40 s behind on job-dir:{tmp_path}") and behind.severity == "warning"
    assert not [f for f in read.findings if f.kind == "job"]

    # The job kept writing meanwhile; its lines are read (late), and the follower is caught up.
    for r in range(4):
        _write(tmp_path / f"rank-{r:05d}.jsonl", [step(now + 1, 21, 1.0, r)])
    _read_once(follower, ledger)
    caught = ledger.read(ledger.lag.followers[f"job-dir:{tmp_path}"].caught_up_s + 1.0)
    assert not [f for f in caught.findings if f.kind == "monitor"]
    assert caught.diagnosis is not None and caught.diagnosis.verdict == "steady", caught.diagnosis


def test_a_first_read_still_under_way_never_makes_the_ranks_it_read_dead(tmp_path):
    """The follower's first poll reads history file by file (18,432 files on a starved machine
    took minutes); meanwhile the session's ticks go on. Half the files read and 60 s of ticks
    later: no rank is dead, the job is judged as of the follower's start, and the finding is
    trnwatch's own. Before: with no mark yet the job was judged at the ticks' time, and every
    rank read so far was dead (18,432 of 18,432 in the benchmark, DEAD before the hang)."""
    import asyncio

    now = time.time()
    _heartbeating_job(tmp_path, 8, now - 20, 20)  # each rank's last line: `now`
    ledger = Ledger("live")
    follower = RunDirFollower(str(tmp_path))

    async def first_items() -> list:
        items, stream = [], follower.lines()
        async for item in stream:
            items.append(item)
            if (
                sum(1 for i in items if getattr(i, "source_id", "").startswith("job:rank")) >= 4 * 41
            ):  # a run_start and 20 steps and heartbeats each
                break
        await stream.aclose()
        return items

    items = asyncio.run(first_items())  # the mark that nothing is read yet, then 4 of the 8 files
    assert isinstance(items[0], ReadMark) and items[0].waiting_files == 8 and items[0].waiting_bytes > 0
    assert not [i for i in items[1:] if isinstance(i, ReadMark)]  # the poll is not over
    intake = Intake(ledger)
    for item in items:
        intake.put(item)
    for tick in range(1, 61):
        intake.put(ClockMark(items[0].t_s + tick))
    intake.fold_queued()
    read = ledger.read(items[0].t_s + 60)
    assert read.job_judged_s == items[0].t_s
    assert len(ledger.job.ranks) == 4 and ledger.job.dead_ranks(read.job_judged_s) == []
    assert read.diagnosis is not None and read.diagnosis.verdict not in ("dead", "stalled", "late"), read.diagnosis
    assert not [f for f in read.findings if f.kind == "job"]
    (behind,) = [f for f in read.findings if f.kind == "monitor"]
    assert behind.what.startswith(f"trnwatch is 60 s behind on job-dir:{tmp_path}"), behind.what


def test_silence_that_was_read_is_still_judged(tmp_path):
    """Lag never hides a real death: ranks silent in what the follower did read, up to where it
    is caught up, are dead."""
    t0 = time.time() - 20
    _heartbeating_job(tmp_path, 2, t0, 5)  # the job's last line is 15 s old
    ledger = Ledger("live")
    _read_once(RunDirFollower(str(tmp_path)), ledger)
    read = ledger.read(ledger.lag.followers[f"job-dir:{tmp_path}"].caught_up_s)
    assert read.diagnosis is not None and read.diagnosis.verdict == "dead"
    assert not [f for f in read.findings if f.kind == "monitor"]


def test_a_paused_loop_holds_host_judgement_until_the_next_tick(tmp_path):
    """A tick after a pause of the event loop does not move the read-through time: a host whose
    reports waited in its pipe meanwhile is not stale; the next ordinary tick moves it."""
    ledger = Ledger("live")
    ledger.clock_mark(ClockMark(100.0))
    ledger.clock_mark(ClockMark(116.0, paused_s=15.0))
    assert ledger.lag.host_judged_s(120.0) == 100.0 and ledger.lag.pauses == 1
    read = ledger.read(120.0)
    assert read.behind == {"intake": 20.0}
    (behind,) = [f for f in read.findings if f.kind == "monitor"]
    assert behind.what == "trnwatch is 20 s behind on its sources (its event loop paused 15 s)"
    ledger.clock_mark(ClockMark(117.0))
    assert ledger.lag.host_judged_s(120.0) == 117.0
    ledger.clock_mark(ClockMark(118.0, held=True))  # the intake's queue was full: not read up to it
    assert ledger.lag.host_judged_s(120.0) == 117.0 and ledger.lag.held_ticks == 1


def test_read_marks_are_recorded_and_replayed(tmp_path):
    from trnwatch.collectors.recording import Recorder
    from tests.recordings import read_all

    rec = tmp_path / "r.trnrec"
    recorder = Recorder.to_file(rec, "live", {})
    recorder.write(ReadMark("job-dir:/runs/7", 100.0, 4096, 2))
    recorder.write(ReadMark("job-dir:/runs/7", 101.0))
    recorder.close()
    items, _recording = read_all(rec)
    assert [i for i in items if isinstance(i, ReadMark)] == [
        ReadMark("job-dir:/runs/7", 100.0, 4096, 2),
        ReadMark("job-dir:/runs/7", 101.0),
    ]


def _receipt_of(proc: subprocess.Popen, receipt: Path) -> dict:
    _out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return json.loads(receipt.read_text())


def _writer(run_dir: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([*WRITER, str(run_dir), *args], stdout=subprocess.PIPE, text=True)


def _steps_written(writer: subprocess.Popen, count: int) -> float:
    """Wait until the writer wrote `count` more steps; the last one's ts."""
    assert writer.stdout is not None
    ts = 0.0
    for _ in range(count):
        line = writer.stdout.readline()
        assert line.startswith("step "), line
        ts = float(line.split()[2])
    return ts


@pytest.mark.slow
def test_a_stopped_watcher_does_not_see_a_healthy_job_die(tmp_path):
    """A real watcher SIGSTOPped while the writer writes 15 more steps (15 s of the job's time,
    past the 10 s dead rule), then continued: no job or host incident; the receipt says trnwatch
    was behind and paused."""
    run_dir, receipt = tmp_path / "run", tmp_path / "r.json"
    writer = _writer(run_dir, "--ranks", "64")
    watcher = None
    try:
        _steps_written(writer, 3)
        watcher = subprocess.Popen(
            [
                *TRNWATCH,
                "watch",
                "--headless",
                "--job-dir",
                str(run_dir),
                "--receipt",
                str(receipt),
                "--duration",
                "600",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        _steps_written(writer, 5)  # the watcher reads the job live
        watcher.send_signal(signal.SIGSTOP)
        _steps_written(writer, 15)
        watcher.send_signal(signal.SIGCONT)
        _steps_written(writer, 8)  # it catches up, and reads on
        watcher.send_signal(signal.SIGTERM)
        r = _receipt_of(watcher, receipt)
    finally:
        writer.kill()
        writer.communicate()
        if watcher is not None and watcher.poll() is None:
            watcher.send_signal(signal.SIGCONT)
            watcher.kill()
            watcher.communicate()
    faults = [i for i in r["incidents"] if i["kind"] != "monitor"]
    assert faults == [], faults
    assert r["job"]["verdict"] == "steady", r["job"]["reason"]
    monitor = r["monitor"]
    assert monitor["pauses"] >= 1 and monitor["longest_pause_s"] >= 10.0, monitor
    assert max(monitor["worst_behind_s"].values()) >= 10.0, monitor
    assert [i for i in r["incidents"] if i["kind"] == "monitor"], r["incidents"]
    assert monitor["unread_at_exit_bytes"] == 0


@pytest.mark.slow
def test_a_backlog_of_900002_lines_at_exit_is_read_or_counted_per_file(tmp_path):
    """The issue's case: a 900,002-line rank file on disk when a --duration 5 session ends. Every
    line is either folded or counted unread in that file's receipt entry (and the monitor's)."""
    run_dir, receipt = tmp_path / "run", tmp_path / "r.json"
    run_dir.mkdir()
    t0 = time.time() - 900_001 * 0.001
    with open(run_dir / "rank-00000.jsonl", "w") as f:
        f.write(json.dumps(run_start(t0, 0, world_size=1)) + "\n")
        f.writelines(json.dumps(step(t0 + n * 0.001, n, 0.001, 0)) + "\n" for n in range(1, 900_002))
    proc = subprocess.Popen(
        [*TRNWATCH, "watch", "--headless", "--job-dir", str(run_dir), "--receipt", str(receipt), "--duration", "5"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    r = _receipt_of(proc, receipt)
    (source,) = [s for s in r["sources"] if s["id"] == "job:rank-00000.jsonl"]
    assert source["reports"] + source["rejected"] + source["unread_at_exit_lines"] == 900_002, source
    if source["unread_at_exit_lines"]:
        assert r["monitor"]["unread_at_exit_lines"] == source["unread_at_exit_lines"]
        assert source["end_error"].startswith(f"{source['unread_at_exit_lines']:,} lines, ")
        assert "job dead" not in {i["title"] for i in r["incidents"]}


@pytest.mark.slow
def test_a_hang_at_2304_ranks_names_the_culprit_late_then_stalled(tmp_path):
    """2,304 ranks written live; at the hang rank 1,217 stops in dataloader and the others wait in
    collective:all_reduce: LATE then STALLED name rank 1,217, and nothing opened before the hang."""
    run_dir, receipt = tmp_path / "run", tmp_path / "r.json"
    writer = _writer(run_dir, "--ranks", "2304", "--hang-at", "25", "--culprit", "1217")
    try:
        _steps_written(writer, 2)
        watcher = subprocess.Popen(
            [
                *TRNWATCH,
                "watch",
                "--headless",
                "--job-dir",
                str(run_dir),
                "--receipt",
                str(receipt),
                "--stall-after",
                "15",
                "--exit-on",
                "stalled",
                "--duration",
                "600",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert writer.stdout is not None
        hang_line = wait_until(lambda: (line := writer.stdout.readline()).startswith("hang") and line, "the hang")
        hang_ts = float(hang_line.split()[1])
        _out, err = watcher.communicate(timeout=300)
        assert watcher.returncode == 4, err  # --exit-on stalled ended it
        r = json.loads(receipt.read_text())
    finally:
        writer.kill()
        writer.communicate()
    before = [i for i in r["incidents"] if i["first"] < hang_ts and i["kind"] != "monitor"]
    assert before == [], before
    (job,) = [i for i in r["incidents"] if i["kind"] == "job"]
    labels = [c["label"] for c in job["changes"]]
    assert labels[:2] == ["LATE", "STALLED"], job["changes"]
    assert job["site"]["rank"] == 1217, job["site"]
    assert r["job"]["verdict"] == "stalled" and r["job"]["suspects"][0]["rank"] == 1217
