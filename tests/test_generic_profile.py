"""Any log gives an answer (issue 34 item 1): a plain script's own step lines, printed by real
torchrun workers (tests/plain_train.py: `step N loss L T s/iter`), are read with the generic
profile when no framework is detected, and the receipt says so."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trnwatch.collectors.log_profiles import LogTranslator, load_profile_file, profile_registry
from trnwatch.collectors.log_profiles_generic import EXAMPLE_PROFILE_FILE, no_step_hint
from tests.torchrun import stop_torchrun
from tests.waiting import DEADLINE_S, run_until_said

PLAIN = Path(__file__).with_name("plain_train.py")
TORCHRUN = Path(sys.executable).with_name("torchrun")
TRNWATCH = [sys.executable, "-m", "trnwatch"]


def steps_of(lines: list[str]) -> list[tuple[int, int, float | None, float | None]]:
    translator = LogTranslator("run", profile_registry())
    events = [e for line in lines for e in translator.feed(line, 1000.0)]
    assert translator.profile_name == "generic"
    return [(e.rank, e.step, e.loss, e.step_time_s) for e in events if e.event == "step"]


def test_the_common_hand_written_forms_are_steps_with_their_rank():
    assert steps_of(
        [
            "[rank1]:step 3 loss 2.5000 0.210 s/iter",
            "[default0]:iter 4 | loss=2.1 | 4.0 it/s",
            "Step: 5, loss: 1.5, 0.5 sec/it",
            "12/100 loss 1.25",
            "[rank1]:global_step=13 0.75 s/step",
        ]
    ) == [(1, 3, 2.5, 0.21), (0, 4, 2.1, 0.25), (0, 5, 1.5, 0.5), (0, 12, 1.25, None), (1, 13, None, 0.75)]


def test_a_counter_without_a_figure_is_no_step_and_a_framework_line_replaces_the_generic_profile():
    translator = LogTranslator("run", profile_registry())
    assert translator.feed("reading step 3 of the recipe", 1.0) == []
    assert translator.profile_name is None
    translator.feed("step 1 loss 2.0 0.1 s/it", 2.0)
    assert translator.profile_name == "generic"
    translator.feed("[titan] 2026-12-07 10:00:00,000 - root - INFO - Starting job: llama3 8b", 3.0)
    assert translator.profile_name == "torchtitan"


@pytest.mark.slow
def test_a_plain_scripts_torchrun_log_is_read_with_the_generic_profile(tmp_path):
    log = tmp_path / "torchrun.log"
    pids = tmp_path / "pids"
    pids.mkdir()
    command = [str(TORCHRUN), "--nproc-per-node", "2", "--tee", "3", str(PLAIN), "20", str(pids)]
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            assert process.wait(timeout=DEADLINE_S) == 0, log.read_text()[-2000:]
        finally:
            stop_torchrun(process)
    receipt = tmp_path / "r.json"
    # The whole log is read at start (history first); the first progress line comes after it.
    done = run_until_said(
        TRNWATCH + ["watch", "--job-log", str(log), "--headless", "--receipt", str(receipt)],
        ["lines folded, 0 rejected, job "],
    )
    assert done.returncode == 0, done.stderr
    r = json.loads(receipt.read_text())
    [source] = r["sources"]
    assert source["log_profile"] == "generic"
    assert r["job"]["ranks"]["seen"] == 2
    assert r["segments"]["steady"] is None or r["segments"]["steady"]["last_step"] <= 20
    markdown = receipt.with_suffix(".md").read_text()
    assert "- Passive log joblog:torchrun.log: read with the generic profile (no framework detected" in markdown


def test_the_hints_ready_example_is_a_profile_file_that_reads_its_lines(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(EXAMPLE_PROFILE_FILE)
    profiles = profile_registry(load_profile_file(path, profile_registry()))
    translator = LogTranslator("run", profiles, "mine")
    assert [(e.event, e.step) for e in translator.feed("it=12 whatever", 1.0)] == [("step", 12)]
    assert " / ".join(EXAMPLE_PROFILE_FILE.splitlines()) in no_step_hint("generic")


@pytest.mark.slow
def test_a_log_nothing_reads_says_what_to_do_on_stderr_once_and_in_the_receipt(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("hello\nepoch over, all good\n")
    receipt = tmp_path / "r.json"
    done = run_until_said(
        TRNWATCH + ["watch", "--job-log", str(log), "--headless", "--receipt", str(receipt)], ["rejected, job "]
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("no step line recognised: pick a profile with --log-profile (") == 1, done.stderr
    assert "--log-profile-file (a file holding: [[profile]]" in done.stderr and "in-job emitter" in done.stderr
    r = json.loads(receipt.read_text())
    assert r["job"]["verdict"] == "no-data"
    assert "no step line recognised: pick a profile with --log-profile" in r["job"]["reason"]
