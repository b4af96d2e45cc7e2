"""Follow job telemetry files: a run directory of per-rank JSONL files, or one log file.

Files are read from their start and then followed, so a monitor opened late still sees the run's
history. Only complete lines are yielded: a partial last line waits for its newline (the emitter
writes whole lines; a crash can leave a fragment, which stays unread until a resumed run ends it).

Reads are plain blocking reads on the event loop, bounded per poll (`chunk_bytes` per file), which
is fine for local disks and shared file systems that answer promptly.
"""

import asyncio
import fnmatch
import os
import re
import time
from collections.abc import AsyncIterator

from trnwatch.collectors.lines import Line

POLL_S = 0.25
CHUNK_BYTES = 4 << 20
MAX_LINE_BYTES = 1 << 20
RANK_FILE_PATTERN = "rank-*.jsonl"


class FileTail:
    """Complete lines appended to one file since the last read; survives truncation and rotation."""

    def __init__(self, path: str, chunk_bytes: int = CHUNK_BYTES, max_line_bytes: int = MAX_LINE_BYTES,
                 split_cr: bool = False):
        self.path = path
        # Logs: a carriage return ends a line too (progress bars redraw with \r and no newline).
        self._split = re.compile(rb"\r\n|\r|\n").split if split_cr else lambda data: data.split(b"\n")
        self.chunk_bytes = chunk_bytes
        self.max_line_bytes = max_line_bytes
        self._file = None
        self._partial = b""

    def read_lines(self) -> tuple[list[str], bool]:
        """Return (complete lines read now, whether more bytes are already waiting)."""
        if self._file is None and not self._open():
            return [], False
        if os.fstat(self._file.fileno()).st_size < self._file.tell():
            self._file.seek(0)  # truncated in place (copytruncate rotation): start over
            self._partial = b""
        data = self._file.read(self.chunk_bytes)
        more_waiting = len(data) == self.chunk_bytes
        if not data and self._replaced():
            self._file.close()
            self._file = None
            self._partial = b""
            return self.read_lines()
        pieces = self._split(self._partial + data)
        self._partial = pieces.pop()
        if len(self._partial) > self.max_line_bytes:
            # A "line" this long is garbage; hand it on (it will be rejected and counted) rather
            # than hold unbounded memory waiting for a newline.
            pieces.append(self._partial)
            self._partial = b""
        return [piece.decode("utf-8", errors="replace").rstrip("\r") for piece in pieces], more_waiting

    def close(self) -> None:
        """Release the file handle."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def _open(self) -> bool:
        try:
            self._file = open(self.path, "rb")
        except FileNotFoundError:
            return False
        return True

    def _replaced(self) -> bool:
        try:
            return os.stat(self.path).st_ino != os.fstat(self._file.fileno()).st_ino
        except FileNotFoundError:
            return False


async def follow_run_dir(run_dir: str, poll_s: float = POLL_S) -> AsyncIterator[Line]:
    """Yield every complete line of every `rank-*.jsonl` in `run_dir`, history first, then live.

    New rank files are picked up as they appear; the directory itself may appear later too.
    """
    tails: dict[str, FileTail] = {}
    try:
        while True:
            try:
                names = sorted(os.listdir(run_dir))
            except FileNotFoundError:
                names = []
            for name in names:
                if name not in tails and fnmatch.fnmatch(name, RANK_FILE_PATTERN):
                    tails[name] = FileTail(os.path.join(run_dir, name))
            backlog = False
            for name, tail in tails.items():
                lines, more_waiting = tail.read_lines()
                backlog = backlog or more_waiting
                received_s = time.time()
                for text in lines:
                    yield Line(source_id=f"job:{name}", kind="job", received_s=received_s, text=text)
            await asyncio.sleep(0 if backlog else poll_s)
    finally:
        for tail in tails.values():
            tail.close()


async def follow_file(path: str, poll_s: float = POLL_S) -> AsyncIterator[tuple[float, str]]:
    """Yield (received_s, line) for every complete line of one file, history first, then live."""
    tail = FileTail(path)
    try:
        while True:
            lines, more_waiting = tail.read_lines()
            received_s = time.time()
            for text in lines:
                yield received_s, text
            await asyncio.sleep(0 if more_waiting else poll_s)
    finally:
        tail.close()
