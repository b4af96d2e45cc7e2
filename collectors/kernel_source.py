"""The kernel log as a source of `kernel-log` lines (parsed by collectors/kernel_log.py).

Live, on this host: `journalctl -k -b -f -o short-iso --no-pager` where journald runs (this boot's
kernel messages, then new ones as they come), else `dmesg -w` (the ring buffer, then new ones).
Both need the right to read the kernel log: root, or the `systemd-journal` / `adm` group for
journalctl, or `kernel.dmesg_restrict=0` for dmesg; without it the child exits with its error
and the source is lost with that error (the receipt says so). For tests and replay, `--kmsg FILE`
reads a file or a named pipe of such lines to its end.
"""

import asyncio
import os
import shutil
import threading
from collections.abc import AsyncIterator
from pathlib import Path

from trnwatch.collectors.lines import Line
from trnwatch.collectors.streams import SourceLost, child_lines, daemon_reader, split_lines

KIND = "kernel-log"
JOURNALD_RUNTIME = Path("/run/systemd/journal")  # present while journald runs (its sockets)


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
