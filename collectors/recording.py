"""Recordings `trnwatch.recording/1`: every raw line a session ingested, replayable exactly.

A recording is JSON lines. The first line is a header; each following line is one ingested
`Line`: `{"t": received unix seconds, "src": source id, "kind": parser, "line": raw text}` (or
`"oversize": N` instead of `line` for a line that was discarded for its length), or one
`SourceEvent`: `{"t", "src", "kind", "event": "open" | "end", "error": null | text}`. The writer
flushes at least once a second, so a crash loses at most the last second; the reader takes
whole lines only, so a recording cut mid-line replays up to its last complete line.
"""

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from trnwatch import __version__
from trnwatch.collectors.lines import Line, SourceEvent

SCHEMA = "trnwatch.recording/1"
FLUSH_EVERY_S = 1.0


class RecordingHeader(BaseModel):
    model_config = ConfigDict(extra="ignore")

    recording: str
    tool: str
    started: float
    evidence: str  # the recorded session's evidence mode (live / simulated / replayed)
    ultraservers: dict[str, str] = {}


class RecordingError(ValueError):
    """The file is not a trnwatch recording (or not one this version reads)."""


class Recorder:
    """Appends every ingested line to a recording file."""

    def __init__(self, path: Path, evidence: str, ultraservers: dict[str, str]):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file = open(path, "w", encoding="utf-8")
        header = RecordingHeader(recording=SCHEMA, tool=f"trnwatch {__version__}", started=time.time(),
                                 evidence=evidence, ultraservers=ultraservers)
        self._file.write(header.model_dump_json() + "\n")
        self._file.flush()
        self._last_flush_s = time.monotonic()

    def write(self, item: Line | SourceEvent) -> None:
        if isinstance(item, SourceEvent):
            entry = {"t": item.t_s, "src": item.source_id, "kind": item.kind, "event": item.event, "error": item.error}
        elif item.oversize_bytes:
            entry = {"t": item.received_s, "src": item.source_id, "kind": item.kind, "oversize": item.oversize_bytes}
        else:
            entry = {"t": item.received_s, "src": item.source_id, "kind": item.kind, "line": item.text}
        self._file.write(json.dumps(entry, ensure_ascii=False) + "\n")
        if time.monotonic() - self._last_flush_s >= FLUSH_EVERY_S:
            self.flush()

    def flush(self) -> None:
        """Push buffered lines to the OS (the session also calls this on a 1 s timer)."""
        if not self._file.closed:
            self._file.flush()
            self._last_flush_s = time.monotonic()

    def close(self) -> None:
        if not self._file.closed:
            self._file.flush()
            self._file.close()


def read_header(path: Path) -> RecordingHeader:
    """The header of a recording; `RecordingError` with a clear message if it is not one."""
    try:
        with open(path, encoding="utf-8") as f:
            first = f.readline()
    except OSError as exc:
        raise RecordingError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise RecordingError(f"{path} is not a trnwatch recording (not text)") from None
    try:
        header = RecordingHeader.model_validate_json(first)
    except ValueError:
        raise RecordingError(f"{path} is not a trnwatch recording (no {SCHEMA} header)") from None
    if header.recording != SCHEMA:
        raise RecordingError(f"{path} is a {header.recording!r} recording; this trnwatch reads {SCHEMA}")
    return header


class RecordingReader:
    """Streams the whole, well-formed entries of a recording, never holding it in memory.

    `bad` counts unreadable entries; a final line cut by a crash is not counted (it was never a
    whole line). `progress` is the fraction of the file read so far.
    """

    def __init__(self, path: Path):
        self.path = path
        self.header = read_header(path)
        self.size_bytes = path.stat().st_size
        self.read_bytes = 0
        self.bad = 0

    @property
    def progress(self) -> float:
        return self.read_bytes / self.size_bytes if self.size_bytes else 1.0

    def __iter__(self):
        with open(self.path, "rb") as f:
            self.read_bytes = len(f.readline())  # header
            for raw in f:
                self.read_bytes += len(raw)
                if not raw.endswith(b"\n"):
                    break  # cut short by a crash
                try:
                    e = json.loads(raw)
                    if "event" in e:
                        yield SourceEvent(e["src"], e["kind"], float(e["t"]), e["event"], e.get("error"))
                    else:
                        yield Line(e["src"], e["kind"], float(e["t"]), e.get("line", ""), int(e.get("oversize", 0)))
                except (ValueError, KeyError, TypeError, AttributeError):
                    self.bad += 1


async def replay_lines(reader: RecordingReader, speed: float) -> AsyncIterator[Line | SourceEvent]:
    """Yield recorded lines and source events with their recorded times, paced at `speed` x
    real time (0 = as fast as possible)."""
    start_wall = start_rec = None
    for i, line in enumerate(reader):
        t = line.t_s if isinstance(line, SourceEvent) else line.received_s
        if start_rec is None:
            start_wall, start_rec = time.monotonic(), t
        if speed > 0:
            delay = start_wall + (t - start_rec) / speed - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        elif i % 256 == 0:
            await asyncio.sleep(0)  # stay responsive to signals and the screen
        yield line
