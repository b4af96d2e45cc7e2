"""Stack captures: a rank's Python stack, taken with `py-spy dump --pid PID` on the rank's host.

The capture runs `py-spy dump` (with `--native` when asked) as a child process with a deadline,
on this machine when the rank's host is this one (its name as `os.uname().nodename` gives it,
which is what the in-job emitter's `socket.gethostname()` reports), else through the system
`ssh` with the SSH fan-out's own options (collectors/ssh.py: BatchMode, ConnectTimeout,
keep-alives, no forwarding, `--` before a checked host name). The child runs in a session of its
own and is killed with its whole group at the deadline, so a hung py-spy or ssh never outlives
it. Nothing here blocks: the session runs captures as asyncio tasks beside its sources.

A capture becomes one line of kind "stack" (collectors/stack_records.py: `StackLine`, JSON):
what ran and what it gave, raw (exit status, stdout up to MAX_STDOUT_BYTES, the tail of stderr,
a launch error, a timeout), with the flight-recorder and faulthandler dumps found in the run
directory then. The session records it like any line, so a replay shows the same stack; the
decoder there says what it means.
"""

import asyncio
import os
import re
import shlex
import signal
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from trnwatch.collectors.hostlist import HostNameError
from trnwatch.collectors.lines import Line
from trnwatch.collectors.process_identity import ProcessIdentity, check_local, remote_command, remote_refusal
from trnwatch.collectors.ssh import SshOptions, ssh_argv
from trnwatch.collectors.stack_records import (
    DUMP_FILES_KEPT,
    KIND,
    MAX_STDOUT_BYTES,
    SCHEMA,
    SOURCE_ID,
    StackLine,
    Via,
)

CAPTURE_TIMEOUT_S = 20.0  # ssh's ConnectTimeout (10 s) and a dump of a busy process fit in it
STDERR_KEEP_BYTES = 4096
STOP_WAIT_S = 2.0
DEFAULT_PY_SPY = "py-spy"
DUMP_SCAN_MAX_FILES = 4096  # a run directory with more entries is scanned this far only


# ---- the capture ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StackRequest:
    """Whose stack to take, and why."""

    rank: int
    host: str | None
    pid: int | None
    trigger: str
    incident: str | None = None
    contrast: bool = False
    native: bool = False
    # Which process the pid is (collectors/process_identity.py): its start in clock ticks after
    # boot, and when its run_start said it was running. A capture with neither is refused.
    start_ticks: int | None = None
    announced_s: float | None = None

    def identity(self) -> ProcessIdentity:
        assert self.pid is not None
        return ProcessIdentity(self.pid, self.start_ticks, self.announced_s)


@dataclass(frozen=True)
class StackOptions:
    """How to take stacks: the py-spy command (words, e.g. `sudo -n /opt/bin/py-spy`), the ssh
    options of the fan-out, the deadline, this machine's name, and the run directory whose
    dump files are listed."""

    py_spy: str = DEFAULT_PY_SPY
    ssh: SshOptions = field(default_factory=SshOptions)
    timeout_s: float = CAPTURE_TIMEOUT_S
    local_host: str = field(default_factory=lambda: os.uname().nodename)
    run_dir: Path | None = None


def is_local(host: str, options: StackOptions) -> bool:
    return host in (options.local_host, "localhost")


def py_spy_words(request: StackRequest, options: StackOptions) -> list[str]:
    """`py-spy dump --pid PID [--native]`, the py-spy command split as a shell would."""
    words = shlex.split(options.py_spy) + ["dump", "--pid", str(request.pid)]
    return words + (["--native"] if request.native else [])


def capture_argv(request: StackRequest, options: StackOptions) -> tuple[Via, list[str]]:
    """What to run for `request`: py-spy here, or ssh running it on the rank's host between two
    checks that the pid is still the rank's process there (the remote command quoted word by
    word). Raises `HostNameError` for a host ssh must not see."""
    assert request.host is not None and request.pid is not None
    words = py_spy_words(request, options)
    if is_local(request.host, options):
        return "local", words
    checked = remote_command(request.identity(), words)
    return "ssh", ssh_argv(request.host, replace(options.ssh, remote_command=checked))


async def _read_bounded(stream: asyncio.StreamReader, keep: int, tail: bool) -> tuple[bytes, bool]:
    """Read to EOF (the child never blocks on a full pipe); keep the first (or last) `keep`
    bytes; say whether any were dropped."""
    kept, dropped = b"", False
    while chunk := await stream.read(65536):
        kept += chunk
        if len(kept) > keep:
            dropped = True
            kept = kept[-keep:] if tail else kept[:keep]
    return kept, dropped


async def _stop_group(proc: asyncio.subprocess.Process) -> None:
    """Kill the child's whole process group (py-spy, or ssh and what it started)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        await asyncio.wait_for(proc.wait(), STOP_WAIT_S)
    except TimeoutError:
        pass


async def capture_stack(request: StackRequest, options: StackOptions) -> StackLine:
    """Run one capture to its end or its deadline; never raises for what the capture met."""
    started = time.time()
    clock = time.monotonic()
    line = StackLine(
        v=SCHEMA,
        rank=request.rank,
        host=request.host,
        pid=request.pid,
        native=request.native,
        trigger=request.trigger,
        incident=request.incident,
        contrast=request.contrast,
        via="local",
        command=[],
        started=started,
        seconds=0.0,
    )
    try:
        via, argv = _what_to_run(request, options)
        if via == "local":
            _check_identity(request)
    except _Refused as exc:
        dumps = await asyncio.to_thread(dump_files, options.run_dir)
        return line.model_copy(update={"refused": str(exc), "dump_files": dumps})
    except _NotRunning:
        dumps = await asyncio.to_thread(dump_files, options.run_dir)
        return line.model_copy(update={"not_running": True, "dump_files": dumps})
    line = line.model_copy(update={"via": via, "command": argv})
    update: dict = {}
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            # Over ssh the remote wrapper (collectors/ssh.py) reads one line, then ends py-spy when
            # the rest of its stdin closes: the line is sent, the pipe held open until the end.
            stdin=asyncio.subprocess.PIPE if via == "ssh" else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        update = {
            "launch_error": f"cannot run {argv[0]}: {exc.strerror or exc}",
            "missing": isinstance(exc, FileNotFoundError),
        }
    else:
        assert proc.stdout is not None and proc.stderr is not None  # PIPE, above
        if proc.stdin is not None:
            proc.stdin.write(b"\n")
        out_task = asyncio.create_task(_read_bounded(proc.stdout, MAX_STDOUT_BYTES, tail=False))
        err_task = asyncio.create_task(_read_bounded(proc.stderr, STDERR_KEEP_BYTES, tail=True))
        try:
            await asyncio.wait_for(asyncio.gather(out_task, err_task, proc.wait()), options.timeout_s)
        except TimeoutError:
            update["timed_out"] = True
        finally:
            if proc.stdin is not None:
                proc.stdin.close()  # over ssh: the remote py-spy is ended too, if still running
            if proc.returncode is None:
                await _stop_group(proc)
            for task in (out_task, err_task):
                task.cancel()
        (out, truncated) = out_task.result() if out_task.done() and not out_task.cancelled() else (b"", False)
        (err, _) = err_task.result() if err_task.done() and not err_task.cancelled() else (b"", False)
        update |= {
            "exit_status": None if update.get("timed_out") else proc.returncode,
            "stdout": out.decode("utf-8", "replace"),
            "stdout_truncated": truncated,
            "stderr": err.decode("utf-8", "replace"),
        }
    update |= _identity_after(request, via, update)
    seconds = round(time.monotonic() - clock, 3)
    update |= {"seconds": seconds, "dump_files": await asyncio.to_thread(dump_files, options.run_dir)}
    return line.model_copy(update=update)


_UNREAD = {"stdout": "", "stdout_truncated": False, "stderr": "", "exit_status": None}


def _identity_after(request: StackRequest, via: Via, update: dict) -> dict:
    """What the capture keeps once it is over: nothing of what ran when the pid was no longer
    the rank's process (checked here again, or by the remote check on the rank's host)."""
    if via == "local":
        if "launch_error" in update:
            return {}
        checked = check_local(request.identity())
    else:
        found = remote_refusal(update.get("exit_status"), update.get("stderr", ""))
        if found is None:
            return {}
        checked = found
    if checked.match == "same":
        return {}
    if checked.match == "gone":
        return _UNREAD | {"not_running": True}
    return _UNREAD | {"refused": f"rank {request.rank}: {checked.reason}"}


class _Refused(Exception):
    """Nothing can be run for this request; the message says why."""


class _NotRunning(Exception):
    """Nothing runs under the rank's pid here."""


def _check_identity(request: StackRequest) -> None:
    """Before a capture here: the pid must still be the rank's process (pid and start time)."""
    checked = check_local(request.identity())
    if checked.match == "gone":
        raise _NotRunning()
    if checked.match == "other":
        raise _Refused(f"rank {request.rank}: {checked.reason}")


def _what_to_run(request: StackRequest, options: StackOptions) -> tuple[Via, list[str]]:
    if request.pid is None:
        raise _Refused(f"rank {request.rank} reported no pid (no run_start seen)")
    if request.host is None:
        raise _Refused(f"rank {request.rank} reported no host")
    if not request.identity().known():
        raise _Refused(f"rank {request.rank}: which process pid {request.pid} is cannot be told (no start time known)")
    try:
        return capture_argv(request, options)
    except (HostNameError, ValueError) as exc:
        raise _Refused(f"not run: {exc}") from None


def stack_line(captured: StackLine, received_s: float) -> Line:
    """The capture as the line the session records and folds."""
    return Line(SOURCE_ID, KIND, received_s, captured.model_dump_json())


# ---- dump files in the run directory --------------------------------------------------------------

# faulthandler's own headers (Python/traceback.c, Modules/faulthandler.c): a fatal error, a
# `dump_traceback_later` timeout, or a thread's traceback.
_FAULTHANDLER_HEAD = re.compile(
    rb"^(Fatal Python error: |Timeout \(\d+:\d\d:\d\d\)!|(Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):|Stack \(most recent call first\):)"
)
# PyTorch's flight recorder writes `${TORCH_FR_DUMP_TEMP_FILE}<rank>` (default prefix
# /tmp/nccl_trace_rank_), a pickle whose top-level dict holds "entries", "version", "pg_config"
# (torch/distributed/flight_recorder/components/loader.py reads it so).
_FR_NAME = re.compile(r".*\d+$")
_PICKLE_PROTOCOL = b"\x80"
_FR_KEYS = (b"version", b"pg_config", b"entries")


def dump_files(run_dir: Path | None) -> list[str]:
    """Paths of flight-recorder and faulthandler dumps directly in `run_dir` (at most
    DUMP_FILES_KEPT), found by their names and first bytes; [] when there is none or no folder."""
    if run_dir is None:
        return []
    found: list[str] = []
    try:
        with os.scandir(run_dir) as entries:
            for n, entry in enumerate(entries):
                if n >= DUMP_SCAN_MAX_FILES or len(found) >= DUMP_FILES_KEPT:
                    break
                if entry.name.endswith(".jsonl") or not entry.is_file(follow_symlinks=False):
                    continue  # rank files (telemetry) are never dumps
                if _is_dump(entry.path, entry.name):
                    found.append(entry.path)
    except OSError:
        return found
    return sorted(found)


def _is_dump(path: str, name: str) -> bool:
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    if _FAULTHANDLER_HEAD.match(head):
        return True
    return bool(_FR_NAME.match(name)) and head.startswith(_PICKLE_PROTOCOL) and all(k in head for k in _FR_KEYS)
