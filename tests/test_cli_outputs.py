"""Receipts, recordings and snapshots that cannot be written (issue 9.5, 9.7): a usage error
before collecting where that can be known, a fallback at exit with the place printed, never a
traceback, never a silently missing file; and no control character in any output."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trnwatch.collectors.lines import Line
from trnwatch.ledger.ledger import Ledger
from trnwatch.output import OutputError
from trnwatch.session import Session
from tests import reports as R
from tests.mounts import fill, tmpfs

TRNWATCH = [sys.executable, "-m", "trnwatch"]
ONE_REPORT = R.line(R.report([R.runtime(4242, "train", [0, 1], util={0: 50.0, 1: 60.0})])) + "\n"


def watch_stdin(args, cwd, env=None, stdin_text=ONE_REPORT):
    return subprocess.run(
        TRNWATCH + ["watch", "--stdin", "--headless", *args],
        input=stdin_text,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )


def no_traceback(result):
    assert "Traceback" not in result.stderr, result.stderr


def test_receipt_in_a_read_only_folder_is_a_usage_error_before_collecting(tmp_path):
    with tmpfs(tmp_path / "ro", read_only=True) as ro:
        result = watch_stdin(["--receipt", str(ro / "r.json")], cwd=tmp_path)
    no_traceback(result)
    assert result.returncode == 2
    assert "--receipt" in result.stderr and "read-only file system" in result.stderr
    assert "receipt:" not in result.stdout


def test_receipt_under_a_file_is_a_usage_error(tmp_path):
    (tmp_path / "plain").write_text("x")
    result = watch_stdin(["--receipt", str(tmp_path / "plain" / "r.json")], cwd=tmp_path)
    no_traceback(result)
    assert result.returncode == 2 and "is a file, not a folder" in result.stderr


def test_record_in_a_read_only_folder_is_a_usage_error(tmp_path):
    with tmpfs(tmp_path / "ro", read_only=True) as ro:
        result = watch_stdin(["--receipt", str(tmp_path / "r.json"), "--record", str(ro / "s.trnrec")], cwd=tmp_path)
    no_traceback(result)
    assert result.returncode == 2 and "--record" in result.stderr and "read-only" in result.stderr
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize(
    "option, planted", [("--receipt", "r.json"), ("--receipt", "r.md"), ("--record", "s.trnrec.idx")]
)
def test_an_existing_or_planted_output_path_is_refused_before_collecting(tmp_path, option, planted):
    """A symbolic link planted in a shared folder under the name of an output (or of the file
    written beside it): refused with exit 2, the file it points to untouched."""
    shared = tmp_path / "shared"
    shared.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (shared / planted).symlink_to(victim)
    target = shared / ("r.json" if option == "--receipt" else "s.trnrec")
    receipt = ["--receipt", str(tmp_path / "r.json")] if option == "--record" else []
    result = watch_stdin([option, str(target), *receipt], cwd=tmp_path)
    no_traceback(result)
    assert result.returncode == 2, result.stderr
    assert f"{option}: {shared / planted} already exists (a symbolic link)" in result.stderr
    assert victim.read_text() == "precious\n" and sorted(os.listdir(shared)) == [planted]


def test_two_sessions_never_pick_the_same_default_receipt_name(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    procs = [
        subprocess.Popen(
            TRNWATCH + ["watch", "--stdin", "--headless"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=work,
            env={**os.environ, **env},
        )
        for _ in range(2)
    ]
    outs = [p.communicate(ONE_REPORT, timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    receipts = sorted((tmp_path / "state" / "trnwatch" / "receipts").glob("trnwatch-*-live.json"))
    assert len(receipts) == 2 and all(json.loads(p.read_text())["sources"][0]["reports"] == 1 for p in receipts)


def test_a_read_only_state_folder_sends_the_receipt_to_the_current_directory(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    with tmpfs(tmp_path / "state", read_only=True) as state:
        result = watch_stdin([], cwd=work, env={"XDG_STATE_HOME": str(state)})
    no_traceback(result)
    assert result.returncode == 0
    assert "default receipt folder cannot be written" in result.stderr and "current directory" in result.stderr
    (json_path,) = work.glob("trnwatch-*-live.json")
    assert f"receipt: {json_path} (and {json_path.with_suffix('.md').name})" in result.stdout
    assert json_path.with_suffix(".md").exists()


def test_no_writable_place_at_all_is_a_usage_error(tmp_path):
    with tmpfs(tmp_path / "state", read_only=True) as state, tmpfs(tmp_path / "cwd", read_only=True) as cwd:
        result = watch_stdin([], cwd=cwd, env={"XDG_STATE_HOME": str(state)})
    no_traceback(result)
    assert result.returncode == 2 and "no place for the receipt" in result.stderr


def test_a_full_file_system_at_start_is_a_usage_error(tmp_path):
    with tmpfs(tmp_path / "full", size_kib=16) as full:
        fill(full)
        result = watch_stdin(["--receipt", str(full / "r.json")], cwd=tmp_path)
    no_traceback(result)
    assert result.returncode == 2 and "no space left" in result.stderr


def wait_for(condition, what: str, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_a_file_system_that_fills_during_the_session_moves_the_receipt_and_says_where(tmp_path):
    state = tmp_path / "state"
    recording = tmp_path / "s.trnrec"
    with tmpfs(tmp_path / "full", size_kib=16) as full:
        proc = subprocess.Popen(
            TRNWATCH
            + ["watch", "--stdin", "--headless", "--receipt", str(full / "r.json"), "--record", str(recording)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
            env={**os.environ, "XDG_STATE_HOME": str(state)},
        )
        try:
            wait_for(recording.exists, "the session to start (its recording file)")  # past the start checks
            fill(full)
            out, err = proc.communicate(ONE_REPORT, timeout=120)
        finally:
            proc.kill()
            proc.wait()
        assert not (full / "r.json").exists()
    assert "Traceback" not in err, err
    assert proc.returncode == 0
    assert f"receipt not written to {full / 'r.json'}" in err and "no space left on the device" in err
    (json_path,) = (state / "trnwatch" / "receipts").glob("trnwatch-*-live.json")
    assert f"receipt: {json_path} (and {json_path.with_suffix('.md').name})" in out
    receipt = json.loads(json_path.read_text())
    assert [(f["output"], f["path"]) for f in receipt["output_failures"]] == [("receipt", str(full / "r.json"))]
    assert receipt["sources"][0]["reports"] == 1  # nothing collected was lost
    assert "Output failed: receipt" in json_path.with_suffix(".md").read_text()


def session_with_one_report() -> Session:
    ledger = Ledger("live", {})
    session = Session(ledger, [])
    ledger.source("stdin", "neuron-monitor")
    ledger.ingest(Line("stdin", "neuron-monitor", time.time(), ONE_REPORT.strip()))
    return session


def test_a_markdown_that_cannot_be_written_is_said_and_marked_in_the_json(tmp_path):
    session = session_with_one_report()
    (tmp_path / "r.md").mkdir()
    (tmp_path / "r.md" / "keep").write_text("a folder is in the Markdown's place")
    path = session.write_receipt(tmp_path / "r.json")
    assert path == tmp_path / "r.json" and session.receipt_markdown is None
    assert any("receipt Markdown not written" in note for note in session.receipt_notes)
    receipt = json.loads(path.read_text())
    assert [f["output"] for f in receipt["output_failures"]] == ["receipt-markdown"]


def test_the_receipt_is_built_once_per_exit_whatever_fails_on_the_way(tmp_path, monkeypatch):
    """One receipt per exit, rendered three ways: a receipt that moves to the default folder and
    loses its timeline picture and its Markdown on the way is still one build with one written_at,
    the JSON listing every failure."""
    import trnwatch.session as session_module
    from trnwatch.output import default_receipt_dir, default_receipt_name

    built = []
    build = session_module.build_receipt
    monkeypatch.setattr(session_module, "build_receipt", lambda *a, **k: built.append(build(*a, **k)) or built[-1])
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    plain = tmp_path / "plain"
    plain.write_text("a file where a folder is expected")
    session = session_with_one_report()
    moved = default_receipt_dir() / default_receipt_name("live", session.started_s)
    moved.parent.mkdir(parents=True)
    for taken in (moved.with_suffix(".svg"), moved.with_suffix(".md")):
        taken.mkdir()  # a folder in the picture's and the Markdown's place
    assert session.write_receipt(plain / "r.json") == moved
    assert len(built) == 1
    receipt = json.loads(moved.read_text())
    assert receipt["written_at"] == built[0].written_at
    assert [f["output"] for f in receipt["output_failures"]] == ["receipt", "receipt-svg", "receipt-markdown"]


def test_no_place_for_the_receipt_is_an_output_error_listing_each_place(tmp_path, monkeypatch):
    plain = tmp_path / "plain"
    plain.write_text("a file where folders are expected")
    monkeypatch.setenv("XDG_STATE_HOME", str(plain))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(Path, "cwd", classmethod(lambda cls: plain))
    session = session_with_one_report()
    with pytest.raises(OutputError):
        session.write_receipt(plain / "r.json")
    assert len([n for n in session.receipt_notes if n.startswith("receipt not written to")]) == 3
    assert session.receipt_notes[-1] == "the receipt could not be written anywhere"


HOSTILE = "evil\x1b]52;c;aGVsbG8=\x07\x1b[2J\u009b31m\u202eexe.txt"


def test_outside_strings_reach_no_output_raw(tmp_path):
    line = R.line(
        R.report(
            [R.runtime(4242, HOSTILE, [0, 1], util={0: 50.0, 1: 60.0})], instance_info=R.instance(instance_type=HOSTILE)
        )
    )
    bad = '{"neuron_runtime_data": 5, "x": "' + "\\u009b\\u202e" + '"}'
    result = watch_stdin(["--receipt", str(tmp_path / "r.json")], cwd=tmp_path, stdin_text=line + "\n" + bad + "\n")
    assert result.returncode == 0, result.stderr
    outputs = {
        "json": (tmp_path / "r.json").read_text(),
        "md": (tmp_path / "r.md").read_text(),
        "stdout": result.stdout,
        "stderr": result.stderr,
    }
    for name, text in outputs.items():
        for ch in ("\x1b", "\x07", "\u009b", "\u202e"):
            assert ch not in text, (name, repr(ch))
    receipt = json.loads(outputs["json"])
    assert receipt["runtimes"][0]["tag"] == HOSTILE  # escaped in the file, exact when read
    snap = subprocess.run(
        TRNWATCH + ["snapshot", "--stdin", "--json"], input=line + "\n", capture_output=True, text=True, timeout=120
    )
    assert snap.returncode == 0, snap.stderr
    assert not any(ch in snap.stdout for ch in ("\x1b", "\u009b", "\u202e"))
    assert json.loads(snap.stdout)["hosts"][0]["runtimes"][0]["tag"] == HOSTILE
