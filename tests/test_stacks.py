"""Stack captures with py-spy: the real py-spy against real processes (here and through the test
sshd), and a fake `py-spy` on PATH for what a real one does rarely: hang, refuse, print garbage."""

import asyncio
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from trnwatch.collectors.decode import decode
from trnwatch.collectors.ssh import SshOptions
from trnwatch.collectors.stack_records import decode_stack_line
from trnwatch.collectors.stacks import StackOptions, StackRequest, capture_stack, dump_files, stack_line
from trnwatch.ledger.ledger import Ledger
from trnwatch.ledger.receipt import build_receipt
from trnwatch.ledger.receipt_markdown import render_markdown
from tests.sshd import MISSING, LocalSshd, alias
from tests.waiting import wait_until

PY_SPY = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
NO_PY_SPY = None if Path(PY_SPY).exists() else "py-spy is not installed (pip install py-spy: the test extra has it)"

# A process stuck in a function of a known name, and a thread beside it (as a rank's heartbeat).
HUNG_SOURCE = """
import threading, time
def heartbeat_loop():
    while True:
        time.sleep(0.2)
def stuck_in_a_known_function():
    print("ready", flush=True)
    while True:
        time.sleep(1.0)
threading.Thread(target=heartbeat_loop, name="heartbeat", daemon=True).start()
stuck_in_a_known_function()
"""


@pytest.fixture
def hung_process(tmp_path):
    script = tmp_path / "hung.py"
    script.write_text(HUNG_SOURCE)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    yield proc
    proc.kill()
    proc.wait()


def local_options(**changes) -> StackOptions:
    return StackOptions(**{"py_spy": PY_SPY, "timeout_s": 60.0, **changes})


def capture(request: StackRequest, options: StackOptions):
    """Run one capture, read it as the ledger will: (the recorded line, the capture)."""
    raw = asyncio.run(capture_stack(request, options))
    line = stack_line(raw, time.time())
    return raw, decode_stack_line(line.text)


def kernel_start_ticks(pid: int) -> int | None:
    """The process's start in clock ticks after boot, as /proc/PID/stat says (field 22)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(") ", 1)[1].split()[19])


def request_for(pid: int | None, host: str | None = None, **changes) -> StackRequest:
    """A request for the process that holds `pid` now (its start time as the kernel gives it; a
    pid nothing holds: announced now)."""
    ticks = kernel_start_ticks(pid) if pid is not None else None
    identity = {"start_ticks": ticks} if ticks is not None else {"announced_s": time.time()}
    return StackRequest(rank=1, host=host or os.uname().nodename, pid=pid, trigger="key", **(identity | changes))


def skip_if_ptrace_refused(captured) -> None:
    if captured.outcome == "permission-denied":
        pytest.skip(f"the kernel refused ptrace here: {captured.message}")


# ---- the real py-spy ---------------------------------------------------------------------------


@pytest.mark.skipif(NO_PY_SPY is not None, reason=NO_PY_SPY or "")
def test_a_hung_process_stack_names_the_function_it_is_stuck_in(hung_process):
    raw, captured = capture(request_for(hung_process.pid), local_options())
    skip_if_ptrace_refused(captured)
    assert raw.via == "local" and raw.command[-3:] == ["dump", "--pid", str(hung_process.pid)]
    assert captured.outcome == "ok", captured.message
    main = captured.main_thread()
    assert main is not None and main.name == "MainThread"
    assert [f.function for f in main.frames] == ["stuck_in_a_known_function", "<module>"]
    assert main.frames[0].file == "hung.py" and main.frames[0].line == 9
    heartbeat = next(t for t in captured.threads if t.name == "heartbeat")
    assert heartbeat.frames[0].function == "heartbeat_loop"


@pytest.mark.skipif(NO_PY_SPY is not None, reason=NO_PY_SPY or "")
def test_native_frames_come_with_native_asked_for(hung_process):
    raw, captured = capture(request_for(hung_process.pid, native=True), local_options())
    skip_if_ptrace_refused(captured)
    assert raw.command[-1] == "--native" and captured.outcome == "ok", captured.message
    functions = [f.function for f in captured.main_thread().frames]
    assert "stuck_in_a_known_function" in functions
    assert functions.index("stuck_in_a_known_function") > 0  # the C frames of time.sleep are inside it


@pytest.mark.skipif(NO_PY_SPY is not None, reason=NO_PY_SPY or "")
def test_a_pid_that_is_gone_says_so():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    _, captured = capture(request_for(proc.pid), local_options())
    assert captured.outcome == "no-process", captured.message
    assert f"pid {proc.pid} is not running here" in captured.message


SETPRIV = shutil.which("setpriv")


@pytest.fixture
def nobody_py_spy(tmp_path):
    """The real py-spy run as user nobody (setpriv), which ptrace must refuse on a root process."""
    if os.geteuid() != 0 or SETPRIV is None:
        pytest.skip("needs root and setpriv to run py-spy as another user")
    copy = tmp_path / "py-spy"  # where nobody can execute it
    shutil.copy(PY_SPY, copy)
    tmp_path.chmod(0o755)
    copy.chmod(0o755)
    return f"{SETPRIV} --reuid=65534 --regid=65534 --clear-groups {copy}"


@pytest.mark.skipif(NO_PY_SPY is not None, reason=NO_PY_SPY or "")
def test_ptrace_refused_by_the_kernel_is_said_as_permission_denied(hung_process, nobody_py_spy):
    raw, captured = capture(request_for(hung_process.pid), local_options(py_spy=nobody_py_spy))
    assert raw.exit_status == 1
    assert captured.outcome == "permission-denied", (captured.message, raw.stderr)
    assert "ptrace not permitted here" in captured.message and "Permission Denied" in captured.message


def test_py_spy_missing_here_says_how_to_install_it(tmp_path):
    _, captured = capture(request_for(os.getpid()), local_options(py_spy=str(tmp_path / "no-such-py-spy")))
    assert captured.outcome == "py-spy-missing"
    assert "pip install py-spy" in captured.message


def test_no_pid_or_a_hostile_host_runs_nothing():
    _, no_pid = capture(request_for(None), local_options())
    assert (no_pid.outcome, no_pid.message) == ("refused", "rank 1 reported no pid (no run_start seen)")
    raw, hostile = capture(request_for(1234, host="-oProxyCommand=touch /tmp/x"), local_options())
    assert raw.command == [] and hostile.outcome == "refused" and "ssh would read it as an option" in hostile.message


# ---- a fake py-spy on PATH -----------------------------------------------------------------------


def fake_py_spy(folder: Path, body: str) -> dict[str, str]:
    """A `py-spy` shell script first on PATH; returns the environment that has it."""
    folder.mkdir(exist_ok=True)
    script = folder / "py-spy"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return {"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


@pytest.fixture
def on_path(monkeypatch, tmp_path):
    def put(body: str) -> None:
        monkeypatch.setenv("PATH", fake_py_spy(tmp_path / "bin", body)["PATH"])

    return put


def test_a_py_spy_that_never_answers_is_stopped_at_the_deadline(on_path, tmp_path):
    pid_file = tmp_path / "sleeper.pid"
    on_path(f"sleep 300 &\necho $! > {pid_file}\nwait\n")
    raw, captured = capture(request_for(os.getpid()), StackOptions(timeout_s=1.0))
    assert raw.timed_out and captured.outcome == "timeout"
    assert captured.message == "no answer within 1 s here: the capture was stopped"
    sleeper = int(pid_file.read_text())  # the fake's own child died with its process group
    wait_until(lambda: not psutil.pid_exists(sleeper) or psutil.Process(sleeper).status() == "zombie", "sleep killed")


@pytest.mark.skipif(NO_PY_SPY is not None, reason=NO_PY_SPY or "")
def test_a_refusal_in_py_spy_own_words_from_a_fake(hung_process, nobody_py_spy, on_path, tmp_path):
    """The fake says what the real py-spy said when the kernel refused it (captured just now)."""
    real = subprocess.run([*nobody_py_spy.split(), "dump", "--pid", str(hung_process.pid)], capture_output=True)
    assert real.returncode == 1
    (tmp_path / "said.txt").write_bytes(real.stderr)
    on_path(f"cat {tmp_path / 'said.txt'} >&2\nexit 1\n")
    _, captured = capture(request_for(hung_process.pid), StackOptions())
    assert captured.outcome == "permission-denied" and captured.threads == []


def test_garbage_from_py_spy_is_unreadable_and_shown_as_data(on_path):
    on_path("printf '\\033]52;c;aGVsbG8=\\007[bold red]boom[/] \\033[2J\\nno stack here\\n'\n")
    raw, captured = capture(request_for(os.getpid()), StackOptions())
    assert raw.exit_status == 0 and captured.outcome == "unreadable"
    assert captured.threads == [] and "\x1b" in captured.text  # kept raw, as printed ...
    ledger = Ledger("live")
    ledger.ingest(stack_line(raw, time.time()))
    markdown = render_markdown(build_receipt(ledger, "quit", written_at_s=time.time()))
    assert "\x1b" not in markdown and "\x07" not in markdown  # ... and never reaches an output raw
    receipt = json.loads(build_receipt(ledger, "quit", written_at_s=time.time()).to_json())
    assert receipt["stacks"]["captures"][0]["outcome"] == "unreadable"


def test_a_stack_line_that_is_not_a_capture_is_counted_not_kept():
    raw = asyncio.run(capture_stack(request_for(None), StackOptions()))
    line = stack_line(raw, time.time())
    ledger = Ledger("live")
    ledger.ingest(type(line)(line.source_id, line.kind, line.received_s, '{"v": "trnwatch.stack/1", "rank": "x"}'))
    ledger.ingest(line)
    assert (len(ledger.stacks), ledger.stacks.rejected, ledger.sources) == (1, {"stack-schema": 1}, {})
    assert decode(line).records[0].outcome == "refused"


# ---- dumps in the run directory -------------------------------------------------------------------


def test_faulthandler_dumps_in_the_run_directory_are_listed(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    code = f"import faulthandler; faulthandler.dump_traceback(open({str(run_dir / 'hang.txt')!r}, 'w'))"
    subprocess.run([sys.executable, "-c", code], check=True)
    (run_dir / "rank-00000.jsonl").write_text('{"v": "trnwatch.job/1"}\n')
    assert dump_files(run_dir) == [str(run_dir / "hang.txt")]
    assert dump_files(tmp_path / "missing") == [] and dump_files(None) == []


# ---- through ssh -----------------------------------------------------------------------------------


@pytest.fixture
def sshd(tmp_path):
    if MISSING:
        pytest.skip(MISSING)
    server = LocalSshd.start(tmp_path / "sshd", n_aliases=1)
    yield server
    server.stop()


@pytest.mark.skipif(NO_PY_SPY is not None, reason=NO_PY_SPY or "")
def test_a_stack_through_ssh_and_a_py_spy_missing_there(sshd, hung_process):
    options = StackOptions(py_spy=PY_SPY, ssh=SshOptions(config_file=sshd.ssh_config), timeout_s=60.0)
    raw, captured = capture(request_for(hung_process.pid, host=alias(0)), options)
    skip_if_ptrace_refused(captured)
    assert raw.via == "ssh" and raw.command[:3] == ["ssh", "-F", str(sshd.ssh_config)]
    assert captured.outcome == "ok", captured.message
    assert captured.main_thread().frames[0].function == "stuck_in_a_known_function"

    missing = StackOptions(py_spy="/nonexistent/py-spy", ssh=options.ssh, timeout_s=60.0)
    raw, captured = capture(request_for(hung_process.pid, host=alias(0)), missing)
    assert raw.exit_status == 127 and captured.outcome == "py-spy-missing"
    assert f"py-spy not found on {alias(0)}" in captured.message


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs the OpenSSH client (ssh)")
def test_a_host_ssh_cannot_reach_is_said_in_ssh_own_words():
    raw, captured = capture(request_for(1234, host="no-such-host.invalid"), StackOptions(timeout_s=60.0))
    assert raw.via == "ssh" and raw.exit_status == 255
    assert captured.outcome == "ssh-failed" and "Could not resolve hostname no-such-host.invalid" in captured.message
