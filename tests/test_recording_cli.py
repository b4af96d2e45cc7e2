"""Recordings through the command line, as real child processes: exact replay of /1 and /2,
SIGKILL, `record` with rotation, retention and signals, a full disk, windows and --info."""

import asyncio
import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from trnwatch.collectors.lines import Line, SourceEvent
from trnwatch.collectors.recording import Recorder, RecordingError
from tests.mounts import tmpfs
from tests.recordings import read_all, write_v1
from tests.test_cli import SIM, TRNWATCH, figures, load_receipt, run


def sim_lines(count: int, host: int = 2) -> list[str]:
    out = subprocess.run(
        SIM + ["--no-wait", "--count", str(count), "--host", str(host)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return out.splitlines()


def wait_for(condition, what: str, timeout_s: float = 120.0):
    """Poll `condition` until it returns something true; fail naming `what` after the timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


def recorded_lines(path: Path) -> int:
    try:
        return sum(isinstance(i, Line) for i in read_all(path)[0])
    except RecordingError:  # not there yet, or its header frame not written yet
        return 0


def test_v1_and_v2_recordings_replay_to_the_live_receipt(tmp_path):
    rec, live = tmp_path / "s.trnrec", tmp_path / "live.json"
    result = run(
        ["watch", "--stdin", "--headless", "--record", str(rec), "--receipt", str(live)],
        input="\n".join(sim_lines(12)) + "\n",
    )
    assert result.returncode == 0, result.stderr
    v1 = tmp_path / "s-v1.trnrec"
    write_v1(v1, read_all(rec)[0], evidence="simulated")  # the same entries in the first format
    for path in (rec, v1):
        replayed = tmp_path / f"{path.stem}.json"
        result = run(["replay", str(path), "--headless", "--receipt", str(replayed)])
        assert result.returncode == 0, result.stderr
        a, b = load_receipt(live), load_receipt(replayed)
        assert figures(a) == figures(b) and b["sources"][0]["reports"] == 12
        assert b["replay"]["frames_skipped"] == {} and "- Replayed: " in replayed.with_suffix(".md").read_text()
    assert load_receipt(tmp_path / "s.json")["replay"]["schema"] == "trnwatch.recording/2"
    assert load_receipt(tmp_path / "s-v1.json")["replay"]["schema"] == "trnwatch.recording/1"


@pytest.mark.slow
def test_sigkill_loses_at_most_the_frame_being_collected(tmp_path):
    rec = tmp_path / "s.trnrec"
    lines = sim_lines(7)
    proc = subprocess.Popen(
        TRNWATCH + ["watch", "--stdin", "--headless", "--record", str(rec), "--receipt", str(tmp_path / "never.json")],
        stdin=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        sent = 0
        for batch in (3, 2):
            for line in lines[sent : sent + batch]:
                proc.stdin.write(line.encode() + b"\n")
            proc.stdin.flush()
            sent += batch
            wait_for(lambda sent=sent: recorded_lines(rec) == sent, f"{sent} lines in whole frames")
        for line in lines[sent:]:
            proc.stdin.write(line.encode() + b"\n")
        proc.stdin.flush()
        proc.kill()  # SIGKILL: no handler runs, the frame being collected is lost
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    items, recording = read_all(rec)
    kept = sum(isinstance(i, Line) for i in items)
    assert kept in (5, 7)  # every whole frame; the last 2 lines only if their frame was cut in time
    assert recording.stats.skipped in ({}, {"truncated": 1})
    result = run(["replay", str(rec), "--headless", "--receipt", str(tmp_path / "b.json")])
    assert result.returncode == 0, result.stderr
    assert load_receipt(tmp_path / "b.json")["sources"][0]["reports"] == kept


@pytest.mark.slow
@pytest.mark.parametrize("signum, rotate", [(signal.SIGTERM, "20K"), (signal.SIGHUP, "1s")])
def test_record_rotates_keeps_retain_files_and_ends_cleanly_on_a_signal(tmp_path, signum, rotate):
    folder = tmp_path / "rec"
    proc = subprocess.Popen(
        TRNWATCH + ["record", str(folder), "--stdin", "--rotate", rotate, "--retain", "2"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = sim_lines(300)
    try:
        for batch in range(60):  # 5 reports every 0.3 s (input pacing) until four files were made
            proc.stdin.write("".join(line + "\n" for line in lines[5 * batch : 5 * batch + 5]))
            proc.stdin.flush()
            if _parts_made(folder) >= 4:
                break
            time.sleep(0.3)
        wait_for(lambda: _parts_made(folder) >= 4, "four files made")
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    written = [line.removeprefix("recording to ") for line in out.splitlines() if line.startswith("recording to ")]
    assert len(written) >= 4 and all(p.startswith(str(folder)) for p in written)
    parts = sorted(folder.glob("*.trnrec"))
    # --retain 2: the two newest parts with data. A part the last rotation opened on a tick or
    # read mark, that took no line before the signal, is removed at the end (collectors/
    # recording.py _end): then the two before it are the newest.
    newest = written[-2:] if Path(written[-1]).exists() else written[-3:-1]
    assert [str(p) for p in parts] == newest
    assert not list(tmp_path.glob("*.json")) and "receipt" not in out  # no receipt unless asked
    items, recording = read_all(folder)
    assert recording.stats.skipped == {}  # closed cleanly: the last frame is whole
    assert isinstance(items[0], SourceEvent) and items[0].event == "open"  # the retained parts say their source
    result = run(["replay", str(folder), "--headless", "--receipt", str(tmp_path / "r.json")])
    assert result.returncode == 0, result.stderr
    receipt = load_receipt(tmp_path / "r.json")
    assert receipt["sources"][0]["reports"] == sum(isinstance(i, Line) for i in items) > 0


def _parts_made(folder: Path) -> int:
    """How many files the recorder has started (their part numbers run on after retention)."""
    parts = sorted(folder.glob("*.trnrec"))
    return int(parts[-1].stem.rsplit("-", 1)[1]) + 1 if parts else 0


@pytest.mark.slow
def test_a_full_disk_stops_only_the_recording(tmp_path):
    """ENOSPC for real: the recording goes to a 16 KiB tmpfs (tests/mounts.py), the receipt to a
    healthy folder; 200 reports do not fit."""
    receipt = tmp_path / "r.json"
    with tmpfs(tmp_path / "small", size_kib=16) as small:
        result = run(
            ["watch", "--stdin", "--headless", "--record", str(small / "r.trnrec"), "--receipt", str(receipt)],
            input="\n".join(sim_lines(200)) + "\n",
        )
        items, recording = read_all(small / "r.trnrec")
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("recording stopped") == 1 and "no space left on the device" in result.stderr
    r = load_receipt(receipt)
    assert r["sources"][0]["reports"] == 200  # monitoring went on after the recording stopped
    rec = r["recording"]
    assert rec["error"] == "no space left on the device" and rec["stopped_at"] is not None
    (failure,) = r["output_failures"]
    assert (failure["output"], failure["error"]) == ("recording", rec["error"]) and failure["path"] == rec["files"][-1]
    assert "Traceback" not in result.stderr
    assert "Recording:" in receipt.with_suffix(".md").read_text()
    # what was recorded before the disk filled still reads (the partial frame was cut away)
    assert recording.stats.skipped == {} and sum(isinstance(i, Line) for i in items) < 200


def test_a_recording_that_stops_is_said_on_the_screen(tmp_path):
    from trnwatch.ledger.ledger import Ledger
    from trnwatch.session import Session, SourceSpec
    from trnwatch.tui.app import TrnwatchApp
    from tests.test_tui_app import drive, screen_text, wait_until

    reports = sim_lines(60)

    async def lines():
        for text in reports:
            yield Line("stdin", "neuron-monitor", time.time(), text)
            await asyncio.sleep(0)

    with tmpfs(tmp_path / "small", size_kib=16) as small:
        ledger = Ledger("live")
        recorder = Recorder.to_file(small / "r[bold]x[/].trnrec", "live", {}, known_hosts=lambda: ledger.hosts.keys())
        session = Session(ledger, [SourceSpec("stdin", "neuron-monitor", lines)], recorder)
        app = TrnwatchApp(ledger, session=session, receipt_path=tmp_path / "r.json", theme="dark")

        async def check(app, pilot):
            await wait_until(pilot, lambda: "recording stopped" in screen_text(app), "the notification")
            await app._session_task
            assert ledger.sources["stdin"].reports == 60  # the screen and the ledger went on

        seen = drive(app, size=(160, 40), check=check)
    assert "r[bold]x[/].trnrec" in seen.screen  # the path shown as text, not markup
    assert json.loads((tmp_path / "r.json").read_text())["recording"]["error"] == "no space left on the device"


def test_replay_window_and_info_from_the_command_line(tmp_path):
    rec = tmp_path / "s.trnrec"
    lines = sim_lines(6)
    proc = subprocess.Popen(
        TRNWATCH + ["watch", "--stdin", "--headless", "--record", str(rec), "--receipt", str(tmp_path / "live.json")],
        stdin=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    for i, line in enumerate(lines):  # three frames of two reports, each frame written before the next
        proc.stdin.write(line.encode() + b"\n")
        proc.stdin.flush()
        if i % 2:
            wait_for(lambda i=i: recorded_lines(rec) == i + 1, f"{i + 1} lines recorded")
            # The cuts below are given to the millisecond: the next report is received later than that.
            last_s = [item for item in read_all(rec)[0] if isinstance(item, Line)][-1].received_s
            wait_for(lambda last_s=last_s: time.time() > last_s + 0.01, "the clock past the last recorded report")
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0
    items = [i for i in read_all(rec)[0] if isinstance(i, Line)]
    t0, t_cut = items[0].received_s, items[4].received_s
    result = run(
        [
            "replay",
            str(rec),
            "--headless",
            "--from",
            f"{t_cut - t0 - 0.001:.3f}",
            "--receipt",
            str(tmp_path / "tail.json"),
        ]
    )
    assert result.returncode == 0, result.stderr
    tail = load_receipt(tmp_path / "tail.json")
    assert tail["sources"][0]["reports"] == 2 and tail["window"]["start"] == t_cut
    iso_to = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t_cut)) + f".{int(t_cut % 1 * 1e6):06d}+00:00"
    result = run(["replay", str(rec), "--headless", "--to", iso_to, "--receipt", str(tmp_path / "head.json")])
    assert result.returncode == 0, result.stderr
    assert load_receipt(tmp_path / "head.json")["sources"][0]["reports"] == 4
    info = run(["replay", str(rec), "--info"])
    assert info.returncode == 0, info.stderr
    assert (
        "trnwatch.recording/2" in info.stdout
        and "evidence:    simulated (1 source(s) marked by the simulator)" in info.stdout
    )
    assert "sources:     1 (1 neuron-monitor): stdin" in info.stdout and "hosts:       1: " in info.stdout
    assert "compression" in info.stdout
    bad = run(["replay", str(rec), "--from", "noon"])
    assert bad.returncode == 2 and "not seconds or an ISO-8601 time" in bad.stderr


def test_rotate_takes_a_size_or_an_age_and_refuses_anything_else():
    from trnwatch.cli import build_parser

    parse = lambda *a: build_parser().parse_args(["record", "d", "--stdin", *a])  # noqa: E731
    assert parse("--rotate", "512M", "--rotate", "6h").rotate == [("bytes", 512 << 20), ("s", 6 * 3600.0)]
    assert parse("--rotate", "1GiB").rotate == [("bytes", 1 << 30)]
    assert parse("--rotate", "2GB").rotate == [("bytes", 2 << 30)]
    assert parse("--rotate", "1000").rotate == [("bytes", 1000)]
    assert parse("--rotate", "10m").rotate == [("s", 600.0)]  # lower-case m: minutes; M: MiB
    assert parse("--rotate", "1d", "--retain", "7").retain == 7
    for bad in (["--rotate", "soon"], ["--rotate", "0"], ["--rotate", "5q"], ["--retain", "0"]):
        result = run(["record", "d", "--stdin", *bad])
        assert result.returncode == 2 and ("--rotate" in result.stderr or "--retain" in result.stderr)


def _replay_evidence(tmp_path, rec: Path) -> tuple[str, dict]:
    info = run(["replay", str(rec), "--info"])
    assert info.returncode == 0, info.stderr
    receipt = tmp_path / f"{rec.stem}-replayed.json"
    result = run(["replay", str(rec), "--headless", "--receipt", str(receipt)])
    assert result.returncode == 0, result.stderr
    return info.stdout, load_receipt(receipt)


def test_simulated_data_piped_to_watch_is_recorded_and_replayed_as_simulated_never_live(tmp_path):
    # Defect: the header stored the session's mode, so `watch --stdin` fed by the simulator was
    # recorded as live, and its replay's receipt said "the recorded session was live".
    rec, live = tmp_path / "s.trnrec", tmp_path / "live.json"
    result = run(
        ["watch", "--stdin", "--headless", "--record", str(rec), "--receipt", str(live)],
        input="\n".join(sim_lines(6)) + "\n",
    )
    assert result.returncode == 0, result.stderr
    assert load_receipt(live)["evidence"] == "simulated"
    items, recording = read_all(rec)
    assert recording.header.evidence == "live"  # the session's mode: a claim the data overrules
    v1 = tmp_path / "s-v1.trnrec"
    write_v1(v1, items, evidence="live")  # as the /1 recorder wrote such a session: no per-source marks
    for path in (rec, v1):
        info, replayed = _replay_evidence(tmp_path, path)
        assert "evidence:    simulated (1 source(s) marked by the simulator)" in info, info
        assert (replayed["evidence"], replayed["recorded_evidence"]) == ("replayed", "simulated")
        assert [s["simulated"] for s in replayed["sources"]] == [True]


def test_unmarked_data_piped_to_watch_is_recorded_and_replayed_as_live(tmp_path):
    from tests.recordings import small_report_line

    rec = tmp_path / "s.trnrec"
    result = run(
        ["watch", "--stdin", "--headless", "--record", str(rec), "--receipt", str(tmp_path / "live.json")],
        input="\n".join([small_report_line()] * 3) + "\n",
    )
    assert result.returncode == 0, result.stderr
    assert load_receipt(tmp_path / "live.json")["evidence"] == "live"
    info, replayed = _replay_evidence(tmp_path, rec)
    assert "evidence:    live\n" in info
    assert (replayed["evidence"], replayed["recorded_evidence"]) == ("replayed", "live")


def test_replay_info_and_a_whole_replay_count_the_same_frames_of_a_folder(tmp_path):
    # A frame holding the catalog is read twice by a replay (for the catalog, then for its lines):
    # it was counted twice (here: --info 20 frames, the replay 28; the issue saw 17 against 20).
    from trnwatch.collectors.recording import Rotation
    from tests.recordings import synthetic_items

    folder = tmp_path / "rec"
    recorder = Recorder.to_folder(folder, "simulated", {}, rotation=Rotation(max_bytes=3000))
    for item in synthetic_items(20):
        recorder.write(item)
    recorder.close()
    assert len(recorder.files) >= 3
    info = run(["replay", str(folder), "--info"])
    assert info.returncode == 0, info.stderr
    frames = int(info.stdout.split("frames:")[1].split()[0].rstrip(","))
    assert frames == recorder.frames
    result = run(["replay", str(folder), "--headless", "--receipt", str(tmp_path / "r.json")])
    assert result.returncode == 0, result.stderr
    assert load_receipt(tmp_path / "r.json")["replay"]["frames_read"] == frames
