"""Launchers in a log: which rank wrote a line (torchrun's, Open MPI's and Slurm's prefixes), and
torchrun's and Open MPI's own story: attempts, restarts, each worker's failure and its message,
the agent stopped by a signal. Read for every log, beside the log profiles (log_profiles.py calls it).

Prefixes (`split_prefix`):
- torchrun `--tee`/`--role`: `[<role><rank>]:` (`[rank3]:`, `[default3]:`); inside any launcher's
  prefix, torch's own `[rank3]: ` before a worker's exception lines once its process group is up
  (torch 2.13; under mpirun too: tests/test_launchers_real.py);
- Open MPI `mpirun --tag-output`: `[<jobid>,<rank>]<stdout>:` / `<stderr>:` (Open MPI 4.1.4, run
  here: tests/test_launchers_real.py), repeated inside a line the worker wrote in pieces;
- Slurm `srun --label`: `<task id>: `, the id padded to the width of the largest
  (SchedMD/slurm src/common/write_labelled_message.c: `"%0*d: "`, `"%*d: "` in later releases).

Slurm's own lines: srun's `srun: error: <hosts>: task(s) <ids>: Exited with exit code N` / `: <signal
description>[ (core dumped)]` / `: Out Of Memory` (a failure per task, `_srun_line`).

Open MPI's own lines (4.1.4, orte's help-orterun.txt messages as printed here): `mpirun detected
that one or more processes exited with non-zero status, ... The first process to do so was:`
then `  Process name: [[13001,1],1]` and `  Exit code:    1`; `mpirun noticed that process rank 1
with PID 0 on node vm exited on signal 9 (Killed).` Each is that rank's failure, the first the
launcher observed. A worker's traceback under an Open MPI or Slurm prefix is that rank's failure
too (`source: job`), at the traceback's end: those launchers print no summary per rank.

Layouts read, from torch 2.13.0 (checked against real runs: tests/test_torchrun_real.py):
- the elastic agent's lines, in torch's logging layout `<L><mmdd> <hh:mm:ss.us> <pid> <path>:<line>] <msg>`
  (no year: the receive time's year is used):
  `failed (exitcode: N) local_rank: R (pid: P) of binary: ...` (torch/distributed/elastic/
  multiprocessing/api.py: the first failed worker of an attempt, after the others were sent
  `Sending process P closing signal SIGTERM`), `Received 15 death signal, shutting down workers`
  (torch/distributed/elastic/agent/server/api.py), and the agent's last line
  `torch.distributed.elastic.multiprocessing.api.SignalException: Process P got signal: 15`;
- the ChildFailedError summary (torch/distributed/elastic/multiprocessing/errors/__init__.py,
  `_FAILURE_FORMAT_TEMPLATE`): a block of `[i]:` records (time, rank, exitcode and pid, error_file,
  traceback, the traceback's further lines indented), the first observed failure under
  `Root Cause (first observed failure):`, closed by a line of `=`;
- each worker's Python traceback (`--tee`, `--redirects`/`--log-dir` files): its last line, the
  exception, is that rank's failure message.

What the agent prints at its default level (WARNING) and what follows from it: a restart prints
nothing of its own. An attempt's failure line followed by a worker's output, or by another
failure line, is a restart; a failure line followed by the summary is the last attempt, and the
summary's Root Cause record is that failure again (same pid): it is reported once, with the
failure line's time (milliseconds; the summary's times are whole seconds).

The failure of an attempt is held until what follows it says which case it is (a worker line,
another failure line, the summary, the agent's death); nothing else is held.
"""

import json
import os
import re
import signal as signal_module
import stat
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from trnwatch.collectors.job_events import SCHEMA_VERSION, Error, JobEvent, Launcher

MAX_MESSAGE_CHARS = 500
# A worker's `@record` error file (torch/distributed/elastic/multiprocessing/errors/error_handler.py
# `record_exception`: `{"message": {"message": "<Type>: <text>", "extraInfo": {"py_callstack": ...,
# "timestamp": ...}}}`): a message and a Python traceback, a few KiB. Read up to this many bytes.
MAX_ERROR_FILE_BYTES = 256 * 1024
_TORCHRUN_PREFIX = re.compile(r"^\[[A-Za-z_]+?(?P<rank>\d+)\]:\s?")
_INNER_RANK_PREFIX = re.compile(r"^\[rank\d+\]: ?")  # torch's own, inside a launcher's
_MPI_PREFIX = re.compile(r"^\[\d+,(?P<rank>\d+)\]<(?:stdout|stderr|stddiag)>: ?")
# Open MPI tags every write, not every line: a worker writing a line in pieces (Python's traceback
# on unbuffered stderr) gets the tag again inside it (`    [1,2]<stderr>:main()[1,2]<stderr>:`).
_MPI_TAG = re.compile(r"\[\d+,\d+\]<(?:stdout|stderr|stddiag)>:")
_SLURM_PREFIX = re.compile(r"^ *(?P<rank>\d+): ")
_PREFIXES = (("torchrun", _TORCHRUN_PREFIX), ("mpi", _MPI_PREFIX), ("slurm", _SLURM_PREFIX))
_MPI_FIRST = re.compile(r"^mpirun detected that one or more processes exited with non-zero status")
_MPI_PROCESS = re.compile(r"^  Process name: \[\[\d+,\d+\],(?P<rank>\d+)\]")
_MPI_EXIT = re.compile(r"^  Exit code: +(?P<exit>-?\d+)")
# srun's line for tasks that ended badly, at its default level (SchedMD/slurm@284c3b95f0
# src/srun/launch.c `_task_finish`, through src/common/log.c `_log_msg`'s `srun: error: `):
# `srun: error: <hosts>: task 3: Exited with exit code 1`, `...: tasks 0-2,5: Killed` (the task
# ids as src/common/bitstring.c `bit_fmt` writes them, the signal as strsignal() names it, then
# ` (core dumped)` when it dumped core), `...: task 4: Out Of Memory`.
_SRUN = re.compile(r"^srun: error: (?P<hosts>\S+): tasks? (?P<tasks>\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*): (?P<what>.+?)$")
_SRUN_EXIT = re.compile(r"^Exited with exit code (?P<exit>\d+)$")
_STRSIGNAL = {text: int(number) for number in signal_module.Signals if (text := signal_module.strsignal(number))}
MAX_TASKS_PER_LINE = 32768  # the job ledger's MAX_RANKS: ids past it in one srun line are not read
_MPI_SIGNAL = re.compile(
    r"^mpirun noticed that process rank (?P<rank>\d+) with PID \d+ on node \S+ exited on signal (?P<signum>\d+)"
)
_AGENT = re.compile(r"^[DIWEC](?P<md>\d{4}) (?P<hms>\d\d:\d\d:\d\d\.\d{6}) +\d+ +\S+:\d+\] (?P<msg>.*)$")
_FAILED = re.compile(r"^failed \(exitcode: (?P<exit>-?\d+)\) local_rank: (?P<rank>\d+) \(pid: (?P<pid>\d+)\)")
_CLOSING = re.compile(r"^Sending process (?P<pid>\d+) closing signal (?P<signal>SIG\w+)")
_DEATH = re.compile(r"^Received (?P<signum>\d+) death signal, shutting down workers")
_SIGNAL_EXCEPTION = re.compile(r"SignalException: Process \d+ got signal: (?P<signum>\d+)\s*$")
_SUMMARY = re.compile(r"ChildFailedError: *$")
_ROOT = re.compile(r"^Root Cause \(first observed failure\):$")
_RECORD = re.compile(r"^\[\d+\]:$")
_FIELD = re.compile(r"^  (?P<key>time|host|rank|exitcode|error_file|traceback) *: ?(?P<value>.*)$")
_RECORD_RANK = re.compile(r"^(?P<rank>\d+) \(local_rank: \d+\)")
_RECORD_EXIT = re.compile(r"^(?P<exit>-?\d+) \(pid: (?P<pid>\d+)\)")
_BORDER = re.compile(r"^=+$")
# The summary's traceback field when the worker wrote no error file (errors/__init__.py)
_BOILERPLATE = re.compile(r"^(?:To enable traceback see: |Signal \d+ \(SIG\w+\) received by PID \d+)")
_TRACEBACK = "Traceback (most recent call last):"
_SUMMARY_TIME = "%Y-%m-%d_%H:%M:%S"


@dataclass
class _Failure:
    rank: int
    pid: int | None
    exit_code: int | None
    ts: float
    root_cause: bool = False
    message: str | None = None  # the launcher's own text, when it is more than boilerplate
    failed_ts: float | None = None
    error_file: str | None = None  # the summary's `error_file:` (the worker's `@record` file)


@dataclass
class _Summary:
    records: list[_Failure] = field(default_factory=list)
    root_next: bool = False
    in_traceback: bool = False
    seen_record: bool = False


def split_prefix(segment: str) -> tuple[str | None, int | None, str]:
    """(launcher, rank, the line without the prefix) of a line a launcher prefixed with its
    worker's rank; (None, None, segment) for any other line."""
    for launcher, pattern in _PREFIXES:
        if prefix := pattern.match(segment):
            text = segment[prefix.end() :]
            if launcher == "mpi":
                text = _MPI_TAG.sub("", text)
            if inner := _INNER_RANK_PREFIX.match(text):
                text = text[inner.end() :]
            return launcher, int(prefix["rank"]), text
    return None, None, segment


def signal_name(number: int) -> str | None:
    try:
        return signal_module.Signals(number).name
    except ValueError:
        return None


class LauncherLog:
    """Reads the launchers' lines of one log (every line goes through `feed`) and returns the
    events they give; keeps the attempt count and each rank's latest exception between lines."""

    def __init__(self, run: str, per_rank_file: bool = False):
        self.run = run
        self.per_rank_file = per_rank_file  # one worker's own output (torchrun --log-dir): no summary in it
        self.attempt = 0
        self.exceptions: dict[int, str] = {}  # rank -> the last line of its latest traceback
        self._in_traceback: set[int] = set()
        self._held: _Failure | None = None  # this attempt's failure line, until what follows says more
        self._summary: _Summary | None = None
        self._stopped = False
        self._lowest_rank: int | None = None
        self._mpi: _Failure | None = None  # Open MPI's "first process to do so" block being read
        self._reported: set[int] = set()  # ranks whose traceback was reported (Open MPI, Slurm)
        # Under Open MPI or Slurm (no per-attempt account), the first failure the log tells, in its
        # own order: a traceback's end or srun's first task line. Marked as the first observed.
        self._told_first = False
        self.error_files: Counter[str] = Counter()  # `@record` error files: "read", or why not

    def feed(self, text: str, rank: int, launcher: str | None, received_s: float) -> list[JobEvent] | None:
        """Events of one line (`text` without its prefix); None when it is no launcher's line nor a
        worker's traceback. `launcher`: whose prefix the line carried (it is that worker's output)."""
        prefixed = launcher is not None
        if prefixed:
            self._lowest_rank = rank if self._lowest_rank is None else min(self._lowest_rank, rank)
        if self._summary is not None and not prefixed:
            return self._summary_line(text, received_s)
        agent = _AGENT.match(text)
        if agent is not None and not prefixed:
            return self._agent_line(agent["msg"], _agent_ts(agent["md"], agent["hms"], received_s))
        if not prefixed and _SUMMARY.search(text):
            self._in_traceback.discard(rank)  # the agent's own traceback, not a worker's
            self._summary = _Summary()
            return []
        if not prefixed and (death := _SIGNAL_EXCEPTION.search(text)):
            self._in_traceback.discard(rank)
            return self._stop(int(death["signum"]), received_s)
        if not prefixed and (mpi := self._mpi_line(text, received_s)) is not None:
            return mpi
        if not prefixed and (srun := _SRUN.match(text)):
            return self._srun_line(srun, received_s)
        return self._worker_line(text, rank, launcher, received_s)

    def _mpi_line(self, text: str, received_s: float) -> list[JobEvent] | None:
        """Open MPI's account of the first failed process (its rank and exit code, or signal)."""
        if _MPI_FIRST.match(text):
            self._mpi = _Failure(0, None, None, received_s, root_cause=True)
            return []
        if self._mpi is not None and (process := _MPI_PROCESS.match(text)):
            self._mpi.rank = int(process["rank"])
            return []
        if self._mpi is not None and (exit_code := _MPI_EXIT.match(text)):
            failure, self._mpi = self._mpi, None
            failure.exit_code = int(exit_code["exit"])
            return [] if failure.rank in self._reported else [self._error(failure)]
        if signalled := _MPI_SIGNAL.match(text):
            failure = _Failure(int(signalled["rank"]), None, -int(signalled["signum"]), received_s, root_cause=True)
            return [self._error(failure)]
        return None

    def _srun_line(self, found: re.Match, received_s: float) -> list[JobEvent]:
        """srun's account of tasks that ended badly: a failure per task (its rank) with the exit
        code or signal, the first such line's tasks marked as the first srun observed; a task whose
        own traceback was already read is not repeated."""
        what, exit_code, message = found["what"], None, None
        if exited := _SRUN_EXIT.match(what):
            exit_code = int(exited["exit"])
        elif what == "Out Of Memory":
            message = "Out Of Memory (srun: the task's memory limit)"
        elif (signum := _STRSIGNAL.get(what.removesuffix(" (core dumped)"))) is not None:
            exit_code = -signum
        else:
            message = f"srun: {what}"[:MAX_MESSAGE_CHARS]
        first, self._told_first = not self._told_first, True
        events: list[JobEvent] = []
        for rank in _task_ids(found["tasks"]):
            if rank not in self._reported:
                events.append(
                    self._error(_Failure(rank, None, exit_code, received_s, root_cause=first, message=message))
                )
        return events

    def _worker_line(self, text: str, rank: int, launcher: str | None, received_s: float) -> list[JobEvent] | None:
        events: list[JobEvent] | None = None
        if launcher == "torchrun" and self._held is not None:
            # A worker writes after an attempt's failure: the agent restarted the workers.
            events = self._release_restart(received_s)
        if text == _TRACEBACK:
            self._in_traceback.add(rank)
            return events or []
        if rank in self._in_traceback and text[:1] not in (" ", "\t", ""):
            self._in_traceback.discard(rank)
            self.exceptions[rank] = text.strip()[:MAX_MESSAGE_CHARS]
            if launcher in ("mpi", "slurm") or self.per_rank_file:  # no summary follows: this is the failure
                self._reported.add(rank)
                # One rank's own file (torchrun --log-dir) tells nothing of the order between ranks.
                first = not self._told_first and not self.per_rank_file
                self._told_first = True
                return (events or []) + [self._job_error(rank, self.exceptions[rank], received_s, first)]
            return events or []
        return events

    def _agent_line(self, message: str, ts: float) -> list[JobEvent]:
        if failed := _FAILED.match(message):
            events = self._release_restart(ts) if self._held is not None else []
            exit_code = int(failed["exit"])
            self._held = _Failure(int(failed["rank"]), int(failed["pid"]), exit_code, ts, root_cause=True)
            return events
        if _CLOSING.match(message):
            # Which workers the agent stopped: the summary's records say it per rank (exitcode -15).
            return []
        if death := _DEATH.match(message):
            return self._stop(int(death["signum"]), ts)
        return []

    def _release_restart(self, ts: float) -> list[JobEvent]:
        """The held failure, then the restart it was followed by."""
        assert self._held is not None
        events: list[JobEvent] = [self._error(self._held)]
        self._held = None
        self.attempt += 1
        self.exceptions.clear()
        self._in_traceback.clear()
        events.append(self._launcher("restart", ts, attempt=self.attempt))
        return events

    def _stop(self, signum: int, ts: float) -> list[JobEvent]:
        if self._stopped:
            return []
        self._stopped = True
        events: list[JobEvent] = [self._error(self._held)] if self._held is not None else []
        self._held = None
        name = signal_name(signum) or f"signal {signum}"
        message = f"torchrun's agent received {name} (signal {signum}) and shut its workers down"
        return events + [self._launcher("stopped", ts, signal=signal_name(signum), message=message)]

    def _summary_line(self, text: str, received_s: float) -> list[JobEvent]:
        summary = self._summary
        assert summary is not None
        if _BORDER.match(text):
            if not summary.seen_record:
                return []  # the opening border
            self._summary = None
            return self._summary_events(summary)
        if _ROOT.match(text):
            summary.root_next = True
            return []
        if _RECORD.match(text):
            summary.records.append(_Failure(0, None, None, received_s, root_cause=summary.root_next))
            summary.root_next = summary.in_traceback = False
            summary.seen_record = True
            return []
        if not summary.records:
            return []
        record = summary.records[-1]
        found = _FIELD.match(text)
        if found is None:
            if summary.in_traceback and text.startswith("  ") and text.strip():
                record.message = text.strip()[:MAX_MESSAGE_CHARS]  # the traceback's further lines: the last
            return []
        key, value = found["key"], found["value"].strip()
        summary.in_traceback = key == "traceback"
        if key == "time":
            try:
                record.failed_ts = datetime.strptime(value, _SUMMARY_TIME).timestamp()
            except ValueError:
                pass
        elif key == "rank" and (rank := _RECORD_RANK.match(value)):
            record.rank = int(rank["rank"])
        elif key == "exitcode" and (exit_code := _RECORD_EXIT.match(value)):
            record.exit_code, record.pid = int(exit_code["exit"]), int(exit_code["pid"])
        elif key == "traceback" and value and value != _TRACEBACK:
            record.message = value[:MAX_MESSAGE_CHARS]
        elif key == "error_file" and value and value != "<N/A>":
            record.error_file = value
        return []

    def _summary_events(self, summary: _Summary) -> list[JobEvent]:
        """The summary's records, root cause first; the one the held failure line already told is
        reported once, with that line's time."""
        held, self._held = self._held, None
        records = sorted(summary.records, key=lambda record: not record.root_cause)
        events: list[JobEvent] = []
        for record in records:
            if record.error_file is not None:
                record.message = self._error_file_message(record.error_file) or record.message
            if held is not None and record.pid == held.pid:
                held.message = held.message or record.message
                held.failed_ts = held.ts
                record, held = held, None
            else:
                record.ts = record.failed_ts if record.failed_ts is not None else record.ts
            events.append(self._error(record))
        if held is not None:
            events.insert(0, self._error(held))
        return events

    def _error_file_message(self, path: str) -> str | None:
        """The message of a worker's `@record` error file, or None (counted by why: missing,
        not a regular file, a symbolic link, larger than MAX_ERROR_FILE_BYTES, not the layout)."""
        outcome, message = read_error_file(path)
        self.error_files[outcome] += 1
        return message

    def _error(self, failure: _Failure) -> Error:
        """One failure as an error event; its message: the launcher's text unless that is only
        boilerplate, else the rank's exception, else the boilerplate or the exit code."""
        exit_code = failure.exit_code
        signal = signal_name(-exit_code) if exit_code is not None and exit_code < 0 else None
        message = failure.message
        if message is None or _BOILERPLATE.match(message):
            message = self.exceptions.get(failure.rank) or message
        if message is None or message.startswith("To enable traceback see: "):
            how = f"exited with code {exit_code}" if signal is None else f"ended by {signal}"
            message = f"worker {how} (it printed no traceback)"
        return Error(
            v=SCHEMA_VERSION,
            ts=failure.ts,
            run=self.run,
            rank=failure.rank,
            event="error",
            message=message,
            source="launcher",
            exit_code=exit_code,
            signal=signal,
            failed_ts=failure.failed_ts,
            root_cause=failure.root_cause or None,
        )

    def _job_error(self, rank: int, message: str, ts: float, first: bool = False) -> Error:
        return Error(
            v=SCHEMA_VERSION,
            ts=ts,
            run=self.run,
            rank=rank,
            event="error",
            message=message,
            source="job",
            root_cause=first or None,
        )

    def _launcher(self, action: str, ts: float, **fields) -> Launcher:
        return Launcher.model_validate(
            {
                "v": SCHEMA_VERSION,
                "ts": ts,
                "run": self.run,
                "rank": self._lowest_rank or 0,
                "event": "launcher",
                "action": action,
                **fields,
            }
        )


def _agent_ts(month_day: str, hms: str, received_s: float) -> float:
    """The time of an agent line (no year in it: the receive time's year; the year before when
    that puts the line more than a day after its receive time, a log read across New Year)."""
    year = datetime.fromtimestamp(received_s).year
    for candidate in (year, year - 1):
        try:
            ts = datetime.strptime(f"{candidate}{month_day} {hms}", "%Y%m%d %H:%M:%S.%f").timestamp()
        except ValueError:
            return received_s
        if ts <= received_s + 86400:
            return ts
    return ts


def read_error_file(path: str) -> tuple[str, str | None]:
    """(outcome, message) of a `@record` error file: ("read", its message's first line) or a
    refusal and None. Opened without following a symbolic link or blocking on a FIFO, checked to be
    a regular file of at most MAX_ERROR_FILE_BYTES, read no further than that."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return "missing", None
    except OSError as exc:
        return ("symlink" if os.path.islink(path) else f"unreadable: {exc.strerror or exc}"), None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return "not a regular file", None
        if info.st_size > MAX_ERROR_FILE_BYTES:
            return f"larger than {MAX_ERROR_FILE_BYTES} bytes", None
        data = handle.read(MAX_ERROR_FILE_BYTES + 1)
    if len(data) > MAX_ERROR_FILE_BYTES:
        return f"larger than {MAX_ERROR_FILE_BYTES} bytes", None
    try:
        message = json.loads(data)["message"]["message"]
    except (ValueError, KeyError, TypeError):
        return "not an error file", None
    if not isinstance(message, str) or not message.strip():
        return "not an error file", None
    return "read", message.strip().splitlines()[0][:MAX_MESSAGE_CHARS]


def _task_ids(text: str) -> list[int]:
    """`0-2,5` (bit_fmt's ranges) as task ids, at most MAX_TASKS_PER_LINE of them."""
    ids: list[int] = []
    for part in text.split(","):
        start, _, end = part.partition("-")
        first, last = int(start), int(end or start)
        ids += range(first, min(last, first + MAX_TASKS_PER_LINE - len(ids) - 1) + 1)
        if len(ids) >= MAX_TASKS_PER_LINE:
            break
    return ids
