"""Reading recordings back: a /1 file, a /2 file, or a folder of /2 parts, as one recording.

A /2 reader finds frames through the index (checking each against its meta and CRC), scans
for frames the index lacks, and reads only the frames a window needs: frames before it only
when they hold source events (so every source is registered, ended or linked as it was at
the window's start), frames inside it whole. An unreadable frame (cut by a crash, corrupt)
is skipped and counted by reason in `skipped`; the rest replays.
"""

import errno
import itertools
import json
import os
import stat
import time
from collections import Counter
from collections.abc import AsyncIterator, Collection, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from operator import itemgetter
from pathlib import Path

from trnwatch.collectors.lines import Carried, ClockMark, Line, ReadMark, SourceEvent
from trnwatch.collectors.neuron_monitor import ReportRejected, decode_report
from trnwatch.collectors.recording import (
    PART_GLOB,
    SCHEMA,
    SCHEMA_V1,
    RecordingError,
    RecordingHeader,
    index_path,
)
from trnwatch.collectors.recording_frames import (
    CATALOG,
    EVENTS,
    FLAGS,
    FRAME_BYTES,
    JOB,
    MAGIC_BYTES,
    META_BYTES,
    OFFSET,
    RAW_BYTES,
    T_FIRST,
    T_LAST,
    CatalogEntry,
    FrameError,
    FrameInfo,
    decompress_frame,
    frame_entries,
    parse_meta,
    read_index,
)

RESYNC_CHUNK_BYTES = 1 << 20
HEADER_LINE_MAX_BYTES = 64 << 10  # a /1 header line is a few hundred bytes
# A /1 entry: a line of at most 4 MiB (MAX_LINE_BYTES), JSON-escaped (quotes double); longer is unreadable.
V1_ENTRY_MAX_BYTES = 16 << 20


class _V1File:
    """A `trnwatch.recording/1` file: JSON lines, read from its start (it has no index), an
    entry at a time, each bounded."""

    schema = SCHEMA_V1

    def __init__(self, path: Path, header: RecordingHeader, stats: "ReadStats"):
        self.path, self.header, self.stats = path, header, stats
        self.size_bytes = path.stat().st_size

    def _lines(self) -> Iterator[bytes]:
        """The entry lines after the header, each read up to V1_ENTRY_MAX_BYTES: a longer one
        is passed over in bounded reads (b"" in its place, an unreadable entry), never held."""
        with open(self.path, "rb") as f:
            self.stats.bytes_read += len(f.readline(HEADER_LINE_MAX_BYTES))
            while raw := f.readline(V1_ENTRY_MAX_BYTES + 1):
                self.stats.bytes_read += len(raw)
                if len(raw) <= V1_ENTRY_MAX_BYTES or raw.endswith(b"\n"):
                    yield raw
                    continue
                while (rest := f.readline(RESYNC_CHUNK_BYTES)) and not rest.endswith(b"\n"):
                    self.stats.bytes_read += len(rest)
                self.stats.bytes_read += len(rest)
                if not rest:
                    return  # cut short by a crash: never a whole line, not counted
                yield b"\n"

    def items(
        self, from_s: float | None, to_s: float | None, carrier: "JobCarrier | None" = None
    ) -> Iterator[Line | SourceEvent | ClockMark | ReadMark | Carried]:
        for raw in self._lines():
            if not raw.endswith(b"\n"):
                break  # cut short by a crash: never a whole line, not counted
            item: Line | SourceEvent
            try:
                e = json.loads(raw)
                if "event" in e:
                    item = SourceEvent(e["src"], e["kind"], float(e["t"]), e["event"], e.get("error"))
                else:
                    item = Line(e["src"], e["kind"], float(e["t"]), e.get("line", ""), int(e.get("oversize", 0)))
            except (ValueError, KeyError, TypeError, AttributeError):
                self.stats.skipped["entry"] += 1
                continue
            yield from _windowed(item, from_s, to_s, carrier)

    def span(self) -> tuple[float, float] | None:
        first: float | None = None
        last = 0.0
        for item in self.items(None, None):
            t = _time_of(item)
            first, last = (t, t) if first is None else (min(first, t), max(last, t))
        return None if first is None else (first, last)


class _V2File:
    """One `trnwatch.recording/2` file and its index."""

    schema = SCHEMA

    def __init__(self, path: Path, stats: "ReadStats", owner: int | None = None):
        self.path, self.stats, self.owner = path, stats, owner
        self._file = _open_read(path, owner)
        self.size_bytes = os.fstat(self._file.fileno()).st_size
        head = self._read(0, META_BYTES)
        try:
            info = parse_meta(head, 0)
            raw = decompress_frame(head + self._read(META_BYTES, info.frame_bytes - META_BYTES), info)
            self.header = RecordingHeader.model_validate_json(raw)
        except (FrameError, ValueError):
            self._file.close()
            raise RecordingError(f"{path} is not a trnwatch recording (its header frame is unreadable)") from None
        self.frames = self._find_frames(info.end)

    def close(self) -> None:
        self._file.close()

    def _read(self, offset: int, n: int) -> bytes:
        self._file.seek(offset)
        data = self._file.read(n)
        self.stats.bytes_read += len(data)
        return data

    def _find_frames(self, data_start: int) -> list[tuple]:
        """The index's records while they chain frame after frame inside the file, then
        whatever frames follow them, found by scanning metas (records as plain tuples in
        FrameInfo's field order, see read_index)."""
        frames: list[tuple] = []
        try:
            with _open_read(index_path(self.path), self.owner) as f:
                index_bytes = f.read()
        except (OSError, RecordingError):
            index_bytes = b""  # none, or not this part's owner's: the frames are found by scanning
        self.stats.index_bytes_read += len(index_bytes)
        index = read_index(index_bytes)
        pos, size = data_start, self.size_bytes
        if index and self._chains(index, data_start):
            frames, pos = index, index[-1][OFFSET] + index[-1][FRAME_BYTES]
        else:
            for record in index:
                end = pos + record[FRAME_BYTES]
                if record[OFFSET] != pos or end > size:
                    break
                frames.append(record)
                pos = end
        while pos < self.size_bytes:
            try:
                info = parse_meta(self._read(pos, META_BYTES), pos)
                if info.end > self.size_bytes:
                    raise FrameError("truncated", f"frame at byte {pos} runs past the end of the file")
            except FrameError as exc:
                self.stats.skipped[exc.reason] += 1
                if exc.reason == "truncated":
                    break
                # Resync from just after the previous meta: if a frame starts before `pos`, the
                # previous frame's length was damaged, and it is dropped too.
                found = self._resync(frames[-1][OFFSET] + META_BYTES if frames else pos + 1)
                if found == pos:  # the refused meta itself (a frame claiming too much): past it
                    found = self._resync(pos + 1)
                elif found < pos and frames:
                    frames.pop()
                pos = found
                continue
            frames.append(info)
            pos = info.end
        return frames

    def _chains(self, index: list[tuple], data_start: int) -> bool:
        """Whether the records plausibly chain frame after frame inside the file, checked at C
        speed (a day's index is 86,400 records): the first starts the data, offsets increase,
        the sizes add up to the last's end, which is inside the file. Each frame read is checked
        against its meta anyway."""
        offsets = list(map(itemgetter(OFFSET), index))
        end = offsets[-1] + index[-1][FRAME_BYTES]
        return (
            offsets[0] == data_start
            and end <= self.size_bytes
            and offsets == sorted(offsets)
            and data_start + sum(map(itemgetter(FRAME_BYTES), index)) == end
        )

    def _resync(self, pos: int) -> int:
        """The offset of the next frame meta's magic at or after `pos` (the file's end if none)."""
        while pos < self.size_bytes:
            chunk = self._read(pos, RESYNC_CHUNK_BYTES + len(MAGIC_BYTES) - 1)
            found = chunk.find(MAGIC_BYTES)
            if found >= 0:
                return pos + found
            pos += RESYNC_CHUNK_BYTES
        return self.size_bytes

    def entries(self, record: tuple) -> Iterator[Line | SourceEvent | ClockMark | ReadMark | CatalogEntry]:
        info = FrameInfo._make(record)
        try:
            raw = decompress_frame(self._read(info.offset, info.frame_bytes), info)
        except FrameError as exc:
            self.stats.skipped[exc.reason] += 1
            return
        self.stats.frame_read(self.path, info.offset)
        yield from frame_entries(raw, self.stats.skipped)

    def items(
        self, from_s: float | None, to_s: float | None, carrier: "JobCarrier | None" = None
    ) -> Iterator[Line | SourceEvent | ClockMark | ReadMark | Carried]:
        carried = JOB if carrier is not None else 0  # frames before the window holding job lines
        for record in self.frames:
            if to_s is not None and record[T_FIRST] >= to_s:
                continue
            if from_s is not None and record[T_LAST] < from_s and not record[FLAGS] & (EVENTS | carried):
                continue
            for item in self.entries(record):
                if not isinstance(item, CatalogEntry):
                    yield from _windowed(item, from_s, to_s, carrier)

    def span(self) -> tuple[float, float] | None:
        if not self.frames:
            return None
        return min(map(itemgetter(T_FIRST), self.frames)), max(map(itemgetter(T_LAST), self.frames))


def _time_of(item: Line | SourceEvent | ClockMark | ReadMark | Carried) -> float:
    if isinstance(item, Carried):
        return item.line.received_s
    return item.received_s if isinstance(item, Line) else item.t_s


def _in_window(item: Line | SourceEvent | ClockMark | ReadMark, from_s: float | None, to_s: float | None) -> bool:
    """Lines and clock marks inside [from, to); source events up to `to` (those before the
    window included)."""
    t = _time_of(item)
    if to_s is not None and t >= to_s:
        return False
    return isinstance(item, SourceEvent) or from_s is None or t >= from_s


def _windowed(
    item: Line | SourceEvent | ClockMark | ReadMark,
    from_s: float | None,
    to_s: float | None,
    carrier: "JobCarrier | None",
) -> Iterator[Line | SourceEvent | ClockMark | ReadMark | Carried]:
    """The item if the window holds it; a job line before the window goes to the carrier, whose
    state is given out (once) just before the window's first item."""
    if carrier is not None and from_s is not None:
        if _time_of(item) < from_s:
            if isinstance(item, Line) and item.kind == "job":
                carrier.add(item)
        else:
            yield from carrier.take()
    if _in_window(item, from_s, to_s):
        yield item


class JobCarrier:
    """The job state a replay window needs from before its start, from the recorded job lines:
    per rank its latest start, heartbeat, step, open phases and saves, and its end or error (the
    events that say where it runs, where it is and whether it progresses). Given out once, in
    the order received (the recording's sequence, not its clock), as `Carried` lines (folded as
    state, never as figures of the window)."""

    def __init__(self) -> None:
        self._kept: dict[tuple, Line] = {}
        self._taken = False

    def add(self, line: Line) -> None:
        try:
            event = json.loads(line.text)
            rank, kind = event["rank"], event["event"]
        except (ValueError, KeyError, TypeError):
            return  # the window's receipt counts only its own lines
        key = (line.source_id, rank)
        if kind == "run_start":  # a new process: what its previous one had open is history
            for stale in [k for k in self._kept if k[:2] == key]:
                del self._kept[stale]
        if kind in ("phase", "checkpoint"):
            what = (kind, event.get("phase") or event.get("action"))
            self._kept.pop((*key, *what), None)
            if event.get("state") != "end":
                self._kept[(*key, *what)] = line
        elif kind in ("run_start", "heartbeat", "step", "error", "run_end"):
            self._kept.pop((*key, kind), None)  # the latest goes last: the dict keeps the received order
            self._kept[(*key, kind)] = line

    def take(self) -> Iterator[Carried]:
        if self._taken:
            return
        self._taken = True
        for line in self._kept.values():
            yield Carried(line)
        self._kept.clear()


@dataclass
class ReadStats:
    """What reading cost and what it could not use."""

    frames_read: int = 0  # distinct frames: one read again (its catalog, then its lines) counts once
    bytes_read: int = 0  # of recording files (headers, metas, frames)
    index_bytes_read: int = 0
    skipped: Counter = field(default_factory=Counter)  # by reason: truncated, corrupt, entry
    _frames_seen: set[tuple[Path, int]] = field(default_factory=set)

    def frame_read(self, path: Path, offset: int) -> None:
        """Count the frame at `offset` of `path` once, however often it is read, so a whole
        replay reads as many frames as `replay --info` counts."""
        if (path, offset) not in self._frames_seen:
            self._frames_seen.add((path, offset))
            self.frames_read += 1


def _open_read(path: Path, owner: int | None):
    """`path` opened for reading; with `owner` (a part of a folder), only a regular file, not a
    symbolic link, owned by that user (the folder's owner): anything else is `RecordingError`."""
    if owner is None:
        return open(path, "rb")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise RecordingError(f"{path} is a symbolic link: not read") from None
        raise
    found = os.fstat(fd)
    if not stat.S_ISREG(found.st_mode) or found.st_uid != owner:
        os.close(fd)
        what = "not a regular file" if not stat.S_ISREG(found.st_mode) else f"owned by uid {found.st_uid}"
        raise RecordingError(f"{path} is {what}, not a part of its folder's owner (uid {owner}): not read")
    return os.fdopen(fd, "rb")


def _open_file(path: Path, stats: ReadStats, owner: int | None = None) -> _V1File | _V2File:
    try:
        with _open_read(path, owner) as f:
            first = f.read(4)
            if first == MAGIC_BYTES:
                return _V2File(path, stats, owner)
            f.seek(0)
            line = f.readline(HEADER_LINE_MAX_BYTES)  # never a whole file without a newline
    except IsADirectoryError:
        raise RecordingError(f"{path} is a folder") from None
    except OSError as exc:
        raise RecordingError(f"cannot read {path}: {exc.strerror}") from None
    try:
        header = RecordingHeader.model_validate_json(line)
    except ValueError:
        raise RecordingError(f"{path} is not a trnwatch recording (no {SCHEMA} or {SCHEMA_V1} header)") from None
    if header.recording != SCHEMA_V1:
        raise RecordingError(
            f"{path} is a {header.recording!r} recording; this trnwatch reads {SCHEMA} and {SCHEMA_V1}"
        )
    return _V1File(path, header, stats)


class Recording:
    """A recording to replay: one file (/1 or /2), or a folder of /2 parts (a rotated set, made
    by `trnwatch record DIR`) read as one, its parts in order of session start and part.

    A part of a set that cannot be read (damaged, zero-filled after ENOSPC, not a recording, a /1
    file) or must not be (a symbolic link, not a regular file, or owned by another user than the
    folder's owner: parts joined by someone else) is skipped, said in `warnings` and counted as
    `part` in `stats.skipped`; the others replay. Only a set with no readable part is refused."""

    def __init__(self, path: Path):
        self.path = path
        self.stats = ReadStats()
        self.warnings: list[str] = []
        if not path.is_dir():
            files = [_open_file(path, self.stats)]
        else:
            names = sorted(path.glob(PART_GLOB))
            if not names:
                raise RecordingError(f"{path} holds no recording parts ({PART_GLOB})")
            owner = path.stat().st_uid  # a part another user put there, or a link, is not read
            files = []
            for name in names:
                try:
                    part = _open_file(name, self.stats, owner)
                    if isinstance(part, _V1File):
                        raise RecordingError(f"{name}: a /1 recording cannot be part of a set")
                    files.append(part)
                except RecordingError as exc:
                    self.stats.skipped["part"] += 1
                    self.warnings.append(f"part skipped: {exc}")
            if not files:
                raise RecordingError(f"{path}: no readable part ({'; '.join(self.warnings)})")
        self.files = sorted(files, key=lambda f: (f.header.started, f.header.part))
        self.header = self.files[0].header

    @property
    def schema(self) -> str:
        return self.files[0].schema

    @property
    def size_bytes(self) -> int:
        return sum(f.size_bytes for f in self.files)

    def span(self) -> tuple[float, float] | None:
        """(first, last) receive time recorded, or None for an empty recording."""
        spans = [s for s in (f.span() for f in self.files) if s is not None]
        return (min(s[0] for s in spans), max(s[1] for s in spans)) if spans else None

    def window(self, start: "TimeArg | None", end: "TimeArg | None") -> tuple[float | None, float | None]:
        """Unix times of a `--from` / `--to` pair (None: the recording's start / end). A window
        that is empty, reversed or outside the recording raises RecordingError saying the span."""
        if start is None and end is None:
            return None, None
        span = self.span()
        if span is None:
            raise RecordingError(f"{self.path} holds nothing to replay: no window of it can be chosen")
        from_s = None if start is None else start.resolve(span)
        to_s = None if end is None else end.resolve(span)
        lo, hi = span[0] if from_s is None else from_s, span[1] if to_s is None else to_s
        problem = (
            "is outside the recording"
            if lo >= span[1] or hi <= span[0]
            else "is empty or reversed"
            if lo >= hi
            else None
        )
        if problem is not None:
            raise RecordingError(
                f"the window [{_iso(lo)}, {_iso(hi)}) {problem}, which spans {_iso(span[0])} .. {_iso(span[1])} "
                f"({span[1] - span[0]:.1f} s): --from and --to take seconds from its start, negative seconds "
                "before its end, or ISO-8601 times inside it"
            )
        return from_s, to_s

    def items(
        self, from_s: float | None = None, to_s: float | None = None, carry: bool = False
    ) -> Iterator[Line | SourceEvent | ClockMark | ReadMark | Carried]:
        """Every recorded line and clock mark in [from_s, to_s) and every source event before
        `to_s`, in order; with `carry`, the job's state from before `from_s` first (JobCarrier:
        every earlier frame is then read)."""
        carrier = JobCarrier() if carry and from_s is not None else None
        for f in self.files:
            yield from f.items(from_s, to_s, carrier)
        if carrier is not None:
            yield from carrier.take()  # a window that holds nothing still starts where it starts

    def close(self) -> None:
        for f in self.files:
            if isinstance(f, _V2File):
                f.close()


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@dataclass(frozen=True)
class TimeArg:
    """A `--from` / `--to` value: seconds from the recording's start (negative: before its end)
    or an ISO-8601 time (UTC when it names no offset)."""

    offset_s: float = 0.0  # used when at_s is None
    at_s: float | None = None

    @classmethod
    def parse(cls, text: str) -> "TimeArg":
        try:
            return cls(offset_s=float(text))
        except ValueError:
            pass
        try:
            when = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(f"not seconds or an ISO-8601 time: {text!r}") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return cls(at_s=when.timestamp())

    def resolve(self, span: tuple[float, float]) -> float:
        if self.at_s is not None:
            return self.at_s
        return span[0] + self.offset_s if self.offset_s >= 0 else span[1] + self.offset_s


async def replay_lines(
    recording: Recording, speed: float, from_s: float | None = None, to_s: float | None = None
) -> AsyncIterator[Line | SourceEvent | ClockMark | ReadMark | Carried]:
    """Yield recorded lines, source events and clock marks (a window's carried job state first)
    with their recorded times, in recorded order, paced at `speed` x real time from the first
    line on (0 = as fast as possible) by the recorded gaps: a wall clock stepped back during the
    recording is no gap. A window that stops at `to_s` ends there: a last mark says the session is
    judged at that moment."""
    import asyncio  # here: `replay --info` and `export` read a recording with no event loop

    start_wall = 0.0
    last_rec: float | None = None
    elapsed_rec = 0.0  # recorded time since the first line: the gaps forward, in recorded order
    items = recording.items(from_s, to_s, carry=True)
    if to_s is not None:
        items = itertools.chain(items, (ClockMark(to_s, end=True),))
    for i, item in enumerate(items):
        if last_rec is None and isinstance(item, Line):
            start_wall, last_rec = time.monotonic(), item.received_s
        if speed > 0 and last_rec is not None:
            t = _time_of(item)
            elapsed_rec += max(0.0, t - last_rec)  # a clock stepped back takes no time
            last_rec = t
            delay = start_wall + elapsed_rec / speed - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        elif i % 256 == 0:
            await asyncio.sleep(0)  # stay responsive to signals and the screen
        yield item


@dataclass
class RecordingInfo:
    """What `trnwatch replay R --info` prints."""

    schema: str
    files: int
    evidence: str  # from the data: see recorded_evidence
    simulated_sources: list[str]  # sources whose data the simulator marked
    span: tuple[float, float] | None
    sources: dict[str, str]  # id -> kind
    hosts: list[str] | None  # None: a /1 recording does not say (replay it to see them)
    frames: int
    size_bytes: int
    raw_bytes: int  # the entries uncompressed
    skipped: Counter


def recorded_evidence(mode: str, simulated_sources: Collection[str]) -> str:
    """What a recording holds: simulated when any source's data carries the simulator's mark,
    or when the recording session was the simulator's (`demo`); else the session's mode (live,
    replayed). A header's mode alone never makes simulated data live."""
    return "simulated" if simulated_sources or mode == "simulated" else mode


def _simulator_marked(line: Line) -> bool:
    """A /1 entry whose neuron-monitor report the simulator marked, as the ledger decides it."""
    if line.kind != "neuron-monitor" or not line.text:
        return False
    try:
        return decode_report(line.text)[0].trnwatch_simulator is not None
    except ReportRejected:
        return False


def describe(recording: Recording) -> RecordingInfo:
    """Span, sources, hosts, size and compression of a recording. A /2 recording answers from
    its index and the frames that hold source events or catalog entries; a /1 recording is read
    whole (and names no hosts: they are known only once its lines are decoded)."""
    sources: dict[str, str] = {}
    simulated: set[str] = set()
    hosts: set[str] = set()
    frames = raw_bytes = 0
    for f in recording.files:
        if isinstance(f, _V1File):
            for item in f.items(None, None):
                if not isinstance(item, (Line, SourceEvent)):
                    continue  # a /1 file holds only lines and source events
                sources.setdefault(item.source_id, item.kind)
                if isinstance(item, Line) and item.source_id not in simulated and _simulator_marked(item):
                    simulated.add(item.source_id)
            raw_bytes += f.size_bytes
            continue
        frames += len(f.frames)
        for record in f.frames:
            raw_bytes += record[RAW_BYTES]
            if not record[FLAGS] & (EVENTS | CATALOG):
                continue
            for entry in f.entries(record):
                if isinstance(entry, CatalogEntry):
                    for source_id, kind in entry.sources.items():
                        sources.setdefault(source_id, kind)
                    hosts.update(entry.hosts)
                    simulated.update(entry.simulated)
                elif isinstance(entry, SourceEvent):
                    sources.setdefault(entry.source_id, entry.kind)
    v1 = recording.schema == SCHEMA_V1
    return RecordingInfo(
        recording.schema,
        len(recording.files),
        recorded_evidence(recording.header.evidence, simulated),
        sorted(simulated),
        recording.span(),
        dict(sorted(sources.items())),
        None if v1 else sorted(hosts),
        frames,
        recording.size_bytes,
        raw_bytes,
        Counter(recording.stats.skipped),
    )
