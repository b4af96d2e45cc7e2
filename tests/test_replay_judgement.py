"""A replay judges incidents where the recorded session did, on the recording's clock, at every
--speed: a job that went LATE, then DEAD, then FAILED replays as that story (not as one FAILED
seen at the end), and `--exit-on dead` fires on it. Real `trnwatch replay` children."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trnwatch.collectors.lines import ClockMark, SourceEvent
from trnwatch.collectors.recording import Recorder
from tests import job_story as S

T0 = 1_790_000_000.0
RANKS = 2
STEPS = 6
SILENT_S = 14  # past LATE (5 s) and DEAD (10 s of silence from a heartbeating rank)


def _story() -> list[dict]:
    """Two ranks step once a second and heartbeat, then nothing for SILENT_S, then rank 0 says it failed."""
    events = S.steady_run([1.0] * STEPS, t0=T0, compile_s=1.0, warmup_steps=1, ranks=RANKS)
    last_s = max(e["ts"] for e in events)
    for rank in range(RANKS):
        for k in range(int(last_s - T0) + 1):
            events.append(S.event("heartbeat", T0 + k + 0.25, rank, step=0, region="compute", region_since=T0))
    events.append(S.event("run_end", last_s + SILENT_S, 0, status="failed"))
    return sorted(events, key=lambda e: e["ts"])


def write_story(path: Path) -> Path:
    """The story as its live session records it: the rank files' lines, a clock mark a second
    (kept only in a second with no line, as the recorder keeps them)."""
    recorder = Recorder.to_file(path, "live", {})
    lines = S.lines(_story())
    for source_id in sorted({line.source_id for line in lines}):
        recorder.write(SourceEvent(source_id, "job", T0, "open"))
    end_s = lines[-1].received_s + 2
    marks = [ClockMark(T0 + k + 0.5) for k in range(int(end_s - T0))]
    for item in sorted(lines + marks, key=lambda item: item.received_s if hasattr(item, "received_s") else item.t_s):
        recorder.write(item)
        if isinstance(item, ClockMark):
            recorder.flush()  # as the session's tick does: a frame a second
    recorder.write(ClockMark(end_s, end=True))
    recorder.close()
    return path


def replay(recording: Path, receipt: Path, *options: str) -> tuple[int, dict]:
    done = subprocess.run(
        [sys.executable, "-m", "trnwatch", "replay", str(recording), "--headless", "--receipt", str(receipt), *options],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert receipt.exists(), done.stderr
    return done.returncode, json.loads(receipt.read_text())


def job_story(receipt: dict) -> list[tuple[str, str, float]]:
    return [
        (change["change"], change["label"], change["at"])
        for incident in receipt["incidents"]
        if incident["kind"] == "job"
        for change in incident["changes"]
    ]


def test_replay_at_full_speed_keeps_late_dead_failed(tmp_path):
    recording = write_story(tmp_path / "story.trnrec")
    status, receipt = replay(recording, tmp_path / "r.json")
    assert status == 0
    assert [label for _, label, _ in job_story(receipt)] == ["LATE", "DEAD", "FAILED"]
    last_step_s = T0 + 2 + 1 + STEPS  # init 1 s, compile 1 s, one warm-up step, the steady steps
    late, dead, failed = (at for _, _, at in job_story(receipt))
    # Judged once a second of the recording's clock: each change within two seconds of its cause.
    assert last_step_s + 5 <= late <= last_step_s + 7
    assert late < dead < failed
    assert last_step_s + SILENT_S <= failed <= last_step_s + SILENT_S + 2


def test_replay_exit_on_dead_fires_at_the_recorded_moment(tmp_path):
    recording = write_story(tmp_path / "story.trnrec")
    status, receipt = replay(recording, tmp_path / "r.json", "--exit-on", "dead")
    assert status == 4
    assert receipt["exit_reason"] == "exit-on"
    assert [label for _, label, _ in job_story(receipt)] == ["LATE", "DEAD"]


@pytest.mark.slow
def test_replay_at_speed_1_and_0_keep_the_same_incidents(tmp_path):
    recording = write_story(tmp_path / "story.trnrec")
    _, fast = replay(recording, tmp_path / "fast.json", "--speed", "0")
    _, real_time = replay(recording, tmp_path / "slow.json", "--speed", "1")
    assert fast["incidents"] == real_time["incidents"]
    assert len(job_story(fast)) == 3
