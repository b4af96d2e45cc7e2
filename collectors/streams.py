"""Byte streams that carry neuron-monitor reports: stdin, a local neuron-monitor child process.

Each source is an async generator of `Line`s. They differ only in where the bytes come from;
`split_lines` turns chunks into lines the same way for all of them, bounding a line's length
(a longer line is counted as an `oversize` marker as it passes the bound and discarded up to its
newline; no newline at all ends the source) and decoding UTF-8 with replacement so a stray byte cannot stop the stream.
"""

import asyncio
import concurrent.futures
import fcntl
import json
import os
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from trnwatch.collectors.lines import Line, LineKind
from trnwatch.collectors.neuron_monitor import MAX_LINE_BYTES

CHUNK_BYTES = 64 * 1024
# Read size from stdin: a thread hands each read over to the loop, which costs more than the read,
# so a file (which has everything at once) is read in big pieces; a pipe is widened to this.
STDIN_READ_BYTES = 1024 * 1024
# An overlong line is discarded up to its newline; past this many times the line bound without
# one, the stream is refused (split_lines).
RESYNC_LINES = 16

# Where the Neuron tools install when they are not on PATH.
NEURON_BIN = Path("/opt/aws/neuron/bin")

RUNTIME_GROUPS = ("neuroncore_counters", "memory_used", "neuron_runtime_vcpu_usage", "execution_stats")
SYSTEM_GROUPS = ("vcpu_usage", "memory_info", "neuron_hw_counters")


class SourceLost(Exception):
    """A source ended abnormally; the message says why, in the source's own words."""


async def split_lines(
    read: Callable[[int], Awaitable[bytes]], source_id: str, kind: LineKind, max_line_bytes: int = MAX_LINE_BYTES
) -> AsyncIterator[Line]:
    """Yield complete lines from a chunk reader until it returns b"" (EOF).

    A line past `max_line_bytes` is counted the moment it passes the bound (an `oversize` marker
    with the bytes read by then), and the rest of it discarded up to its newline. A stream with no
    newline in RESYNC_LINES x the bound (/dev/zero, a binary file) is no stream of lines: refused,
    `SourceLost`. A final line without a newline is delivered too (a pipe closed after the last
    report); recordings, which can be cut mid-line by a crash, use their own reader.
    """
    pending = bytearray()
    discarding = 0  # bytes of an oversize line dropped so far (it was counted when it passed the bound)
    refuse_after = RESYNC_LINES * max_line_bytes
    while True:
        chunk = await read(CHUNK_BYTES)
        if not chunk:
            break
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            if nl < 0:
                rest = chunk[start:]
                if discarding:
                    discarding += len(rest)
                    if discarding > refuse_after:
                        size = f"{refuse_after >> 20} MiB" if refuse_after >= 1 << 20 else f"{refuse_after} bytes"
                        raise SourceLost(f"no newline in {size}: not a stream of lines")
                else:
                    pending += rest
                    if len(pending) > max_line_bytes:
                        yield Line(source_id, kind, time.time(), "", oversize_bytes=len(pending))
                        discarding, pending = len(pending), bytearray()
                break
            piece = chunk[start:nl]
            start = nl + 1
            if discarding:
                discarding = 0
                continue
            pending += piece
            if len(pending) > max_line_bytes:
                yield Line(source_id, kind, time.time(), "", oversize_bytes=len(pending))
            else:
                yield Line(source_id, kind, time.time(), pending.decode("utf-8", "replace"))
            pending = bytearray()
    if not discarding and pending.strip():
        yield Line(source_id, kind, time.time(), pending.decode("utf-8", "replace"))


async def stdin_lines(source_id: str = "stdin", fd: int = 0) -> AsyncIterator[Line]:
    """Reports piped in on stdin (a pipe, a file or a terminal), until EOF.

    A pipe or socket is read by the event loop itself (no thread, no hand-over per chunk: the
    cheapest way in, measured in tests/benchmarks/bench_ingest.py); a file or a terminal, which
    the loop's pipe reader refuses, by a daemon thread."""
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        async for line in split_lines(daemon_reader(fd), source_id, "neuron-monitor"):
            yield line
        return
    if stat.S_ISFIFO(mode) and hasattr(fcntl, "F_SETPIPE_SZ"):
        try:  # a bigger pipe: the writer blocks less often and each wake-up reads more
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, STDIN_READ_BYTES)
        except OSError:
            pass  # over /proc/sys/fs/pipe-max-size: the default 64 KiB does
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=STDIN_READ_BYTES)
    pipe = os.fdopen(fd, "rb", buffering=0, closefd=False)
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    try:
        async for line in split_lines(lambda _n: reader.read(STDIN_READ_BYTES), source_id, "neuron-monitor"):
            yield line
    finally:
        transport.close()  # closes `pipe`, which leaves the fd itself open


def daemon_reader(fd: int) -> Callable[[int], Awaitable[bytes]]:
    """A chunk reader for any fd, fed by a daemon thread.

    A thread works for every kind of stdin (the event loop's pipe reader refuses files). It is a
    daemon of its own, not an executor thread: a read blocked on a silent pipe writer must not
    hold the exit after the receipt is written (asyncio.run and the interpreter join executor
    threads)."""
    loop = asyncio.get_running_loop()
    chunks: asyncio.Queue[bytes] = asyncio.Queue(maxsize=4)

    def pump() -> None:
        while True:
            try:
                chunk = os.read(fd, STDIN_READ_BYTES)
            except OSError:
                chunk = b""
            put = chunks.put(chunk)
            try:
                asyncio.run_coroutine_threadsafe(put, loop).result()
            except RuntimeError:  # the session is over: the loop closed, `put` never ran
                put.close()
                return
            except concurrent.futures.CancelledError:
                return  # the session is over
            if not chunk:
                return

    threading.Thread(target=pump, daemon=True, name=f"trnwatch-read-fd{fd}").start()

    async def read(_n: int) -> bytes:
        return await chunks.get()

    return read


def find_neuron_monitor() -> str | None:
    """The local neuron-monitor executable: PATH first, then the Neuron tools' install folder."""
    found = shutil.which("neuron-monitor")
    if found:
        return found
    candidate = NEURON_BIN / "neuron-monitor"
    return str(candidate) if os.access(candidate, os.X_OK) else None


def neuron_monitor_config(period_s: float) -> dict:
    """A neuron-monitor config that collects every documented group at `period_s`."""
    period = f"{int(period_s * 1000)}ms" if period_s < 1 else f"{period_s:g}s"
    return {
        "period": period,
        "neuron_runtimes": [{"tag_filter": ".*", "metrics": [{"type": g} for g in RUNTIME_GROUPS]}],
        "system_metrics": [{"type": g} for g in SYSTEM_GROUPS],
    }


async def neuron_monitor_lines(executable: str, period_s: float, source_id: str = "local") -> AsyncIterator[Line]:
    """Run neuron-monitor (or a drop-in such as `trnwatch sim`) with a generated config and
    yield its report lines. Raises `SourceLost` if it cannot start or exits with an error."""
    with tempfile.TemporaryDirectory(prefix="trnwatch-") as tmp:
        config = Path(tmp) / "neuron-monitor.json"
        config.write_text(json.dumps(neuron_monitor_config(period_s)))
        async for line in child_lines([executable, "-c", str(config)], source_id, "neuron-monitor"):
            yield line


async def child_lines(argv: list[str], source_id: str, kind: LineKind) -> AsyncIterator[Line]:
    """Run `argv` and yield its stdout lines as `kind`; the child is stopped when the reader
    stops. Raises `SourceLost` if it cannot start or exits with an error (its last stderr line)."""
    executable = argv[0]
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except OSError as exc:
        raise SourceLost(f"cannot start {executable}: {exc.strerror or exc}") from None
    assert proc.stdout is not None and proc.stderr is not None  # PIPE, above
    stderr_tail = asyncio.ensure_future(_tail(proc.stderr))
    try:
        async for line in split_lines(proc.stdout.read, source_id, kind):
            yield line
        status = await proc.wait()
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 5)
            except TimeoutError:
                proc.kill()
                await proc.wait()
    err = (await stderr_tail).strip()
    if status != 0:
        detail = err.splitlines()[-1] if err else "no message on stderr"
        raise SourceLost(f"{Path(executable).name} exited with status {status}: {detail}")


async def _tail(stream: asyncio.StreamReader, keep_bytes: int = 4096) -> str:
    """Keep the last few KiB a child wrote to stderr, for the error message if it dies."""
    tail = b""
    while chunk := await stream.read(CHUNK_BYTES):
        tail = (tail + chunk)[-keep_bytes:]
    return tail.decode("utf-8", "replace")
