"""A rank's process is its pid and its start time: py-spy never reads a process that merely holds
a dead rank's pid (issue 36 item 3). A pid given to another process for real (a private pid
namespace, tests/pid_reuse.py), and a live process presented with a start time that is not its
own, here and through the test sshd."""

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from trnwatch.collectors.lines import Line
from trnwatch.collectors.ssh import SshOptions
from trnwatch.collectors.stacks import StackOptions, StackRequest
from trnwatch.ledger.ledger import Ledger
from trnwatch.stacks import StackCapturer, rank_request
from tests.pid_reuse import TOKEN
from tests.sshd import alias
from tests.test_stacks import NO_PY_SPY, PY_SPY, capture, hung_process, kernel_start_ticks, sshd  # noqa: F401

REPO = Path(__file__).resolve().parents[1]
UNSHARE = shutil.which("unshare")


def namespaces_here() -> str | None:
    """Why a private pid namespace cannot be made here, or None."""
    if os.geteuid() != 0 or UNSHARE is None:
        return "needs root and unshare(1) for a private pid namespace"
    probe = subprocess.run([UNSHARE, "--pid", "--fork", "--mount-proc", "true"], capture_output=True, text=True)
    return None if probe.returncode == 0 else f"unshare --pid refused here: {probe.stderr.strip()}"


@pytest.mark.slow
@pytest.mark.skipif(NO_PY_SPY is not None, reason=NO_PY_SPY or "")
@pytest.mark.parametrize("mode", ["emitter", "first-seen", "during"])
def test_a_dead_rank_pid_held_by_another_process_is_never_dumped(tmp_path, mode):
    missing = namespaces_here()
    if missing:
        pytest.skip(missing)
    argv = [UNSHARE, "--pid", "--fork", "--mount-proc", sys.executable, "-m", "tests.pid_reuse", str(tmp_path), mode]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["other_pid"] == found["rank_pid"], found  # the pid changed hands for real
    line = json.loads(found["line"])
    assert line["refused"].startswith(f"rank 0: pid {found['rank_pid']} is another process now"), line
    assert line["stdout"] == "" and line["stderr"] == ""
    assert TOKEN not in found["line"] and "someone_elses_loop" not in found["line"]
    assert line["command"] == ([] if mode != "during" else line["command"])  # py-spy never ran, but in `during`


@pytest.mark.skipif(NO_PY_SPY is not None, reason=NO_PY_SPY or "")
def test_a_live_process_under_another_start_time_is_refused_here(hung_process):  # noqa: F811
    ticks = kernel_start_ticks(hung_process.pid)
    request = StackRequest(rank=3, host=os.uname().nodename, pid=hung_process.pid, trigger="key", start_ticks=ticks - 1)
    raw, captured = capture(request, StackOptions(py_spy=PY_SPY, timeout_s=60.0))
    assert raw.command == [] and raw.stdout == ""
    assert captured.outcome == "refused", captured.message
    assert captured.message == (
        f"rank 3: pid {hung_process.pid} is another process now (started at tick {ticks} after boot; "
        f"the rank's at tick {ticks - 1}): not read"
    )


@pytest.mark.skipif(NO_PY_SPY is not None, reason=NO_PY_SPY or "")
def test_a_process_started_after_the_rank_announced_itself_is_not_the_rank(hung_process):  # noqa: F811
    """A run_start without a start time, 60 s before the process that holds its pid started: the
    capturer's first sight of the pid is of someone else's process, and it is not taken."""
    host = os.uname().nodename
    event = {
        "v": "trnwatch.job/1",
        "ts": time.time() - 60,
        "run": "r",
        "rank": 0,
        "event": "run_start",
        "world_size": 1,
        "host": host,
        "pid": hung_process.pid,
        "local_rank": 0,
        "backend": "cpu",
        "core": None,
        "chip": None,
        "model": {"name": "m", "params": 1},
        "precision": "fp32",
        "global_batch": 1,
        "micro_batch": 1,
        "seq_len": 8,
        "parallel": {"tp": 1, "pp": 1, "dp": 1},
        "versions": {},
        "restart": 0,
    }
    ledger = Ledger("live")
    ledger.ingest(Line("job:r", "job", time.time(), json.dumps(event)))
    delivered: list[Line] = []

    async def ask():
        capturer = StackCapturer(ledger, StackOptions(py_spy=PY_SPY, timeout_s=60.0), delivered.append)
        capturer.learn_identities()  # first seen: it started after the run_start, so nothing is learnt
        request = rank_request(ledger, 0, "key")
        assert request is not None and request.announced_s == event["ts"]
        capturer.request([request])
        while not delivered:
            await asyncio.sleep(0.05)

    asyncio.run(asyncio.wait_for(ask(), 120))
    line = json.loads(delivered[0].text)
    assert line["command"] == [] and line["stdout"] == ""
    assert line["refused"].startswith(f"rank 0: pid {hung_process.pid} is another process now (started ")
    assert line["refused"].endswith(" s after the rank's run_start): not read")


def test_a_request_with_no_start_time_and_no_run_start_is_refused():
    raw, captured = capture(
        StackRequest(rank=2, host=os.uname().nodename, pid=os.getpid(), trigger="key"), StackOptions()
    )
    assert raw.command == [] and captured.outcome == "refused"
    assert captured.message == f"rank 2: which process pid {os.getpid()} is cannot be told (no start time known)"


@pytest.mark.skipif(NO_PY_SPY is not None, reason=NO_PY_SPY or "")
def test_over_ssh_the_pid_is_checked_on_the_rank_host(sshd, hung_process):  # noqa: F811
    options = StackOptions(py_spy=PY_SPY, ssh=SshOptions(config_file=sshd.ssh_config), timeout_s=60.0)
    ticks = kernel_start_ticks(hung_process.pid)
    asked = StackRequest(rank=1, host=alias(0), pid=hung_process.pid, trigger="key")
    for request, said in (
        (replace(asked, start_ticks=ticks + 1), f"started at tick {ticks} after boot; the rank's at tick {ticks + 1}"),
        (replace(asked, announced_s=time.time() - 60), ", after the rank's run_start"),
    ):
        raw, captured = capture(request, options)
        assert raw.via == "ssh" and raw.stdout == "" and raw.stderr == ""
        assert captured.outcome == "refused", captured.message
        assert (
            captured.message.startswith(f"rank 1: pid {hung_process.pid} is another process now (")
            and said in captured.message
        )

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    raw, captured = capture(StackRequest(rank=1, host=alias(0), pid=gone.pid, trigger="key", start_ticks=1), options)
    assert captured.outcome == "no-process" and captured.message == f"pid {gone.pid} is not running on {alias(0)}"
