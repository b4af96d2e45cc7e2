"""The session's end is part of the data: the receipt is judged when the session ended (the
silence at the end counted as the screen counted it), a recording holds that moment and the
clock's progress while nothing arrived, and a replay of it (or of a window) judges the same."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trnwatch.collectors.lines import Carried, ClockMark, Line, SourceEvent
from trnwatch.collectors.recording import Recorder
from trnwatch.workloads.sim.fleet import SimHost
from trnwatch.workloads.sim.job import rank_events
from trnwatch.workloads.sim.job_logs import SimLogWriter
from trnwatch.workloads.sim.topology import get_topology
from tests.waiting import run_until_said

TRNWATCH = [sys.executable, "-m", "trnwatch"]
T0 = 1_790_000_000.0


def sim_host(scenario: str = "healthy") -> SimHost:
    return SimHost(get_topology("trn2.48xlarge"), 0, 0, scenario, 1.0)


@pytest.mark.slow
def test_a_job_log_gone_silent_before_sigterm_gives_the_stalled_receipt_the_screen_gave(tmp_path):
    # The simulated job's rank 0 written as NxD Core's log (workloads/sim/job_logs.py), stamped
    # by the writer: 25 ticks up to a second ago, then nothing more.
    log = tmp_path / "train.log"
    writer = SimLogWriter([sim_host()], log, "nxd")
    now = time.time()
    for tick in range(25):
        writer.write_tick(tick, now - 25 + tick)
    writer.close()
    receipt_path = tmp_path / "r.json"
    command = TRNWATCH + ["watch", "--headless", "--job-log", str(log), "--receipt", str(receipt_path)]
    command += ["--late-after", "1", "--stall-after", "2"]
    # SIGTERM once the headless progress line (the screen's judgement) has said the job stalled.
    done = run_until_said(command, ["job stalled"], signum=signal.SIGTERM)
    assert done.returncode == 0, done.stderr
    receipt = json.loads(receipt_path.read_text())
    job = receipt["job"]
    assert job["verdict"] == "stalled", job["reason"]
    # Judged at the session's end, well after the last line arrived.
    assert receipt["judged_at"] - job["observed"]["last_received_s"] > 2
    open_stall = job["stalls"][-1]
    assert open_stall["end_ts"] is None and open_stall["duration_s"] > 2
    # The rules given on the command line are the ones both the verdict and the badput used.
    assert job["thresholds"]["stall_after_s"] == 2 and job["thresholds"]["late_after_s"] == 1
    # The badput's window runs on past the last event by the silence the monitor saw.
    silence_s = receipt["judged_at"] - job["observed"]["last_received_s"]
    assert receipt["goodput"]["window"]["end"] == pytest.approx(job["observed"]["last_event_ts"] + silence_s)
    markdown = receipt_path.with_suffix(".md").read_text()
    assert "STALLED" in markdown


def silent_job_recording(path: Path, silence_s: int) -> float:
    """A recording of a passive job (the simulator's rank 0, its heartbeats left out as a log
    shows none) stepping for 30 s, then `silence_s` of the clock's ticks with nothing arriving,
    then the session's end. Returns the time of the last job line."""
    host = sim_host()
    recorder = Recorder.to_file(path, "live", {})
    recorder.write(SourceEvent("job:train", "job", T0, "open"))
    last = T0
    for tick in range(30):
        ts = T0 + tick
        for event in rank_events(host, 0, 0, tick, ts):
            if event["event"] != "heartbeat":
                recorder.write(Line("job:train", "job", ts + 0.01, json.dumps(event)))
                last = ts + 0.01
        recorder.flush()
    for second in range(1, silence_s + 1):
        recorder.write(ClockMark(last + second))
        recorder.flush()
    recorder.write(ClockMark(last + silence_s + 0.5, end=True))
    recorder.close()
    return last


def replay(recording: Path, receipt: Path, *window: str) -> dict:
    result = subprocess.run(
        TRNWATCH + ["replay", str(recording), "--headless", "--receipt", str(receipt), *window],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(receipt.read_text())


def test_a_replay_judges_the_recorded_silence_and_a_window_judges_its_own_end(tmp_path):
    rec = tmp_path / "silent.trnrec"
    last = silent_job_recording(rec, silence_s=40)
    whole = replay(rec, tmp_path / "whole.json")
    assert whole["judged_at"] == pytest.approx(last + 40.5)
    assert whole["job"]["verdict"] == "stalled", whole["job"]["reason"]
    assert whole["job"]["stalls"][-1]["duration_s"] == pytest.approx(40.5, abs=1.0)
    assert whole["goodput"]["badput_s"]["stalled"] == pytest.approx(40.5, abs=1.0)
    # The same recording cut 8 s into the silence: LATE there, as the live session was then.
    early = replay(rec, tmp_path / "early.json", "--to", str(last - T0 + 8))
    assert early["judged_at"] == pytest.approx(last + 8)
    assert early["job"]["verdict"] == "late", early["job"]["reason"]
    assert early["job"]["stalls"] == [] and early["goodput"]["badput_s"]["stalled"] == 0


def test_a_recording_keeps_every_tick_with_its_pause_and_its_end(tmp_path):
    """Every tick is kept (each says up to when the sources were read: ledger/lag.py), with a
    pause of the event loop and a full intake as they were."""
    from tests.recordings import read_all

    rec = tmp_path / "r.trnrec"
    recorder = Recorder.to_file(rec, "live", {})
    recorder.write(ClockMark(T0 + 1))  # an idle second
    recorder.flush()
    recorder.write(Line("s", "neuron-monitor", T0 + 1.5, "{}"))
    recorder.write(ClockMark(T0 + 2, paused_s=15.25, held=True))  # after a SIGSTOP, with the queue full
    recorder.flush()
    recorder.write(ClockMark(T0 + 3, end=True))
    recorder.close()
    items, recording = read_all(rec)
    assert [i for i in items if isinstance(i, ClockMark)] == [
        ClockMark(T0 + 1),
        ClockMark(T0 + 2, paused_s=15.25, held=True),
        ClockMark(T0 + 3, end=True),
    ]
    assert recording.span() == (T0 + 1, T0 + 3)


def fold_recording(path: Path, rules, until_s: float):
    """A ledger of a recording's items before `until_s`, judged as a session ended then."""
    from trnwatch.collectors.recording_reader import Recording
    from trnwatch.ledger.ledger import Ledger

    ledger = Ledger("replayed", rules=rules)
    recording = Recording(path)
    for item in recording.items(None, until_s):
        if isinstance(item, Line):
            ledger.ingest(item)
        elif isinstance(item, ClockMark):
            ledger.clock_mark(item)
    recording.close()
    ledger.clock_mark(ClockMark(until_s, end=True))
    return ledger


def test_late_after_20_is_one_threshold_for_the_verdict_and_the_badput(tmp_path):
    from trnwatch.ledger.receipt import build_receipt
    from trnwatch.ledger.rules import Rules

    rec = tmp_path / "silent.trnrec"
    last = silent_job_recording(rec, silence_s=40)
    receipts = {
        late_after_s: build_receipt(
            fold_recording(rec, Rules(late_after_s=late_after_s), last + 15), "eof", written_at_s=last + 15
        )
        for late_after_s in (5.0, 20.0)
    }
    for late_after_s, receipt in receipts.items():
        assert receipt.job is not None and receipt.goodput is not None
        assert receipt.job.thresholds.late_after_s == late_after_s
        assert receipt.job.thresholds.late_s == receipt.goodput.late_threshold_s == late_after_s
    # 15 s without a step: past a 5 s threshold (late, and badput no loader explains), within 20 s.
    assert receipts[5.0].job.verdict == "late" and receipts[20.0].job.verdict == "steady"
    assert receipts[5.0].goodput.badput_s.unexplained == pytest.approx(15, abs=0.1)
    assert receipts[5.0].goodput.badput_s.data_loading == pytest.approx(0, abs=0.1)
    assert receipts[20.0].goodput.badput_s.data_loading == pytest.approx(15, abs=0.1)
    assert receipts[20.0].goodput.badput_s.unexplained == pytest.approx(0, abs=0.1)


FAULT_HOST = "sim-trn3-gen2-us-07"


@pytest.mark.slow
def test_a_replay_of_the_last_10_s_of_the_demo_hang_names_rank_120_on_host_07_chip_2(tmp_path):
    rec = tmp_path / "hang.trnrec"
    demo = ["demo", "--scenario", "hang", "--headless", "--record", str(rec), "--receipt", str(tmp_path / "live.json")]
    done = run_until_said(TRNWATCH + demo, ["job late"])  # the live session said LATE: end it (Ctrl-C)
    assert done.returncode == 0, done.stderr
    window = replay(rec, tmp_path / "tail.json", "--from", "-10")
    job = window["job"]
    assert job["verdict"] in ("late", "stalled"), job["reason"]
    first = job["suspects"][0]
    assert (first["rank"], first["host"], first["chip"], first["region"]) == (120, FAULT_HOST, 2, "dataloader")
    # Where the ranks run came from before the window: the boundary agrees with what is listed.
    assert job["ranks"]["world_size"] == 576 and job["ranks"]["seen"] == 576
    boundary = window["boundary"]
    assert boundary["hosts"] == len(window["hosts"]) == 36 and boundary["chips"] == len(window["chips"]) == 144
    # The suspect's host and chip find their chip row (receipts join by host name and instance id).
    (row,) = [c for c in window["chips"] if (c["host_name"], c["device"]) == (first["host"], first["chip"])]
    (host,) = [h for h in window["hosts"] if h["name"] == FAULT_HOST]
    assert row["host"] == host["host"] == host["instance_id"] and row["host"].startswith("i-")
    markdown = (tmp_path / "tail.md").read_text()
    assert f"| {FAULT_HOST} ({host['instance_id']}) | 2 |" in markdown
    # The window's figures are its own: no step of the hang's last 10 s, so no steady throughput in it.
    assert job["throughput"] is None
    assert window["replay"]["window_from"] > window["window"]["start"] - 1


def test_an_empty_reversed_or_outside_window_is_a_usage_error_that_says_the_span(tmp_path):
    rec = tmp_path / "silent.trnrec"
    silent_job_recording(rec, silence_s=15)  # 29 s of steps, 15.5 s of silence
    for window in (
        ["--from", "30", "--to", "10"],
        ["--from", "1000"],
        ["--to", "-1000"],
        ["--from", "20", "--to", "20"],
    ):
        result = subprocess.run(
            TRNWATCH + ["replay", str(rec), "--headless", *window], capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 2, (window, result.stderr)
        assert "which spans 2026-09-21T" in result.stderr and "(44.5 s)" in result.stderr, result.stderr


def test_a_window_carries_each_ranks_start_heartbeat_progress_and_open_phases_but_not_their_figures(tmp_path):
    from trnwatch.collectors.recording_reader import Recording

    host = sim_host("hang")
    rec = tmp_path / "hang.trnrec"
    recorder = Recorder.to_file(rec, "simulated", {})
    for tick in range(40):
        for chip in range(2):
            for event in rank_events(host, chip, 0, tick, T0 + tick):
                recorder.write(Line("job:dir", "job", T0 + tick + 0.01, json.dumps(event)))
        recorder.flush()
    recorder.close()
    recording = Recording(rec)
    carried = [item.line for item in recording.items(T0 + 35, None, carry=True) if isinstance(item, Carried)]
    recording.close()
    kinds = sorted((json.loads(line.text)["rank"], json.loads(line.text)["event"]) for line in carried)
    # Per rank: its start, the steady phase still open, its last step and its last heartbeat.
    assert [k for k in kinds if k[0] == 0] == [(0, "heartbeat"), (0, "phase"), (0, "run_start"), (0, "step")]
    last_step = max(json.loads(line.text)["ts"] for line in carried if json.loads(line.text)["event"] == "step")
    assert last_step == T0 + 29  # the hang's last step (tick 29)


@pytest.mark.slow
def test_ssh_hosts_that_never_connected_are_failed_sources_in_the_receipt_and_its_markdown(tmp_path):
    # The system OpenSSH client against names that do not resolve (an empty client config, so
    # nothing of the machine's own applies): each attempt fails, and the session retries.
    config = tmp_path / "ssh_config"
    config.write_text("")
    receipt_path = tmp_path / "r.json"
    command = TRNWATCH + ["watch", "--hosts", "nohost-[1-2]", "--ssh-config", str(config), "--headless"]
    done = run_until_said(command + ["--receipt", str(receipt_path)], ["nohost-1 lost", "nohost-2 lost"])
    assert done.returncode == 5, done.stderr  # nothing was measured: not a normal end for a script
    assert "nothing was measured: no source delivered a line" in done.stderr
    receipt = json.loads(receipt_path.read_text())
    sources = {s["id"]: s for s in receipt["sources"]}
    assert sorted(sources) == ["nohost-1", "nohost-2"]
    for source in sources.values():
        assert source["reports"] == 0 and source["failed"].startswith("never connected: "), source
        assert "nohost" in source["failed"]  # the ssh client's own words name the host it could not reach
    markdown = receipt_path.with_suffix(".md").read_text()
    assert "No stream had rejected lines, gaps or errors" not in markdown
    assert "| nohost-1 | neuron-monitor | 0 | 0 | 0 | 0 (0.0 s) | failed: never connected: " in markdown
    headline = markdown.splitlines()[2]
    assert headline.startswith(
        "- **Nothing was measured**: no source delivered a line (nohost-1: never connected: ssh: "
    )
    assert markdown.index("Nothing was measured") < markdown.index("Incidents: none")
