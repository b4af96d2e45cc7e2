"""torchrun for real (torch 2.13.0 CPU, gloo, 3 workers): tests/torchrun_case.py makes each case
happen and writes its truth (rank, step, pid, message); `trnwatch watch --job-log` reads the
console log after the fact and its receipt is checked against that truth."""

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="needs torch (CPU wheel torch==2.13.0)")

from tests.torchrun import stop_torchrun  # noqa: E402
from tests.waiting import wait_until  # noqa: E402

CASE = Path(__file__).with_name("torchrun_case.py")
TORCHRUN = Path(sys.executable).with_name("torchrun")
TRNWATCH = [sys.executable, "-m", "trnwatch"]
GLOO_TIMEOUT = "Timed out waiting 3000ms for"

pytestmark = pytest.mark.slow


def launch(tmp_path, case: list[str], *flags: str, stop: str | None = None) -> tuple[Path, int]:
    """Run torchrun with 3 workers on the case until it ends; with `stop`, once the case wrote its
    truth, SIGKILL the acting worker ("worker") or SIGTERM the agent ("agent")."""
    log = tmp_path / "torchrun.log"
    command = [str(TORCHRUN), "--standalone", "--nproc-per-node", "3", *flags, str(CASE), case[0], case[1], case[2]]
    command += [str(tmp_path), *case[3:]]
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path, start_new_session=True)
    try:
        if stop is not None:
            truth = wait_until(lambda: read_truth(tmp_path, 0), "the case's truth", detail=log.read_text)
            if stop == "worker":
                os.kill(truth["pid"], signal.SIGKILL)
            else:
                os.kill(process.pid, signal.SIGTERM)
        return log, process.wait(timeout=120)
    finally:
        stop_torchrun(process)


def read_truth(tmp_path, attempt: int) -> dict | None:
    path = tmp_path / f"truth-{attempt}.json"
    return json.loads(path.read_text()) if path.exists() else None


def receipt(tmp_path, *job: str) -> dict:
    path = tmp_path / "receipt.json"
    command = [*TRNWATCH, "watch", "--headless", "--duration", "2", "--receipt", str(path), *job]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(path.read_text())["job"]


def receipt_and_sources(tmp_path, *job: str) -> tuple[dict, dict]:
    for old in tmp_path.glob("receipt.*"):  # a second read of the same log
        old.unlink()
    receipt(tmp_path, *job)
    whole = json.loads((tmp_path / "receipt.json").read_text())
    return whole["job"], {source["id"]: source for source in whole["sources"]}


def first(job: dict) -> dict:
    [cause] = [failure for failure in job["failures"] if failure["role"] == "first"]
    return cause


def test_an_exception_in_one_rank_is_the_cause_with_its_traceback_line(tmp_path):
    log, code = launch(tmp_path, ["raise", "1", "5"], "--role", "rank", "--tee", "3")
    truth = read_truth(tmp_path, 0)
    job = receipt(tmp_path, "--job-log", str(log))
    assert code == 1 and job["verdict"] == "failed"
    cause = first(job)
    assert (cause["rank"], cause["exit_code"], cause["signal"]) == (truth["rank"], 1, None)
    assert cause["error"] == truth["message"] == "RuntimeError: injected failure on rank 1 at step 5"
    assert job["reason"].startswith("first failure rank 1 ")
    others = [f for f in job["failures"] if f["role"] == "consequence"]
    assert sorted((f["rank"], f["signal"]) for f in others) == [(0, "SIGTERM"), (2, "SIGTERM")]
    assert all("Connection closed by peer" in f["error"] for f in others)  # their own last lines
    assert job["restarts"] == []


def test_sys_exit_in_one_rank_is_the_cause_with_its_exit_code(tmp_path):
    log, code = launch(tmp_path, ["exit", "2", "4"], "--tee", "3")  # default role: [default2]:
    truth = read_truth(tmp_path, 0)
    job = receipt(tmp_path, "--job-log", str(log))
    cause = first(job)
    assert code == 1 and job["verdict"] == "failed"
    assert (cause["rank"], cause["exit_code"]) == (truth["rank"], 3)
    assert cause["error"] == "worker exited with code 3 (it printed no traceback)"


def test_a_record_decorated_main_gives_its_error_files_message(tmp_path):
    # Without --tee the console has no worker output: the message can only come from the summary's
    # traceback, which the agent read from the worker's @record error file.
    log, code = launch(tmp_path, ["record", "0", "4"])
    truth = read_truth(tmp_path, 0)
    assert "error_file: /" in log.read_text()
    job, sources = receipt_and_sources(tmp_path, "--job-log", str(log))
    cause = first(job)
    assert code == 1 and (cause["rank"], cause["exit_code"]) == (truth["rank"], 1)
    assert cause["error"] == truth["message"]
    # Each record's error file (the JSON the worker's @record wrote) was opened and read.
    assert sources["joblog:torchrun.log"]["error_files"] == {"read": 3}
    # An error file that is a symbolic link (here to a sparse 1 GiB file) or too large is not read,
    # and said so; the message then comes from the summary's copy of the traceback.
    paths = re.findall(r"error_file: (/\S+)", log.read_text())
    big = tmp_path / "big.json"
    with open(big, "wb") as out:
        out.truncate(1 << 30)
    os.replace(paths[0], paths[0] + ".orig")
    os.symlink(big, paths[0])
    os.replace(paths[1], paths[1] + ".orig")
    os.link(big, paths[1])
    job, sources = receipt_and_sources(tmp_path, "--job-log", str(log))
    assert first(job)["error"] == truth["message"]
    assert sources["joblog:torchrun.log"]["error_files"] == {"larger than 262144 bytes": 1, "read": 1, "symlink": 1}


def test_a_worker_killed_from_outside_is_the_cause_with_its_signal(tmp_path):
    log, code = launch(tmp_path, ["wait", "1", "5"], "--role", "rank", "--tee", "3", stop="worker")
    truth = read_truth(tmp_path, 0)
    job = receipt(tmp_path, "--job-log", str(log))
    cause = first(job)
    assert code == 1 and job["verdict"] == "failed"
    assert (cause["rank"], cause["signal"], cause["exit_code"]) == (truth["rank"], "SIGKILL", -9)
    assert cause["error"] == f"Signal 9 (SIGKILL) received by PID {truth['pid']}"


def test_in_a_hang_the_rank_its_peers_waited_for_is_blamed_not_a_waiting_rank(tmp_path):
    # Rank 1 sleeps outside the all-reduce; ranks 0 and 2 time out in it (gloo, 3 s); the agent
    # then SIGTERMs rank 1. torchrun's own Root Cause names a waiting rank.
    log, code = launch(tmp_path, ["hang", "1", "5"], "--role", "rank", "--tee", "3")
    truth = read_truth(tmp_path, 0)
    text = log.read_text()
    assert text.count(GLOO_TIMEOUT) == 2
    root_cause_rank = int(text.split("Root Cause (first observed failure):")[1].split("rank      : ")[1][0])
    assert root_cause_rank != truth["rank"]  # what this test is about: torchrun blames a waiting rank
    job = receipt(tmp_path, "--job-log", str(log))
    cause = first(job)
    assert code == 1 and job["verdict"] == "failed"
    assert (cause["rank"], cause["signal"]) == (truth["rank"], "SIGTERM")
    assert (
        "ranks 0, 2 timed out in a collective, waiting; rank 1 did not: it was the one they waited for"
        in (job["reason"])
    )
    assert job["suspects"][0]["rank"] == truth["rank"]


def test_a_restart_that_recovers_counts_one_restart_and_keeps_the_first_attempts_failure(tmp_path):
    case = ["raise", "1", "4", "1", "20"]  # only in attempt 0; 20 steps
    log, code = launch(tmp_path, case, "--role", "rank", "--tee", "3", "--max-restarts", "2")
    truth = read_truth(tmp_path, 0)
    assert code == 0 and read_truth(tmp_path, 1) is None
    job = receipt(tmp_path, "--job-log", str(log))
    assert [r["restart"] for r in job["restarts"]] == [1]
    assert job["verdict"] != "failed"  # attempt 1 ran to its end
    [failure] = job["failures"]
    assert (failure["rank"], failure["error"]) == (truth["rank"], truth["message"])


def test_restarts_that_run_out_count_every_attempt_and_blame_the_last_ones_cause(tmp_path):
    log, code = launch(tmp_path, ["raise", "2", "3"], "--role", "rank", "--tee", "3", "--max-restarts", "1")
    truths = [read_truth(tmp_path, 0), read_truth(tmp_path, 1)]
    job = receipt(tmp_path, "--job-log", str(log))
    assert code == 1 and job["verdict"] == "failed"
    assert [r["restart"] for r in job["restarts"]] == [1]
    # each attempt's cause is "first" of its attempt; the verdict names the last attempt's
    causes = [f for f in job["failures"] if f["role"] == "first"]
    assert [(f["rank"], f["exit_code"], f["error"]) for f in causes] == [
        (truth["rank"], 1, truth["message"]) for truth in truths
    ]
    assert job["reason"].startswith(f"first failure rank 2 (host ? chip ?): error: {truths[1]['message']}")


def test_the_agent_stopped_by_sigterm_is_an_aborted_job_with_the_signal(tmp_path):
    log, code = launch(tmp_path, ["none", "0", "5"], "--role", "rank", "--tee", "3", stop="agent")
    assert "Received 15 death signal" in log.read_text()
    job = receipt(tmp_path, "--job-log", str(log))
    assert code != 0 and job["verdict"] == "aborted"
    assert job["reason"] == "torchrun's agent received SIGTERM (signal 15) and shut its workers down"
    assert job["failures"] == []


def test_one_run_read_from_its_rank_files_its_torchrun_log_and_its_checkpoints_joins(tmp_path):
    # The reference workload with the in-job emitter, under torchrun --tee 3: rank 1 raises at step
    # 12 (--crash-rank/--crash-step: the truth); a checkpoint every 5 steps.
    from trnwatch.workloads import train

    log = tmp_path / "torchrun.log"
    command = [str(TORCHRUN), "--standalone", "--nproc-per-node", "2", "--role", "rank", "--tee", "3", train.__file__]
    command += ["--run-dir", str(tmp_path / "run"), "--steps", "40", "--checkpoint-interval", "5"]
    command += ["--crash-rank", "1", "--crash-step", "12", "--heartbeat-interval", "0.5"]
    with open(log, "w") as out:
        code = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path, timeout=300).returncode
    assert code == 1
    job = receipt(
        tmp_path,
        "--job-dir",
        str(tmp_path / "run" / "telemetry"),
        "--job-log",
        str(log),
        "--ckpt-dir",
        str(tmp_path / "run" / "checkpoints"),
    )
    assert job["run"] == "run"  # the emitter's run id; the log's name (torchrun) never rejects it
    sources = job["sources"]
    assert set(sources) == {"job-dir", "joblog:torchrun.log", "ckpt:checkpoints"}
    assert sources["job-dir"]["step"] >= 2 * 11 and sources["job-dir"]["run_start"] == 2
    assert sources["joblog:torchrun.log"] == {"error": 2}  # the agent's failure line and the summary
    assert sources["ckpt:checkpoints"]["checkpoint"] >= 4  # saves at steps 5 and 10, begin and end
    assert job["checkpoint_saves"]["count"] == 2  # each told by the rank files and the folder: counted once
    assert job["verdict"] == "failed"
    cause = first(job)
    assert cause["rank"] == 1 and cause["error"].endswith("InjectedCrash: injected crash at step 12")
    # the emitter's own error for the same rank is there too, beside the launcher's account
    assert {(f["rank"], f["source"]) for f in job["failures"] if f["kind"] == "error"} >= {(1, "launcher"), (1, None)}
    assert job["ranks"]["seen"] == 2


def test_log_dir_with_redirects_read_after_the_fact_gives_each_ranks_failure_and_the_restart(tmp_path):
    # --redirects 3 --log-dir: the workers' output goes to attempt_N/<rank>/std*.log only; rank 1
    # raises in attempt 0, attempt 1 runs to its end.
    logs = tmp_path / "logs"
    flags = ["--redirects", "3", "--log-dir", str(logs), "--max-restarts", "1"]
    console, code = launch(tmp_path, ["raise", "1", "4", "1", "10"], *flags)
    truth = read_truth(tmp_path, 0)
    assert code == 0 and "RuntimeError" not in console.read_text()  # the traceback is in the files only
    job = receipt(tmp_path, "--job-log", str(logs))
    assert [r["restart"] for r in job["restarts"]] == [1]
    cause = first(job)
    assert (cause["rank"], cause["error"], cause["source"]) == (truth["rank"], truth["message"], "job")
    assert job["verdict"] != "failed"  # attempt 1 is running or done: its ranks are new processes
    run_folder = next(logs.iterdir()).name
    assert f"joblog:{run_folder}/attempt_0/1/stderr.log" in job["sources"]


def test_a_running_monitor_follows_the_attempt_folders_torchrun_makes(tmp_path):
    logs = tmp_path / "logs"
    path = tmp_path / "live.json"
    command = [*TRNWATCH, "watch", "--headless", "--duration", "300", "--receipt", str(path), "--job-log", str(logs)]
    logs.mkdir()
    monitor = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        flags = ["--redirects", "3", "--log-dir", str(logs), "--max-restarts", "1"]
        _, code = launch(tmp_path, ["raise", "2", "4", "1", "10"], *flags)
        assert code == 0
        monitor.send_signal(signal.SIGTERM)  # the session ends: the receipt holds what the files hold
        _, err = monitor.communicate(timeout=120)
    finally:
        if monitor.poll() is None:
            monitor.kill()
            monitor.wait()
    assert monitor.returncode in (0, 143), err
    job = json.loads(path.read_text())["job"]
    truth = read_truth(tmp_path, 0)
    assert [r["restart"] for r in job["restarts"]] == [1]
    cause = first(job)
    assert (cause["rank"], cause["error"]) == (truth["rank"], truth["message"])
