"""Launchers other than torchrun: Open MPI for real (`mpirun --tag-output`, apt openmpi-bin), and
Slurm's `srun --label` layout (tests/slurm_label.py) over real workers' output. tests/launcher_case.py
makes the failure happen and writes its truth; `trnwatch watch --job-log` reads the log after the
fact and its receipt is checked against that truth."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.slurm_label import label, task_exit
from tests.sshd import free_port

CASE = Path(__file__).with_name("launcher_case.py")
TRNWATCH = [sys.executable, "-m", "trnwatch"]


def receipt(tmp_path, log: Path, *options: str) -> dict:
    path = tmp_path / "receipt.json"
    command = [*TRNWATCH, "watch", "--headless", "--duration", "2", "--receipt", str(path), "--job-log", str(log)]
    command += options
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(path.read_text())["job"]


def truth(tmp_path) -> dict:
    return json.loads((tmp_path / "truth.json").read_text())


def mpirun(tmp_path, case: str, rank: int, step: int) -> tuple[Path, int]:
    log = tmp_path / "mpirun.log"
    command = ["mpirun", "--tag-output", "--allow-run-as-root", "--oversubscribe", "-np", "3"]
    command += ["-x", f"MASTER_PORT={free_port()}"]
    command += [sys.executable, str(CASE), case, str(rank), str(step), str(tmp_path)]
    with open(log, "w") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path, timeout=120)
    return log, done.returncode


needs_mpirun = pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs Open MPI (apt openmpi-bin)")


@pytest.mark.slow
@needs_mpirun
def test_open_mpi_an_exception_in_one_rank_is_its_failure_with_its_traceback_line(tmp_path):
    log, code = mpirun(tmp_path, "raise", 2, 4)
    known = truth(tmp_path)
    text = log.read_text()
    # The rank's exception line, as mpirun writes it: whole, or (on a busy machine) in pieces with
    # its tag repeated inside the line (`RuntimeError[1,2]<stderr>:: ...`), which the reader strips.
    assert code != 0 and re.search(r"^\[\d+,2\]<stderr>:RuntimeError\b", text, re.M)
    job = receipt(tmp_path, log)
    assert job["verdict"] == "failed"
    [failure] = job["failures"]  # the traceback; Open MPI's own account of the same rank is not repeated
    assert (failure["rank"], failure["error"], failure["source"]) == (known["rank"], known["message"], "job")
    assert job["reason"].startswith(f"first failure rank {known['rank']} ")


@pytest.mark.slow
@needs_mpirun
def test_open_mpi_a_rank_killed_by_a_signal_is_named_from_mpiruns_own_line(tmp_path):
    log, code = mpirun(tmp_path, "kill", 1, 4)
    known = truth(tmp_path)
    assert "exited on signal 9 (Killed)" in log.read_text()
    job = receipt(tmp_path, log)
    [failure] = job["failures"]
    assert (failure["rank"], failure["signal"], failure["exit_code"], failure["source"]) == (
        known["rank"],
        "SIGKILL",
        -9,
        "launcher",
    )


# The workers' `step N` lines, read through a profile of the user's own (docs/job-telemetry.md).
STEP_PROFILE = """
[[profile]]
name = "steps"
detect = ['^step \\d+$']
[[profile.rules]]
pattern = '^step (?P<step>\\d+)$'
emit = [{ event = "step" }]
"""


@pytest.mark.slow
@needs_mpirun
def test_open_mpi_a_rank_that_hangs_silently_is_the_one_its_peers_waited_for(tmp_path):
    # Rank 1 sleeps outside the all-reduce at step 4; ranks 0 and 2 time out in it (gloo, 3 s) and
    # raise; mpirun then stops rank 1 without a word about it. The log holds no line of rank 1's
    # after step 3: its silence, against its peers' timeouts, is the evidence.
    log, code = mpirun(tmp_path, "hang", 1, 4)
    known = truth(tmp_path)
    text = log.read_text()
    assert code != 0 and "Timed out waiting 3000ms for recv operation to complete" in text
    assert "[1,1]<stderr>:" not in text  # rank 1 wrote no error
    profile = tmp_path / "steps.toml"
    profile.write_text(STEP_PROFILE)
    job = receipt(tmp_path, log, "--log-profile-file", str(profile))
    assert job["verdict"] == "failed"
    assert job["reason"].startswith(f"first failure rank {known['rank']} ")
    assert f"rank {known['rank']} did not: it was the one they waited for" in job["reason"]
    first = [f for f in job["failures"] if f["role"] == "first"]
    assert [(f["rank"], f["kind"]) for f in first] == [(known["rank"], "silent")]
    waiting = {f["rank"] for f in job["failures"] if f["kind"] == "error"}
    assert waiting == {0, 2}
    print(json.dumps({"truth": known["rank"], "reason": job["reason"], "failures": job["failures"]}))


@pytest.mark.slow
@pytest.mark.parametrize("zero_pad", [False, True])
def test_slurm_labels_map_lines_to_task_ranks(tmp_path, zero_pad):
    # Two real workers of a 12-task step (label width 2), tasks 3 and 10; task 10 raises. Their
    # output is labelled as srun --label writes it, in the order the lines were written.
    ntasks, failing = 12, 10
    lines = []
    for task in (3, failing):
        env = {**os.environ, "SLURM_PROCID": str(task)}
        done = subprocess.run(
            [sys.executable, str(CASE), "raise", str(failing), "5", str(tmp_path)],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        lines += [label(task, ntasks, line, zero_pad) for line in (done.stdout + done.stderr).splitlines()]
    log = tmp_path / "srun.log"
    log.write_text("\n".join(lines) + "\n")
    known = truth(tmp_path)
    assert f"{failing}: {known['message']}" in log.read_text()
    job = receipt(tmp_path, log)
    [failure] = job["failures"]
    assert (failure["rank"], failure["error"]) == (known["rank"], known["message"])


@pytest.mark.slow
def test_sruns_error_lines_name_the_tasks_that_exited_or_were_killed(tmp_path):
    # Real workers of a 12-task step: task 10 raises (exit code 1), task 7 is killed by SIGKILL.
    # Their output is labelled as srun --label writes it; srun's own lines for them (the
    # generator's, from Slurm's statements) carry the real exit statuses, in the order they ended.
    ntasks, lines, ended = 12, [], []
    for task, case in ((10, "raise"), (7, "kill")):
        env = {**os.environ, "SLURM_PROCID": str(task)}
        done = subprocess.run(
            [sys.executable, str(CASE), case, str(task), "5", str(tmp_path)],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        lines += [label(task, ntasks, line) for line in (done.stdout + done.stderr).splitlines()]
        code = done.returncode
        ended.append(
            task_exit("trn-[01-03]", [task], exit_code=code) if code > 0 else task_exit("trn-02", [task], signum=-code)
        )
    assert ended[1] == "srun: error: trn-02: task 7: Killed"
    log = tmp_path / "srun.log"
    log.write_text("\n".join(lines + ended) + "\n")
    job = receipt(tmp_path, log)
    got = {f["rank"]: (f["source"], f["exit_code"], f["signal"], f["error"]) for f in job["failures"]}
    assert got[10] == ("job", None, None, "RuntimeError: injected failure on rank 10 at step 5")
    assert got[7] == ("launcher", -9, "SIGKILL", "worker ended by SIGKILL (it printed no traceback)")
    assert set(got) == {7, 10}
    # Task 10 ended first: its traceback is the first failure the log tells, srun's line for it
    # comes first too; the lower rank number does not decide.
    assert job["reason"].startswith("first failure rank 10 ")
    print(json.dumps({"reason": job["reason"], "failures": job["failures"]}))
