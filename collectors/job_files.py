"""Follow job telemetry files: a run directory of per-rank JSONL files, or one log file.

Files are read from their start and then followed, so a monitor opened late still sees the run's
history. Only complete lines are yielded: a partial last line waits for its newline (the emitter
writes whole lines; a crash can leave a fragment, which stays unread until a resumed run ends it).

What is followed, and what is not:

- Only regular files. A FIFO, a folder, a device (`/dev/zero`), a socket named like a rank file
  is never opened (opening a FIFO would block the whole monitor): it is reported once, as that
  rank's source ending with the reason, and skipped.
- A line longer than `MAX_LINE_BYTES` is delivered once as an oversize marker as soon as it
  passes the bound (the ledger counts it rejected), then discarded up to its newline; its bytes
  are never held.
- A file truncated in place is read again from its start, also when it was rewritten past its old
  size between two polls (the first bytes of the file, or the bytes just before the read
  position, no longer match what was read there). A file replaced by rename is drained, then the
  new one is read from its start.
- logrotate's `copytruncate` truncates the file under a writer that keeps it open: a writer with
  O_APPEND goes on at offset 0 (the truncation above); one without it (a shell's `>`) goes on at
  its old offset, so the file starts with a hole read as NUL bytes. NUL bytes where a line starts
  are skipped, so the writer's next line is read whole. (What was written between logrotate's
  copy and its truncation is in neither file: logrotate's own caveat.)
- Any other error on a file (permission, I/O) is reported once per distinct error, as a "down"
  link event of that rank's source, and the file is tried again every poll; the follower never
  ends because of one file. Errors on the run directory itself are reported the same way.
- Running out of file descriptors (EMFILE, ENFILE) is trnwatch's own trouble, never a rank's: the
  poll stops where it met it, and the follower reads again after a backoff (0.5 s, doubling to
  8 s, jittered), said each time as the folder's source "connecting" with the reason; the next
  whole poll's `ReadMark` puts that source back up. No rank is reported down or lost for it.
- Open files are bounded: the first `held_open_bound()` rank files stay open between polls; the
  others are opened, read and closed on every poll (the read position is kept), so 10,000 rank
  files work under a 1,024-descriptor limit. A file rotated by rename while closed between polls
  is read from the new file's start (the old file's unread rest is not seen).

- Nothing is lost on exit: when the session ends (SIGTERM, Ctrl-C, `--duration`, the screen
  quitting) the follower reads what the files hold by then, to their end, before the receipt is
  written (`final_reads`), for at most `EXIT_READ_LIMIT_S`; a file with bytes still unread then
  ends its source with "N bytes on disk left unread at exit", which the receipt keeps as that
  source's `end_error`.

Reads are plain blocking reads on the event loop (regular files only), bounded per poll
(`chunk_bytes` per file), which is fine for local disks and shared file systems that answer
promptly.
"""

import asyncio
import fnmatch
import os
import random
import re
import resource
import stat
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from trnwatch.collectors.backoff import Backoff
from trnwatch.collectors.descriptors import out_of_descriptors, shortage_words
from trnwatch.collectors.lines import Line, ReadMark, SourceEvent
from trnwatch.collectors.streams import SourceLost

POLL_S = 0.25
CHUNK_BYTES = 4 << 20
MAX_LINE_BYTES = 1 << 20
RANK_FILE_PATTERN = "rank-*.jsonl"
MAX_HELD_OPEN = 256  # rank files kept open between polls, at most (see held_open_bound)
FINGERPRINT_BYTES = 64  # bytes compared to notice a file rewritten in place
# At the session's end, what the files hold is read for at most this long (a file still growing
# fast, or a backlog of gigabytes, ends there); what was left is said in the receipt.
EXIT_READ_LIMIT_S = 10.0
# A folder whose mtime is this recent is listed again at every poll (a name created within one
# tick of a coarse file-system clock leaves the mtime as it was).
DIR_MTIME_SLACK_S = 2.0
# Rank files looked at per second, at most, when none has a backlog: a poll of 18,432 files
# (a `stat` each) then comes about once a second, not four times (POLL_S).
FILES_PER_S = 20_000
# A poll stopped by a descriptor shortage is tried again after 0.5 s, then longer, up to 8 s.
SHORTAGE_BACKOFF = Backoff(first_s=0.5, max_s=8.0)
# What is left unread at exit is counted in lines over at most this many bytes per file.
UNREAD_COUNT_BYTES = 1 << 30

_FILE_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


_Item = TypeVar("_Item", Line, Line | SourceEvent, Line | SourceEvent | ReadMark)  # what a follower yields


class NotRegularFile(Exception):
    """The path is not a regular file (a FIFO, a folder, a device): never opened, never followed."""


def _not_regular(path: str, mode: int) -> NotRegularFile:
    kind = next((name for test, name in _FILE_KINDS if test(mode)), "not a regular file")
    return NotRegularFile(f"{os.path.basename(path)} is {kind}, not a regular file: skipped")


@dataclass(frozen=True, slots=True)
class TailLine:
    """One complete line of a followed file, or (oversize_bytes > 0) a discarded overlong one."""

    text: str
    oversize_bytes: int = 0


def held_open_bound() -> int:
    """How many files a follower keeps open: MAX_HELD_OPEN, or a quarter of the soft descriptor
    limit when that is lower (the rest stays for sockets, pipes and the other sources)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return MAX_HELD_OPEN if soft == resource.RLIM_INFINITY else min(MAX_HELD_OPEN, soft // 4)


class FileTail:
    """Complete lines appended to one regular file since the last read; survives truncation,
    rewriting in place and rotation. With `hold_open=False` the file is closed after each read."""

    def __init__(
        self,
        path: str,
        chunk_bytes: int | None = None,
        max_line_bytes: int = MAX_LINE_BYTES,
        hold_open: bool = True,
        split_cr: bool = False,
    ):
        self.path = path
        # Logs: a carriage return ends a line too (progress bars redraw with \r and no newline).
        self._split_lines = re.compile(rb"\r\n|\r|\n").split if split_cr else lambda data: data.split(b"\n")
        self.chunk_bytes = chunk_bytes or CHUNK_BYTES
        self.max_line_bytes = max_line_bytes
        self.hold_open = hold_open
        self._fd: int | None = None
        self._ino: int | None = None
        self._seen: tuple[int, int] | None = None  # (size, mtime_ns) at the last read
        self.waiting_bytes = 0  # after a read: bytes the file held past it (as its size was then)
        self._start_over()

    def _start_over(self) -> None:
        self._offset = 0
        self._head = b""  # the file's first bytes, as read
        self._before = b""  # the bytes just before _offset, as read
        self._partial = b""
        self._discarding = 0  # bytes of an overlong line dropped so far

    def read_lines(self) -> tuple[list[TailLine], bool]:
        """Return (complete lines read now, whether more bytes are already waiting).

        Raises `NotRegularFile` (skip the path for good) or `OSError` (try again later). A file
        closed between polls that is the same file, with the size and mtime of the last read,
        costs one `stat` (at 18,432 rank files, most of them at most polls)."""
        if self._fd is None and not self._open():
            return [], False
        if self._fd is None:
            return [], False  # unchanged since the last read (`_open`)
        try:
            return self._read()
        finally:
            if not self.hold_open:
                self._close_fd()

    def close(self) -> None:
        """Release the file descriptor."""
        self._close_fd()

    def unread_bytes(self) -> int:
        """Bytes the file holds past what was read (0 if it cannot be asked)."""
        try:
            return max(0, os.stat(self.path).st_size - self._offset)
        except OSError:
            return 0

    def unread_lines(self, limit_bytes: int = UNREAD_COUNT_BYTES) -> int:
        """Complete lines the file holds past what was read, counted in its first `limit_bytes`
        past the read position (0 if it cannot be read)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return 0
        try:
            lines, at, end = 0, self._offset, self._offset + limit_bytes
            while at < end and (data := os.pread(fd, min(self.chunk_bytes, end - at), at)):
                lines += data.count(b"\n")
                at += len(data)
            return lines
        except OSError:
            return lines
        finally:
            os.close(fd)

    def _close_fd(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _open(self) -> bool:
        """Open the file (True), or say there is nothing to read (False: no such file yet). A file
        closed between polls that is unchanged since its last read is left closed (True, no fd)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return False
        if not stat.S_ISREG(st.st_mode):
            raise _not_regular(self.path, st.st_mode)
        if (
            not self.hold_open
            and st.st_ino == self._ino
            and (st.st_size, st.st_mtime_ns) == self._seen
            and st.st_size == self._offset
        ):
            return True
        # O_NONBLOCK: should a FIFO take the file's place between stat and open, open returns
        # at once instead of waiting for a writer; the fstat below then refuses it.
        fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise _not_regular(self.path, st.st_mode)
        if self._ino is not None and st.st_ino != self._ino:
            self._start_over()  # reopened (closed between polls) and found another file
        self._fd, self._ino = fd, st.st_ino
        return True

    def _rewritten(self, fd: int, st: os.stat_result) -> bool:
        """Truncated in place, or truncated and rewritten (maybe past the old size) since the last read."""
        if st.st_size < self._offset:
            return True
        seen = (st.st_size, st.st_mtime_ns)
        changed, self._seen = seen != self._seen, seen
        if not changed or self._offset == 0:
            return False
        before_at = self._offset - len(self._before)
        return (
            os.pread(fd, len(self._head), 0) != self._head or os.pread(fd, len(self._before), before_at) != self._before
        )

    def _read(self) -> tuple[list[TailLine], bool]:
        fd = self._fd
        assert fd is not None  # read_lines opened it
        st = os.fstat(fd)
        if self._rewritten(fd, st):
            self._start_over()
        data = os.pread(fd, self.chunk_bytes, self._offset)
        if not data and self.hold_open and self._replaced():
            self._close_fd()
            self._ino = None
            self._start_over()
            return self.read_lines()
        if len(self._head) < FINGERPRINT_BYTES:
            self._head += data[: FINGERPRINT_BYTES - len(self._head)]
        self._offset += len(data)
        self._before = (self._before + data)[-FINGERPRINT_BYTES:]
        more_waiting = len(data) == self.chunk_bytes
        self.waiting_bytes = max(0, st.st_size - self._offset) if more_waiting else 0
        if not self._partial and not self._discarding:
            data = data.lstrip(b"\0")  # a hole where a line starts: copytruncate under a writer without O_APPEND
        return self._split(data), more_waiting

    def _split(self, data: bytes) -> list[TailLine]:
        pieces = self._split_lines(self._partial + data)
        rest = pieces.pop()
        out = []
        for piece in pieces:
            if self._discarding:
                self._discarding = 0  # the overlong line's end: it was counted when it passed the bound
            elif len(piece) > self.max_line_bytes:
                out.append(TailLine("", len(piece)))
            else:
                out.append(TailLine(piece.decode("utf-8", errors="replace").rstrip("\r")))
        if self._discarding:
            self._discarding += len(rest)
            rest = b""
        elif len(rest) > self.max_line_bytes:
            # A "line" this long is garbage: counted now (its newline may never come), then dropped up to it.
            out.append(TailLine("", len(rest)))
            self._discarding, rest = len(rest), b""
        self._partial = rest
        return out

    def _replaced(self) -> bool:
        try:
            return os.stat(self.path).st_ino != self._ino
        except FileNotFoundError:
            return False


def _error_text(exc: OSError) -> str:
    return f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else "")


class _RunDir:
    """The rank files of one run directory and what was reported about them; one `poll` reads
    each once (see the module docstring)."""

    def __init__(self, run_dir: str, hold_bound: int):
        self.run_dir = run_dir
        self.hold_bound = hold_bound
        self.dir_source = f"job-dir:{run_dir}"
        self.tails: dict[str, FileTail] = {}
        self.skipped: set[str] = set()
        self.reported: dict[str, str] = {}  # source id -> the error last reported for it
        self.backlog = False  # after a poll: some file had more bytes waiting than one read takes
        self.mark = ReadMark(self.dir_source, 0.0)  # after a poll: how far it read (ledger/lag.py)
        self._listed: tuple[int, int] | None = None  # the folder's (inode, mtime_ns) when last listed
        # At the session's end: the moment (time.monotonic) a poll stops reading its files, so the
        # exit read keeps its bound in a poll of thousands of files too (`RunDirFollower.drain`).
        self.stop_at: float | None = None
        # After a poll: the EMFILE / ENFILE that stopped it (the rest is read at the next one), else None.
        self.short: OSError | None = None

    def start_mark(self) -> ReadMark:
        """Before the first poll: every rank file's bytes are waiting, none read. Until a poll
        has caught up, the job is judged as of this moment (ledger/lag.py), so a first read of
        thousands of files' history never makes the ranks it has not reached look silent."""
        started_s = time.time()
        waiting_bytes = waiting_files = 0
        try:
            with os.scandir(self.run_dir) as entries:
                for entry in entries:
                    if fnmatch.fnmatch(entry.name, RANK_FILE_PATTERN) and entry.is_file():
                        waiting_bytes, waiting_files = waiting_bytes + entry.stat().st_size, waiting_files + 1
        except OSError:  # no folder yet (or none readable): nothing waits; the polls say the rest
            pass
        return ReadMark(self.dir_source, started_s, waiting_bytes, waiting_files)

    def poll(self) -> Iterator[Line | SourceEvent]:
        started_s = time.time()  # a poll that finds nothing waiting has read everything written before this
        waiting_bytes = waiting_files = 0
        self.short = None
        try:
            names = self._new_names(started_s)
            self.reported.pop(self.dir_source, None)
        except FileNotFoundError:
            names = []
        except OSError as exc:  # not a folder, no permission: say so, try again next poll
            names = []
            if out_of_descriptors(exc):
                self.short = exc
                return
            if self.reported.get(self.dir_source) != (error := _error_text(exc)):
                self.reported[self.dir_source] = error
                yield SourceEvent(self.dir_source, "job", time.time(), "down", error)
        for name in names:
            if name not in self.tails and name not in self.skipped and fnmatch.fnmatch(name, RANK_FILE_PATTERN):
                self.tails[name] = FileTail(
                    os.path.join(self.run_dir, name), hold_open=len(self.tails) < self.hold_bound
                )
        self.backlog = False
        tails = list(self.tails.items())
        for n, (name, tail) in enumerate(tails):
            if n and self.stop_at is not None and time.monotonic() >= self.stop_at:  # between two files
                self.backlog = True  # files this poll did not reach: `left_unread` counts them
                waiting_bytes, waiting_files = waiting_bytes + len(tails) - n, waiting_files + len(tails) - n
                break
            source_id = f"job:{name}"
            try:
                lines, more_waiting = tail.read_lines()
            except NotRegularFile as exc:
                del self.tails[name]
                self.skipped.add(name)
                now_s = time.time()
                yield SourceEvent(source_id, "job", now_s, "open")
                yield SourceEvent(source_id, "job", now_s, "end", str(exc))
                continue
            except OSError as exc:
                tail.close()
                if out_of_descriptors(exc):  # trnwatch's own shortage, not this rank's: the poll stops here
                    self.short = exc
                    return
                if self.reported.get(source_id) != (error := _error_text(exc)):
                    self.reported[source_id] = error
                    yield SourceEvent(source_id, "job", time.time(), "down", error)
                continue
            self.reported.pop(source_id, None)
            if more_waiting:
                self.backlog = True
                waiting_bytes += max(1, tail.waiting_bytes)
                waiting_files += 1
            received_s = time.time()
            for line in lines:
                yield Line(
                    source_id=source_id,
                    kind="job",
                    received_s=received_s,
                    text=line.text,
                    oversize_bytes=line.oversize_bytes,
                )
        self.mark = ReadMark(self.dir_source, started_s, waiting_bytes, waiting_files)

    def _new_names(self, now_s: float) -> list[str]:
        """The folder's names, sorted; none when it is the folder listed before and unchanged
        since (its mtime, which any file created, renamed or removed in it moves), once that
        mtime is older than DIR_MTIME_SLACK_S: a name added within the same tick of a coarse
        clock is then not missed."""
        st = os.stat(self.run_dir)
        seen = (st.st_ino, st.st_mtime_ns)
        if seen == self._listed and now_s - st.st_mtime_ns / 1e9 > DIR_MTIME_SLACK_S:
            return []
        names = sorted(os.listdir(self.run_dir))
        self._listed = seen
        return names

    def close(self) -> None:
        for tail in self.tails.values():
            tail.close()

    def left_unread(self) -> Iterator[SourceEvent | ReadMark]:
        now_s = time.time()
        waiting_bytes = waiting_files = 0
        for name, tail in self.tails.items():
            if left := tail.unread_bytes():
                lines = tail.unread_lines()
                waiting_bytes, waiting_files = waiting_bytes + left, waiting_files + 1
                yield SourceEvent(
                    f"job:{name}",
                    "job",
                    now_s,
                    "end",
                    unread_message(left, lines),
                    unread_bytes=left,
                    unread_lines=lines,
                )
        if waiting_bytes:
            yield ReadMark(self.dir_source, now_s, waiting_bytes, waiting_files)


def unread_message(left_bytes: int, left_lines: int | None = None) -> str:
    lines = "" if left_lines is None else f"{left_lines:,} lines, "
    return (
        f"{lines}{left_bytes:,} bytes on disk left unread at exit (the exit read stops after {EXIT_READ_LIMIT_S:g} s)"
    )


def final_reads(
    poll: Callable[[], Iterator[_Item]],
    backlog: Callable[[], bool],
    left_unread: Callable[[], Iterator[_Item]] = lambda: iter(()),
    deadline: float | None = None,
) -> Iterator[_Item]:
    """What a follower yields when its session ends: polls of what is already on disk while a
    file has more waiting, so a line written just before SIGTERM, Ctrl-C or the end of
    `--duration` is in the receipt ("nothing lost on exit"). After EXIT_READ_LIMIT_S (or at
    `deadline`, a time.monotonic), what `left_unread` says of the rest instead."""
    deadline = time.monotonic() + EXIT_READ_LIMIT_S if deadline is None else deadline
    while True:
        yield from poll()
        if not backlog():
            return
        if time.monotonic() >= deadline:
            yield from left_unread()
            return


async def polled_lines(poll: Callable[[], Iterator[Line]], poll_s: float) -> AsyncIterator[Line]:
    """`poll`'s lines every `poll_s`, history first, until cancelled; then what a last read finds
    (`final_reads`: a file written by the session's end still goes in). A folder watched by its
    files' changes (checkpoint markers, trainer_state.json) is followed this way."""
    while True:
        for line in poll():
            yield line
        try:
            await asyncio.sleep(poll_s)
        except asyncio.CancelledError:
            for line in final_reads(poll, lambda: False):
                yield line
            raise


class RunDirFollower:
    """Follows one run directory: `lines` live (each poll's lines, then its `ReadMark`), `drain`
    at the session's end (what the files hold then, bounded by EXIT_READ_LIMIT_S; the rest
    counted per rank file)."""

    def __init__(self, run_dir: str, poll_s: float = POLL_S, max_held_open: int | None = None):
        self.poll_s = poll_s
        self._dir = _RunDir(run_dir, held_open_bound() if max_held_open is None else max_held_open)
        # The poll `lines` is yielding from: the session's end can cancel its consumer between two
        # of its lines (waiting for room in the intake), and the rest of that read is off the file
        # already, so `drain` yields it first.
        self._in_hand: Iterator[Line | SourceEvent | ReadMark] | None = None
        self._rng = random.Random()

    def _poll(self) -> Iterator[Line | SourceEvent | ReadMark]:
        yield from self._dir.poll()
        if self._dir.short is None:
            yield self._dir.mark

    async def lines(self) -> AsyncIterator[Line | SourceEvent | ReadMark]:
        """Every complete line of every `rank-*.jsonl`, history first, then live, and the events
        of ranks that cannot be read (see the module docstring), until cancelled. New rank files
        are picked up as they appear; the directory itself may appear later too. The first item
        is the mark that nothing is read yet (`_RunDir.start_mark`); each poll ends with its own.
        A poll stopped by a descriptor shortage (EMFILE, ENFILE) is tried again with backoff
        (SHORTAGE_BACKOFF), said as the folder's source "connecting" with the reason, and ends
        with no mark; the next whole poll's mark ends it."""
        yield self._dir.start_mark()
        failures = 0
        while True:
            self._in_hand = self._poll()
            for item in self._in_hand:
                yield item
            self._in_hand = None
            if self._dir.short is not None:
                failures += 1
                delay_s = SHORTAGE_BACKOFF.delay_s(failures, self._rng)
                error = f"{shortage_words(self._dir.short)}; reading again in {delay_s:.1f} s"
                yield SourceEvent(self._dir.dir_source, "job", time.time(), "connecting", error)
                await asyncio.sleep(delay_s)
                continue
            failures = 0
            await asyncio.sleep(0 if self._dir.backlog else max(self.poll_s, len(self._dir.tails) / FILES_PER_S))

    def drain(self) -> Iterator[Line | SourceEvent | ReadMark]:
        """The rest of a poll the session's end interrupted, then what the files hold
        (`final_reads`), then the files are closed; all within one EXIT_READ_LIMIT_S, which a
        poll checks between two files (a poll of 18,432 files on a starved machine took minutes:
        the session ended 168 s past its --duration)."""
        deadline = time.monotonic() + EXIT_READ_LIMIT_S
        self._dir.stop_at = deadline
        try:
            if self._in_hand is not None:
                in_hand, self._in_hand = self._in_hand, None
                yield from in_hand
            yield from final_reads(self._poll, lambda: self._dir.backlog, self._dir.left_unread, deadline)
        finally:
            self._dir.close()


async def follow_run_dir(
    run_dir: str, poll_s: float = POLL_S, max_held_open: int | None = None
) -> AsyncIterator[Line | SourceEvent]:
    """The lines and events of `RunDirFollower.lines` (not its marks), then, when cancelled, of
    its `drain` (taken by the consumer without awaiting) before the cancellation goes on. A
    session uses the follower's two halves itself (trnwatch/sources.py, run_dir_spec)."""
    follower = RunDirFollower(run_dir, poll_s, max_held_open)
    try:
        async for item in follower.lines():
            if not isinstance(item, ReadMark):
                yield item
    except asyncio.CancelledError:
        for item in follower.drain():
            if not isinstance(item, ReadMark):
                yield item
        raise
    finally:
        follower._dir.close()


def read_followed(tail: FileTail) -> tuple[list[str], bool]:
    """One read of a single followed file (a job log): the texts of its complete lines, and
    whether more bytes wait. A line over `MAX_LINE_BYTES` is skipped (a log line that long is no
    event). Raises `SourceLost` when the path is not a regular file or cannot be read, and the
    OSError itself when trnwatch is out of file descriptors (EMFILE, ENFILE): not the log's fault."""
    try:
        lines, more_waiting = tail.read_lines()
    except NotRegularFile as exc:
        raise SourceLost(str(exc)) from None
    except OSError as exc:
        if out_of_descriptors(exc):
            raise  # trnwatch's own shortage: the caller reads again later (collectors/job_log.py)
        raise SourceLost(f"cannot read {tail.path}: {_error_text(exc)}") from None
    return [line.text for line in lines if not line.oversize_bytes], more_waiting
