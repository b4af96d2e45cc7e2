"""Failures a user meets around the edges (issue 22): each says why on stderr and exits with a
status that says something went wrong, with or without a terminal; a misspelt option gets its
command's usage and the close match. Real child processes, as a user or systemd runs them."""

import os
import subprocess
import sys

import pytest

TRNWATCH = [sys.executable, "-m", "trnwatch"]


def run(args, **kw):
    if "input" not in kw:
        kw.setdefault("stdin", subprocess.DEVNULL)  # no terminal, as under systemd or in a pipeline
    return subprocess.run(TRNWATCH + args, capture_output=True, text=True, timeout=120, **kw)


@pytest.mark.parametrize("headless", [["--headless"], []])
def test_a_missing_neuron_monitor_is_a_usage_error_with_or_without_a_terminal(tmp_path, headless):
    result = run(["watch", "--neuron-monitor", "/nonexistent/nm", *headless, "--receipt", str(tmp_path / "r.json")])
    assert result.returncode == 2, result.stderr
    assert "--neuron-monitor /nonexistent/nm: no such file" in result.stderr
    assert "needs a terminal" not in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "r.json").exists()  # refused before anything was collected


def test_a_neuron_monitor_that_is_not_executable_is_a_usage_error(tmp_path):
    plain = tmp_path / "nm"
    plain.write_text("#!/bin/sh\n")
    plain.chmod(0o644)
    result = run(["watch", "--neuron-monitor", str(plain), "--headless"])
    assert result.returncode == 2
    assert f"--neuron-monitor {plain}: is not executable" in result.stderr
    folder = run(["record", str(tmp_path / "rec"), "--neuron-monitor", str(tmp_path)])
    assert folder.returncode == 2 and "is a folder, not a program" in folder.stderr


def test_a_neuron_monitor_that_fails_says_why_on_stderr_and_exits_1(tmp_path):
    result = run(["watch", "--neuron-monitor", "/bin/false", "--headless", "--receipt", str(tmp_path / "r.json")])
    assert result.returncode == 1
    assert "trnwatch: local lost: false exited with status 1: no message on stderr" in result.stderr
    assert f"receipt: {tmp_path / 'r.json'}" in result.stdout


def test_record_with_a_failing_neuron_monitor_exits_1_saying_why(tmp_path):
    result = run(["record", str(tmp_path / "rec"), "--neuron-monitor", "/bin/false"])
    assert result.returncode == 1, result.stdout  # not a clean stop: systemd must see the failure
    assert "local lost: false exited with status 1" in result.stderr


def test_record_of_garbage_on_stdin_exits_1_as_watch_does(tmp_path):
    result = run(["record", str(tmp_path / "rec"), "--stdin"], input="garbage\n")
    assert result.returncode == 1
    assert "no valid line: 1 line(s) rejected (1 not-json)" in result.stderr


def test_a_job_log_that_cannot_be_read_says_why_on_stderr(tmp_path):
    fifo = tmp_path / "train.log"
    os.mkfifo(fifo)  # not a regular file: a follower cannot tail it
    result = run(["watch", "--job-log", str(fifo), "--headless", "--receipt", str(tmp_path / "r.json")])
    assert result.returncode == 1
    assert "trnwatch: joblog:train.log lost: " in result.stderr and "not a regular file" in result.stderr


def test_a_job_dir_not_there_yet_is_said_and_a_file_is_refused(tmp_path):
    missing = tmp_path / "run"
    result = run(
        ["watch", "--job-dir", str(missing), "--headless", "--duration", "1", "--receipt", str(tmp_path / "r.json")]
    )
    assert result.returncode == 5 and "Traceback" not in result.stderr  # nothing was measured
    assert f"--job-dir {missing}: no such folder yet; waiting for it to appear" in result.stderr
    a_file = tmp_path / "rank-00000.jsonl"
    a_file.write_text("")
    refused = run(["watch", "--job-dir", str(a_file), "--headless"])
    assert refused.returncode == 2 and f"--job-dir {a_file}: not a folder" in refused.stderr


def test_a_misspelt_option_gets_its_commands_usage_and_the_close_match():
    result = run(["demo", "--scenerio", "hang"])
    assert result.returncode == 2
    assert result.stderr.startswith("usage: trnwatch demo ")
    assert "unrecognized arguments: --scenerio hang" in result.stderr
    assert "--scenerio: did you mean --scenario?" in result.stderr
    far = run(["replay", "x.trnrec", "--zzz"])
    assert far.returncode == 2 and far.stderr.startswith("usage: trnwatch replay ") and "did you mean" not in far.stderr


def test_an_abbreviated_option_is_refused_with_the_close_match():
    """`demo --headles` ran a headless demo with no end (argparse took the prefix); now no
    command takes an abbreviation."""
    result = run(["demo", "--headles", "--duration", "1"])
    assert result.returncode == 2 and result.stderr.startswith("usage: trnwatch demo ")
    assert "--headles: did you mean --headless?" in result.stderr
    assert run(["watch", "--job-d", "x"]).returncode == 2


@pytest.mark.parametrize(
    "command", ["watch", "record", "replay", "demo", "sim", "snapshot", "compare", "export", "runs", "schema"]
)
def test_every_command_answers_dash_v_and_version(command):
    from trnwatch import __version__

    for flag in ("-V", "--version"):
        answer = run([command, flag])
        assert answer.returncode == 0 and answer.stdout == f"trnwatch {__version__}\n", (flag, answer.stderr)
    assert run(["-V"]).stdout == f"trnwatch {__version__}\n"


def test_an_unreadable_ultraserver_map_names_the_option(tmp_path):
    result = run(
        ["watch", "--headless", "--stdin", "--ultraservers", "/nonexistent", "--receipt", str(tmp_path / "r.json")]
    )
    assert result.returncode == 2
    assert "trnwatch: --ultraservers: cannot read /nonexistent" in result.stderr


def test_compare_of_a_markdown_receipt_says_it_is_not_a_receipt(tmp_path):
    (tmp_path / "r.json").write_text('{"schema": "trnwatch.receipt/1"}')
    (tmp_path / "r.md").write_text("# trnwatch receipt\n")
    result = run(["compare", str(tmp_path / "r.md"), str(tmp_path / "r.json")])
    assert result.returncode == 2
    assert f"{tmp_path / 'r.md'} is not a receipt: not JSON" in result.stderr
    assert f"its receipt is {tmp_path / 'r.json'}" in result.stderr
    assert "Expecting value" not in result.stderr
