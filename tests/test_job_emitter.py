"""The in-job emitter: whole lines, never blocking the caller, heartbeats that say where the main
thread is, and crash safety checked with a real child process killed by SIGKILL."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

from trnwatch.collectors.job_events import JobLineError, parse_job_line
from trnwatch.collectors.job_records import Heartbeat, Step
from trnwatch.workloads import emitter as emitter_module
from trnwatch.workloads.emitter import OUTSIDE_REGIONS, JobEmitter
from tests.waiting import wait_until


def read_events(path):
    with open(path, "rb") as stream:
        return [parse_job_line(line) for line in stream.read().decode().splitlines()]


def test_concurrent_emits_are_written_as_whole_lines(tmp_path):
    em = JobEmitter(str(tmp_path), run="r", rank=2, heartbeat_interval_s=0.01, queue_events=100_000)

    def emit_steps(thread):
        for step in range(2000):
            em.step(step, 0.5, 0.25, 4096, float(thread))

    threads = [threading.Thread(target=emit_steps, args=(thread,)) for thread in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    em.run_end("success")

    raw = (tmp_path / "rank-00002.jsonl").read_bytes()
    assert raw.endswith(b"\n")
    events = read_events(tmp_path / "rank-00002.jsonl")  # raises if any line is torn or interleaved
    steps = [event for event in events if isinstance(event, Step)]
    assert len(steps) == 8 * 2000
    assert sorted({event.loss for event in steps}) == [float(thread) for thread in range(8)]
    assert events[-1].event == "run_end" and em.dropped_events == 0


def test_emit_never_blocks_when_the_disk_is_stuck(tmp_path, monkeypatch):
    disk_released = threading.Event()
    real_write_all = emitter_module._write_all

    def stuck_write_all(fd, data):
        disk_released.wait()
        real_write_all(fd, data)

    monkeypatch.setattr(emitter_module, "_write_all", stuck_write_all)
    em = JobEmitter(str(tmp_path), run="r", rank=0, heartbeat_interval_s=0.02, queue_events=100)
    for step in range(20_000):  # finishing at all, with the disk held, shows no emit waits on it
        em.step(step, 0.5, 0.25, 4096, 1.0)

    assert em.dropped_events > 20_000 - 100 - 1024  # queue bound + at most one batch in the writer
    disk_released.set()

    def last_heartbeat_counts_every_drop() -> bool:  # one written once the queue had room again
        whole = (tmp_path / "rank-00000.jsonl").read_text().rpartition("\n")[0]  # the writer may be mid-line
        beats = [event for event in map(parse_job_line, whole.splitlines()) if isinstance(event, Heartbeat)]
        return bool(beats) and beats[-1].dropped_events == em.dropped_events

    wait_until(
        last_heartbeat_counts_every_drop,
        "a heartbeat carrying the drop count",
        detail=lambda: f"{em.dropped_events} dropped",
    )
    em.close()
    heartbeats = [event for event in read_events(tmp_path / "rank-00000.jsonl") if isinstance(event, Heartbeat)]
    assert heartbeats[-1].dropped_events == em.dropped_events


def test_heartbeats_report_the_innermost_region_and_when_it_began(tmp_path):
    em = JobEmitter(str(tmp_path), run="r", rank=0, heartbeat_interval_s=0.02)
    path = tmp_path / "rank-00000.jsonl"

    def beat_in(region):
        """Wait (however busy the machine) until a heartbeat reports `region` as the current one."""
        deadline = time.monotonic() + 60
        while True:
            beats = [e for e in read_events(path) if isinstance(e, Heartbeat)] if path.exists() else []
            if beats and beats[-1].region == region:
                return
            assert time.monotonic() < deadline, f"no heartbeat in {region}"
            time.sleep(0.01)

    em.set_step(7)
    entered = {}
    beat_in(OUTSIDE_REGIONS)
    before = time.time()
    with em.region("dataloader"):
        entered["dataloader"] = (before, time.time())
        beat_in("dataloader")
    before = time.time()
    with em.region("compute"):
        entered["compute"] = (before, time.time())
        beat_in("compute")
        before = time.time()
        with em.region("collective:all_reduce"):
            entered["collective:all_reduce"] = (before, time.time())
            beat_in("collective:all_reduce")
        beat_in("compute")
    beat_in(OUTSIDE_REGIONS)
    em.close()

    heartbeats = [event for event in read_events(tmp_path / "rank-00000.jsonl") if isinstance(event, Heartbeat)]
    order = []
    for heartbeat in heartbeats:
        if not order or order[-1] != heartbeat.region:
            order.append(heartbeat.region)
    assert order == [OUTSIDE_REGIONS, "dataloader", "compute", "collective:all_reduce", "compute", OUTSIDE_REGIONS]
    for heartbeat in heartbeats:
        if heartbeat.region in entered:
            before, after = entered[heartbeat.region]
            assert before <= heartbeat.region_since <= after
            assert heartbeat.step == 7
    # The heartbeat thread starts with the emitter: on a busy machine it can beat once before
    # set_step(7). Every beat from the first that reports 7 on reports 7; none before it another step.
    steps = [heartbeat.step for heartbeat in heartbeats]
    first = steps.index(7)
    assert set(steps[:first]) <= {0} and set(steps[first:]) == {7}


def test_a_resumed_emitter_ends_a_torn_last_line_before_writing(tmp_path):
    path = tmp_path / "rank-00000.jsonl"
    path.write_bytes(b'{"v":"trnwatch.job/1","ts":1.0,"run":"r","rank":0,"event":"ste')  # killed mid-write
    em = JobEmitter(str(tmp_path), run="r", rank=0)
    em.error("after resume")
    em.close()
    torn, resumed = path.read_bytes().decode().splitlines()
    try:
        parse_job_line(torn)
        raise AssertionError("a torn line must not parse")
    except JobLineError:
        pass
    assert parse_job_line(resumed).message == "after resume"


CHILD = textwrap.dedent(
    """
    import sys, threading
    from trnwatch.workloads.emitter import JobEmitter
    em = JobEmitter(sys.argv[1], run="r", rank=0, heartbeat_interval_s=0.001)
    big = "x" * 4000  # long lines make a kill in the middle of a write more likely
    def spam(n):
        while True:
            em.error(big)
            em.step(n, 0.1, 0.05, 1, 1.0)
    for n in range(4):
        threading.Thread(target=spam, args=(n,), daemon=True).start()
    print("ready", flush=True)
    threading.Event().wait()
    """
)


def test_sigkill_mid_run_leaves_only_whole_lines_for_readers(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        path = tmp_path / "rank-00000.jsonl"
        deadline = time.monotonic() + 30
        while (not path.exists() or path.stat().st_size < 8 << 20) and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert child.returncode == -signal.SIGKILL

    raw = path.read_bytes()
    complete, _, fragment = raw.rpartition(b"\n")
    events = [parse_job_line(text) for text in complete.decode().split("\n")]  # every complete line parses
    assert len(events) > 500
    assert b"\n" not in fragment  # anything after the last newline is what a follower holds back

    # The resumed process (same rank file) must not glue its first event to a fragment.
    em = JobEmitter(str(tmp_path), run="r", rank=0)
    em.run_end("success")
    lines = path.read_bytes().decode().split("\n")
    assert lines[-1] == ""
    assert parse_job_line(lines[-2]).event == "run_end"


def test_a_background_save_is_marked_not_blocking_and_a_synchronous_one_as_before(tmp_path):
    em = JobEmitter(str(tmp_path), run="r", rank=0, heartbeat_interval_s=60)
    em.checkpoint("save", "begin", 10, tag="step_10", blocking=False)
    em.checkpoint("save", "begin", 20, tag="step_20")
    em.run_end("success")
    saves = [event for event in read_events(tmp_path / "rank-00000.jsonl") if event.event == "checkpoint"]
    assert [(event.step, event.blocking) for event in saves] == [(10, False), (20, None)]
    assert '"blocking"' not in (tmp_path / "rank-00000.jsonl").read_text().splitlines()[-2]
