"""The kernel log as a source of `kernel-log` lines (parsed by collectors/kernel_log.py).

Live, on this host: `journalctl -k -b -f -o short-iso --no-pager` where journald runs (this boot's
kernel messages, then new ones as they come), else `dmesg -w` (the ring buffer, then new ones).
Both need the right to read the kernel log: root, or the `systemd-journal` / `adm` group for
journalctl, or `kernel.dmesg_restrict=0` for dmesg; without it the child exits with its error
and the source is lost with that error (the receipt says so). For tests and replay, `--kmsg FILE`
reads a file or a named pipe of such lines to its end.

Over the SSH fan-out (`--hosts`/`--hosts-file` with `--kernel-log`), one more ssh per host, with
the fan-out's options (collectors/ssh.py), runs `REMOTE_COMMAND` there: `journalctl -k -f -q -o
short-iso --since @T` where journald runs and the user can read the system journal, else `dmesg
-w` where the kernel lets it, else it exits saying what was denied (the host's source is lost with
those words, retried with the fan-out's backoff; the other hosts go on). Each host is its own
source `kernel-log:<label>`, so its lines are placed on that host (ledger/hardware.py).

Which lines, and none twice (`Resume`): the first connection asks journald for the lines since
LOOKBACK_S before the session started (the error that stopped the job is usually minutes old when
someone opens trnwatch; not the whole boot: an error handled days ago would be a critical finding
on a healthy chip for the whole session), then follows. A reconnection asks for the lines since
the second of the last line received and drops those already received (journalctl's `--since` is
inclusive, at one-second resolution): a lost connection loses no line and repeats none. dmesg has
no portable time filter (util-linux before 2.37): it prints the kernel's ring buffer (bounded by
the kernel, typically 128 KiB to 1 MiB) at each connection, and the lines up to the last one
received are dropped by their seconds-since-boot stamp.
"""

import asyncio
import os
import random
import re
import shutil
import threading
from collections import Counter
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path

from trnwatch.collectors.backoff import Backoff
from trnwatch.collectors.lines import Line, SourceEvent
from trnwatch.collectors.ssh import SshOptions, ssh_stream
from trnwatch.collectors.streams import SourceLost, child_lines, daemon_reader, split_lines

KIND = "kernel-log"
JOURNALD_RUNTIME = Path("/run/systemd/journal")  # present while journald runs (its sockets)
LOOKBACK_S = 3600.0
# The follow command of a remote host with journald; `$since` is the first line of its stdin.
JOURNAL_FOLLOW = 'journalctl -k -f -q -o short-iso --no-pager --since "@$since"'
# Run on each host (POSIX sh, under collectors/ssh.py REMOTE_WRAPPER, its stdin's first line the
# UNIX second to follow from). A line starting `-- ` (journalctl's own notes) says which tool it
# follows, so a quiet kernel log still shows the host as connected. The journal is readable when
# one of its system files is (root, systemd-journal, or adm/wheel through journald's ACLs:
# `test -r` asks access(2), which reads ACLs); dmesg is tried once before `-w`, which would print
# a line and then fail where kernel.dmesg_restrict=1 keeps it from non-root users.
REMOTE_COMMAND = (
    'read -r since; PATH="$PATH:/usr/bin:/bin:/usr/sbin:/sbin"; user=$(id -un 2>/dev/null || id -u); '
    "if [ -d /run/systemd/journal ] && command -v journalctl >/dev/null 2>&1; then "
    "for f in /var/log/journal/*/system.journal /run/log/journal/*/system.journal; do "
    'if [ -r "$f" ]; then echo "-- trnwatch: following journalctl -k as $user"; '
    f"exec {JOURNAL_FOLLOW}; fi; done; "
    'why="the system journal is not readable by $user (needs root, or the systemd-journal or adm group)"; '
    'else why="no journald"; fi; '
    'if ! command -v dmesg >/dev/null 2>&1; then echo "kernel log unavailable: $why; no dmesg" >&2; exit 1; fi; '
    "if ! dmesg >/dev/null 2>&1; then "
    'echo "kernel log unavailable: $why; dmesg denied to $user '
    '(kernel.dmesg_restrict=$(cat /proc/sys/kernel/dmesg_restrict 2>/dev/null || echo ?): needs root)" >&2; exit 1; fi; '
    'echo "-- trnwatch: following dmesg -w as $user ($why)"; exec dmesg -w'
)
_JOURNAL_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)([+-]\d\d:?\d\d|Z) ")
_DMESG_STAMP = re.compile(r"^\[\s*(\d+\.\d+)\] ")


def kernel_log_command(journald_runtime: Path = JOURNALD_RUNTIME) -> list[str]:
    """The command that follows this host's kernel log: journalctl where journald runs, else dmesg."""
    if journald_runtime.is_dir() and shutil.which("journalctl"):
        return ["journalctl", "-k", "-b", "-f", "-o", "short-iso", "--no-pager"]
    return ["dmesg", "-w"]


async def kernel_log_lines(source_id: str, argv: list[str] | None = None) -> AsyncIterator[Line]:
    """This host's kernel log, followed until the session ends (`kernel_log_command`)."""
    async for line in child_lines(argv or kernel_log_command(), source_id, KIND):
        yield line


async def kmsg_file_lines(path: str, source_id: str) -> AsyncIterator[Line]:
    """The kernel-log lines of a file or a named pipe, to its end. The open and the reads run in
    a daemon thread: opening a pipe waits for its writer, and neither may hold the exit."""
    loop = asyncio.get_running_loop()
    opened: asyncio.Future[int] = loop.create_future()

    def deliver(fd: int | OSError) -> None:
        if opened.done():  # the session ended while the open waited
            if isinstance(fd, int):
                os.close(fd)
        elif isinstance(fd, OSError):
            opened.set_exception(fd)
        else:
            opened.set_result(fd)

    def open_file() -> None:
        try:
            fd: int | OSError = os.open(path, os.O_RDONLY)
        except OSError as exc:
            fd = exc
        try:
            loop.call_soon_threadsafe(deliver, fd)
        except RuntimeError:  # the loop is closed: the process is ending
            pass

    threading.Thread(target=open_file, daemon=True, name="trnwatch-open-kmsg").start()
    try:
        fd = await opened
    except OSError as exc:
        raise SourceLost(f"cannot read {path}: {exc.strerror or exc}") from None
    async for line in split_lines(daemon_reader(fd), source_id, KIND):
        yield line
    os.close(fd)  # at its end only: a read still blocked in the thread keeps the fd until exit


def _stamp(text: str) -> tuple[str, float] | None:
    """The time a line was logged, comparable within one layout: ("journal", UNIX second) for
    journalctl's short-iso, ("dmesg", seconds since boot) for dmesg's; None for a line without
    (journalctl's notes, a record's continuation line)."""
    if m := _JOURNAL_STAMP.match(text):
        zone = "+0000" if m.group(2) == "Z" else m.group(2).replace(":", "")
        try:
            return "journal", datetime.strptime(m.group(1) + zone, "%Y-%m-%dT%H:%M:%S%z").timestamp()
        except ValueError:
            return None
    if m := _DMESG_STAMP.match(text):
        return "dmesg", float(m.group(1))
    return None


class Resume:
    """Where a host's kernel log resumes after a reconnection, and which lines it repeats.

    `stdin_line` is what the remote command gets on each connection: the UNIX second to follow
    from. `fresh` says whether a line is new: after a reconnection, a stamped line older than the
    last one received, or one received already in that same second, is a repeat; a continuation
    line goes with the record it continues."""

    def __init__(self, since_s: float) -> None:
        self.since_s = int(since_s)
        self.last: tuple[str, float] | None = None
        self.at_last: Counter[str] = Counter()  # lines received with stamp `last`
        self.repeats: Counter[str] | None = None  # while replaying after a reconnection
        self.dropping = False  # the record being continued was a repeat

    def stdin_line(self) -> bytes:
        return f"{self.since_s}\n".encode()

    def reconnecting(self) -> None:
        self.repeats = Counter(self.at_last) if self.last is not None else None
        self.dropping = False

    def fresh(self, text: str) -> bool:
        stamp = _stamp(text)
        if stamp is None:
            return text.startswith("-- ") or not (text[:1].isspace() and self.dropping)
        replaying = self.repeats is not None and self.last is not None and stamp[0] == self.last[0]
        if replaying and stamp[1] <= self.last[1]:  # type: ignore[index]  # last is set while replaying
            repeat = stamp[1] < self.last[1] or self.repeats[text] > 0  # type: ignore[index]
            self.dropping = repeat
            if repeat:
                self.repeats[text] -= 1  # type: ignore[index]
                return False
        else:  # a later line (or another layout): the replay is over
            self.repeats, self.dropping = None, False
        if stamp != self.last:
            self.last, self.at_last = stamp, Counter()
            if stamp[0] == "journal":
                self.since_s = int(stamp[1])
        self.at_last[text] += 1
        return True


async def ssh_kernel_log_lines(
    host: str,
    source_id: str,
    options: SshOptions,
    started_s: float,
    backoff: Backoff = Backoff(),
    rng: random.Random | None = None,
) -> AsyncIterator[Line | SourceEvent]:
    """One host's kernel log over SSH for the whole session (`REMOTE_COMMAND`, or the user's),
    from LOOKBACK_S before `started_s`, reconnected with the fan-out's backoff, no line twice."""
    resume = Resume(started_s - LOOKBACK_S)
    async for item in ssh_stream(host, source_id, KIND, options, resume.stdin_line, backoff, rng):
        if isinstance(item, SourceEvent):
            if item.event == "connecting":
                resume.reconnecting()
            yield item
        elif item.oversize_bytes or resume.fresh(item.text):
            yield item
