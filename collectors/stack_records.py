"""A rank's stack capture as a line and as a record: `StackLine` (what ran and what it gave,
raw: the line the session records, kind "stack") and `StackCapture` (what it means: the outcome,
a one-line message for people, and the threads and frames py-spy printed), and the decoder from
one to the other. No I/O here: the capture itself is collectors/stacks.py.

Outcomes: `ok`; `py-spy-missing` (not on this machine's PATH, or the remote shell found no such
command: exit 127); `permission-denied` (ptrace refused: py-spy says "Permission Denied",
"Operation not permitted" or EPERM/EACCES); `no-process` (the pid is gone); `timeout`;
`ssh-failed` (ssh's own exit 255, or no ssh here); `unreadable` (py-spy exited 0 but printed no
stack we can read); `refused` (nothing was run, or nothing of it kept: no pid or host known, a
host name ssh must not see, or a pid that is another process now: collectors/process_identity.py);
`failed` (anything else, with py-spy's or ssh's last words). py-spy's text is data: the view and
the receipt clean it.
"""

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from trnwatch.collectors.lines import LineKind

KIND: LineKind = "stack"
SOURCE_ID = "trnwatch:stacks"
SCHEMA: Literal["trnwatch.stack/1"] = "trnwatch.stack/1"
MAX_STDOUT_BYTES = 64 * 1024  # one rank's stack text kept (py-spy prints ~100 bytes a frame)
MESSAGE_MAX_CHARS = 300
DUMP_FILES_KEPT = 16  # dump files listed with one capture

Via = Literal["local", "ssh"]
Outcome = Literal[
    "ok",
    "py-spy-missing",
    "permission-denied",
    "no-process",
    "timeout",
    "ssh-failed",
    "unreadable",
    "refused",
    "failed",
]


class StackLine(BaseModel):
    """One capture as it ran (the recorded line): the request, then the raw result."""

    model_config = ConfigDict(extra="ignore")

    v: Literal["trnwatch.stack/1"]
    rank: int
    host: str | None
    pid: int | None
    native: bool
    trigger: str  # "key", "palette", or "stall" (the automatic capture when a stall is confirmed)
    incident: str | None  # which confirmed stall it belongs to (automatic captures)
    contrast: bool  # a waiting rank taken beside the suspects, for contrast
    via: Via
    command: list[str]  # what ran here (argv), or [] when nothing could be run
    started: float  # unix s
    seconds: float  # how long the capture took, to its end or its deadline
    refused: str | None = None  # why nothing was run, or why nothing of what ran is kept
    not_running: bool = False  # nothing ran under the pid when it was checked (process_identity.py)
    launch_error: str | None = None  # the child could not be started (`missing`: no such file)
    missing: bool = False
    timed_out: bool = False
    exit_status: int | None = None
    stdout: str = ""
    stdout_truncated: bool = False
    stderr: str = ""  # its tail
    dump_files: list[str] = []


class StackFrame(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    function: str
    file: str | None  # a Python file, or the shared library of a native frame
    line: int | None


class ThreadStack(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    thread: str  # py-spy's thread id
    name: str | None  # "MainThread", ...
    state: str | None  # "idle", "active", ...
    frames: list[StackFrame]  # innermost first, as py-spy prints them


class StackCapture(BaseModel):
    """A capture as trnwatch reads it: the outcome, a message for people, the threads."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rank: int
    host: str | None
    pid: int | None
    native: bool
    trigger: str
    incident: str | None
    contrast: bool
    via: Via
    started: float
    seconds: float
    outcome: Outcome
    message: str  # one line: "ok: 2 threads", or what went wrong in py-spy's or ssh's words
    threads: list[ThreadStack]
    text: str  # py-spy's output as printed (at most MAX_STDOUT_BYTES)
    text_truncated: bool
    dump_files: list[str]  # flight-recorder / faulthandler dumps in the run directory at the time

    def main_thread(self) -> ThreadStack | None:
        """The thread named MainThread, else the first one printed."""
        return next((t for t in self.threads if t.name == "MainThread"), self.threads[0] if self.threads else None)


# ---- reading a capture --------------------------------------------------------------------------

_THREAD = re.compile(r'^Thread (?P<id>\S+) \((?P<state>[^)]*)\)(?:: "(?P<name>.*)")?\s*$')
_FRAME = re.compile(r"^\s+(?P<function>.+?) \((?P<where>[^()]*)\)\s*$")
_PERMISSION = re.compile(r"Permission [Dd]enied|Operation not permitted|os error (1|13)\)")
_NO_PROCESS = re.compile(r"No such process|os error 3\)|Check that the process is running")
_NOT_FOUND_127 = 127  # a POSIX shell's status for a command it cannot find
SSH_FAILED = 255  # ssh's own status for its own errors


class StackLineError(ValueError):
    """A "stack" line that is not a trnwatch.stack/1 capture."""


def parse_py_spy_dump(text: str) -> list[ThreadStack]:
    """The threads and frames of `py-spy dump`'s output (innermost frame first); lines that are
    neither a thread header nor a frame (the Process / Python header) are skipped."""
    threads: list[ThreadStack] = []
    current: dict | None = None
    for raw in text.splitlines():
        header = _THREAD.match(raw)
        if header:
            if current is not None:
                threads.append(ThreadStack(**current))
            current = {"thread": header["id"], "name": header["name"], "state": header["state"], "frames": []}
            continue
        frame = _FRAME.match(raw) if current is not None else None
        if frame is None or current is None:
            continue
        where, _, line = frame["where"].rpartition(":")
        if where and line.isdigit():
            current["frames"].append(StackFrame(function=frame["function"], file=where, line=int(line)))
        else:
            current["frames"].append(StackFrame(function=frame["function"], file=frame["where"] or None, line=None))
    if current is not None:
        threads.append(ThreadStack(**current))
    return threads


def _said(text: str) -> str:
    """py-spy's error in one line: its `Error:` line and the innermost cause; else the last line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    error = next((ln for ln in lines if ln.startswith("Error:")), None)
    if error is None:
        return lines[-1][:MESSAGE_MAX_CHARS] if lines else ""
    causes = [ln.split(":", 1)[1].strip() for ln in lines if re.match(r"^\d+: ", ln)]
    said = error + (f" ({causes[-1]})" if causes else "")
    return said[:MESSAGE_MAX_CHARS]


def _outcome(line: StackLine, threads: list[ThreadStack]) -> tuple[Outcome, str]:
    where = f"on {line.host}" if line.via == "ssh" else "here"
    if line.refused is not None:
        return "refused", line.refused
    if line.not_running:
        return "no-process", f"pid {line.pid} is not running {where}"
    if line.launch_error is not None:
        if line.missing:
            what = "py-spy" if line.via == "local" else "ssh"
            if what == "py-spy":
                return "py-spy-missing", f"py-spy not found here ({line.launch_error}): pip install py-spy"
            return "ssh-failed", f"ssh not found here ({line.launch_error})"
        return "failed", line.launch_error
    if line.timed_out:
        return "timeout", f"no answer within {line.seconds:.0f} s {where}: the capture was stopped"
    said = _said(line.stderr)
    if line.exit_status == 0:
        if threads:
            return "ok", f"{len(threads)} thread(s), {sum(len(t.frames) for t in threads)} frame(s)"
        first = next((ln.strip() for ln in line.stdout.splitlines() if ln.strip()), "")
        return "unreadable", f"py-spy exited 0 but printed no stack: {first[:200]!r}"
    if _PERMISSION.search(line.stderr):
        return (
            "permission-denied",
            f"ptrace not permitted {where} (ptrace scope, or a container without SYS_PTRACE): {said}",
        )
    if _NO_PROCESS.search(line.stderr):
        return "no-process", f"pid {line.pid} is not running {where}: {said}"
    if line.via == "ssh" and line.exit_status == _NOT_FOUND_127:
        return "py-spy-missing", f"py-spy not found on {line.host} (pip install py-spy there, or --py-spy PATH): {said}"
    if line.via == "ssh" and line.exit_status == SSH_FAILED:
        return "ssh-failed", said or "ssh exited with status 255 and no message"
    return "failed", f"exit status {line.exit_status}: {said}" if said else f"exit status {line.exit_status}"


def decode_stack_line(text: str) -> StackCapture:
    """The capture a "stack" line holds, read: outcome, message, threads. Raises `StackLineError`."""
    try:
        line = StackLine.model_validate_json(text)
    except ValidationError as exc:
        raise StackLineError(f"not a {SCHEMA} line: {exc.errors()[0]['msg']}") from None
    threads = parse_py_spy_dump(line.stdout) if line.exit_status == 0 else []
    outcome, message = _outcome(line, threads)
    return StackCapture(
        rank=line.rank,
        host=line.host,
        pid=line.pid,
        native=line.native,
        trigger=line.trigger,
        incident=line.incident,
        contrast=line.contrast,
        via=line.via,
        started=line.started,
        seconds=line.seconds,
        outcome=outcome,
        message=message,
        threads=threads,
        text=line.stdout[:MAX_STDOUT_BYTES],
        text_truncated=line.stdout_truncated or len(line.stdout) > MAX_STDOUT_BYTES,
        dump_files=line.dump_files[:DUMP_FILES_KEPT],
    )
