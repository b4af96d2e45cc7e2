"""The hung rank's process, for real (issue 34 item 2): a plain script under real torchrun (gloo,
CPU torch), rank 1 stopped with SIGSTOP, watched through its log alone (`--job-log`, no emitter):
the receipt names rank 1 and its pid as stopped, first, as the cause, in the job section, its
processes and the incident's site, and the replay of the session's recording says the same. A
plain sleeping hang (real launcher and ranks, tests/rank_family.py) names no process state as a cause."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.torchrun import stop_torchrun
from tests.waiting import DEADLINE_S, run_until_said, wait_until

pytest.importorskip("torch", reason="the plain script needs torch (CPU wheel torch==2.13.0)")

PLAIN = Path(__file__).with_name("plain_train.py")
FAMILY = Path(__file__).with_name("rank_family.py")
TORCHRUN = Path(sys.executable).with_name("torchrun")
TRNWATCH = [sys.executable, "-m", "trnwatch"]


def watch_until_stalled(tmp_path: Path, log: Path) -> tuple[dict, Path]:
    receipt, recording = tmp_path / "receipt.json", tmp_path / "session.trnrec"
    command = TRNWATCH + ["watch", "--job-log", str(log), "--headless", "--late-after", "1", "--stall-after", "3"]
    command += ["--record", str(recording), "--receipt", str(receipt)]
    done = run_until_said(command, ["job stalled"])
    assert done.returncode == 0, done.stderr
    return json.loads(receipt.read_text()), recording


def replayed(tmp_path: Path, recording: Path) -> dict:
    path = tmp_path / "replay.json"
    subprocess.run(
        TRNWATCH + ["replay", str(recording), "--headless", "--receipt", str(path)],
        check=True,
        capture_output=True,
        timeout=DEADLINE_S,
    )
    return json.loads(path.read_text())


def job_incident(receipt: dict) -> dict:
    [incident] = [i for i in receipt["incidents"] if i["kind"] == "job"]
    return incident


@pytest.mark.slow
def test_a_sigstopped_torchrun_rank_is_named_with_its_pid_as_stopped_and_its_replay_says_the_same(tmp_path):
    log, pids = tmp_path / "torchrun.log", tmp_path / "pids"
    pids.mkdir()
    command = [str(TORCHRUN), "--nproc-per-node", "2", "--tee", "3", str(PLAIN), "100000", str(pids)]
    with log.open("w") as out:
        torchrun = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    stopped = None
    try:
        wait_until(lambda: "[default1]:step 5 " in log.read_text(), "rank 1's fifth step", detail=log.read_text)
        stopped = int((pids / "rank-1.pid").read_text())
        os.kill(stopped, signal.SIGSTOP)
        receipt, recording = watch_until_stalled(tmp_path, log)
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)  # so torchrun's SIGTERM ends it
        stop_torchrun(torchrun)

    job = receipt["job"]
    assert job["verdict"] == "stalled", job["reason"]
    first = job["suspects"][0]
    assert (first["rank"], first["pid"], first["process_state"]) == (1, stopped, "stopped"), first
    assert first["evidence"]["why"].startswith(f"its process (pid {stopped}) stopped (SIGSTOP, or a debugger) for ")
    assert f"rank 1: its process (pid {stopped}) stopped (SIGSTOP, or a debugger)" in job["reason"]
    processes = {p["rank"]: p for p in job["processes"]}
    assert sorted(processes) == [0, 1]
    assert (processes[1]["pid"], processes[1]["state"], processes[1]["via"]) == (stopped, "stopped", "launcher")
    assert processes[0]["state"] in ("sleeping", "running") and processes[0]["pid"] == int(
        (pids / "rank-0.pid").read_text()
    )
    incident = job_incident(receipt)
    assert (incident["site"]["rank"], incident["site"]["pid"]) == (1, stopped)
    assert (
        incident["evidence"]["text"].startswith("STALLED rank 1 ")
        and f"its process (pid {stopped}) stopped (SIGSTOP" in incident["evidence"]["text"]
    )
    markdown = receipt_markdown(tmp_path)
    assert f"culprit: rank 1 (pid {stopped}" in markdown and f"| 1 | {stopped} |" in markdown

    replay = replayed(tmp_path, recording)
    for key in ("verdict", "reason", "suspects", "processes"):
        assert replay["job"][key] == job[key], key
    assert job_incident(replay)["site"] == incident["site"]


def receipt_markdown(tmp_path: Path) -> str:
    return (tmp_path / "receipt.md").read_text()


@pytest.mark.slow
def test_a_plain_sleeping_hang_names_its_processes_but_no_process_state_as_the_cause(tmp_path):
    log = tmp_path / "job.log"
    with log.open("w") as out:
        launcher = subprocess.Popen(
            [sys.executable, str(FAMILY), str(tmp_path / "pids.json"), "2"],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_until((tmp_path / "pids.json").exists, "the ranks to run", detail=log.read_text)
        ranks = {int(r): pid for r, pid in json.loads((tmp_path / "pids.json").read_text())["ranks"].items()}
        receipt, recording = watch_until_stalled(tmp_path, log)
    finally:
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait()
    job = receipt["job"]
    assert job["verdict"] == "stalled"
    assert "its process" not in job["reason"] and all(s["process_state"] != "stopped" for s in job["suspects"])
    assert {p["rank"]: (p["pid"], p["state"], p["via"]) for p in job["processes"]} == {
        r: (pid, "sleeping", "stdout") for r, pid in ranks.items()
    }
    assert replayed(tmp_path, recording)["job"]["processes"] == job["processes"]
