"""A wall clock stepped back during a recorded session (an NTP step, a VM resumed, an operator's
`date -s`): the recording's own sequence is the truth. A rotated set replays in the order it was
written, a replay is paced by the recorded gaps (never by a gap gone negative), a window's carried
job state comes in the order it was received, and the receipt's window is never negative."""

import asyncio
import json
import time

from trnwatch.collectors.lines import Line, SourceEvent
from trnwatch.collectors.recording import Recorder, Rotation
from trnwatch.collectors.recording_reader import JobCarrier, Recording, replay_lines
from trnwatch.ledger.ledger import Ledger
from trnwatch.ledger.receipt import build_receipt
from tests.recordings import T0, read_all, small_report_line

STEP_BACK_S = 3600.0


def stepped_items(before: int, after: int) -> list[Line | SourceEvent]:
    """A source opening, a report a second for `before` s, the clock stepped back an hour, then
    a report a second for `after` s."""
    times = [T0 + i + 0.5 for i in range(before)] + [T0 + before - STEP_BACK_S + i + 0.5 for i in range(after)]
    return [SourceEvent("host-a", "neuron-monitor", T0, "open")] + [
        Line("host-a", "neuron-monitor", t, small_report_line(30.0 + i % 40)) for i, t in enumerate(times)
    ]


def test_a_rotated_set_replays_in_the_order_written_across_a_clock_step_back(tmp_path, monkeypatch):
    """Parts opened after the step back come after the parts written before it (every part of a
    session carries the session's start and its place: they sort by place)."""
    items = stepped_items(20, 20)
    wall = [T0]
    monkeypatch.setattr(time, "time", lambda: wall[0])
    recorder = Recorder.to_folder(tmp_path / "rec", "live", {}, rotation=Rotation(max_bytes=2_000))
    for item in items:
        if isinstance(item, Line):
            wall[0] = item.received_s  # the session's clock is the one that stepped back
        recorder.write(item)
    recorder.close()
    assert len(recorder.files) >= 4
    got, recording = read_all(tmp_path / "rec")
    assert [i for i in got if isinstance(i, Line)] == [i for i in items if isinstance(i, Line)]
    assert recording.stats.skipped == {}


def test_a_replay_is_paced_by_the_recorded_gaps_not_a_gap_gone_negative(tmp_path, monkeypatch):
    """At speed 1 each item waits its recorded gap after the one before; after the step back the
    gaps are a second again (before: the items after it had nothing to wait for, and went at once)."""
    path = tmp_path / "r.trnrec"
    items = stepped_items(3, 3)
    recorder = Recorder.to_file(path, "live", {})
    for item in items:
        recorder.write(item)
    recorder.close()
    clock = [0.0]
    waits: list[float] = []

    async def fake_sleep(delay):
        waits.append(round(delay, 6))
        clock[0] += delay

    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(asyncio, "sleep", fake_sleep)

    async def run():
        return [item async for item in replay_lines(Recording(path), speed=1.0)]

    got = asyncio.run(run())
    assert [i for i in got if isinstance(i, Line)] == [i for i in items if isinstance(i, Line)]
    assert [w for w in waits if w] == [1.0] * 4  # 4 gaps of 1 s; the step back (the fifth) takes no time


def test_carried_job_state_comes_in_the_order_received():
    carrier = JobCarrier()
    start = json.dumps({"v": "trnwatch.job/1", "ts": T0, "run": "r", "rank": 0, "event": "run_start"})
    step = json.dumps({"v": "trnwatch.job/1", "ts": T0 + 5, "run": "r", "rank": 0, "event": "step", "step": 1})
    carrier.add(Line("job:rank-00000.jsonl", "job", T0 + 10, start))
    carrier.add(Line("job:rank-00000.jsonl", "job", T0 + 11 - STEP_BACK_S, step))  # received after a step back
    assert [c.line.text for c in carrier.take()] == [start, step]


def test_the_receipt_window_is_never_negative_across_a_clock_step_back():
    ledger = Ledger("live")
    for item in stepped_items(10, 5):
        if isinstance(item, Line):
            ledger.ingest(item)
    receipt = build_receipt(ledger, "eof", written_at_s=T0 + 10)
    assert receipt.window.seconds >= 0 and receipt.window.start <= receipt.window.end
    assert receipt.window.start == T0 + 10 - STEP_BACK_S + 0.5 and receipt.window.end == T0 + 9.5
