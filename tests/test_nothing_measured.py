"""No silent nothing (issue 34 item 3): a job log that is not there yet is said to be waited for,
and a session in which no source ever delivered a line exits with status 5 and a receipt whose
headline says nothing was measured and why, before any "Incidents: none"."""

import json
import subprocess
import sys

from tests.waiting import DEADLINE_S

TRNWATCH = [sys.executable, "-m", "trnwatch"]


def watch_briefly(tmp_path, *options: str):
    """A headless watch that ends by --duration (a signal could come before the session started:
    that is status 130); nothing here arrives late, so the duration outruns nothing."""
    receipt = tmp_path / "r.json"
    command = TRNWATCH + ["watch", "--headless", *options, "--duration", "1", "--receipt", str(receipt)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=DEADLINE_S)
    return done, json.loads(receipt.read_text()), receipt.with_suffix(".md").read_text()


def assert_nothing_measured_first(markdown: str, why: str) -> None:
    headline = markdown.splitlines()[2]
    assert headline.startswith("- **Nothing was measured**: no source delivered a line"), markdown[:600]
    assert why in headline, headline
    assert markdown.index("Nothing was measured") < markdown.index("Incidents: none")


def test_a_mistyped_job_log_is_waited_for_aloud_and_the_empty_session_exits_5(tmp_path):
    missing = tmp_path / "torchrun.lgo"
    done, receipt, markdown = watch_briefly(tmp_path, "--job-log", str(missing))
    assert f"--job-log {missing}: no such file yet; waiting for it to appear" in done.stderr
    assert done.returncode == 5, done.stderr
    assert "nothing was measured: no source delivered a line (exit status 5)" in done.stderr
    assert [s["reports"] for s in receipt["sources"]] == [0]
    assert_nothing_measured_first(markdown, "joblog:torchrun.lgo: no line (waiting)")


def test_an_empty_log_folder_is_waited_for_aloud_and_exits_5(tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    done, receipt, markdown = watch_briefly(tmp_path, "--job-log", str(folder))
    assert f"--job-log {folder}: no attempt_N/<rank>/std*.log in it yet" in done.stderr
    assert done.returncode == 5, done.stderr
    assert receipt["sources"] == []
    assert_nothing_measured_first(markdown, "no source appeared")
