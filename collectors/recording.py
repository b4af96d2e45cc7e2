"""Recordings: every raw line a session ingested, kept so a replay gives the same receipt.

`trnwatch.recording/2` (written here; the on-disk form is in recording_frames.py): zstd frames
of about a second of entries each (or FRAME_MAX_RAW_BYTES), each frame written with one append
and indexed in `FILE.idx` after it, so a SIGKILL loses at most the frame being collected. A
recorder writes one file (`--record PATH`) or a rotated set in a folder (`trnwatch record DIR`),
each file named `trnwatch-<session start, UTC>-<pid>-<part>.trnrec`, created exclusively (an
existing name, or a symbolic link planted under it, is refused and never followed). `trnwatch.recording/1` (JSON
lines, the first format) is still read (recording_reader.py).

Durability: a frame is appended with one write as it is cut, so a SIGKILL of the recorder loses
only the frame being collected (the page cache keeps what was written). Against a power loss or
a host crash, the recorder fsyncs the file and its index when a file is closed (rotation, the
session's end), and otherwise at most FSYNC_EVERY_S after a frame was cut (checked at every
cut and at the session's FLUSH_EVERY_S flush); a new file's name is made durable by an fsync of
its folder. So a power loss loses at most the last FSYNC_EVERY_S + FLUSH_EVERY_S of frames
(about 6 s) and the frame being collected; the reader skips a frame cut short and counts it.

A write that fails (disk full, I/O error) stops only the recording: the recorder keeps the
error and the time, writes nothing more, and the session says so once and marks the receipt.
Files are created 0600 and folders 0700 whatever the umask, by the rule every output follows
(trnwatch/output.py); recordings are appended, not replaced: a recording holds raw telemetry.
"""

import fnmatch
import os
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from trnwatch import __version__
from trnwatch.collectors.lines import ClockMark, Line, ReadMark, SourceEvent
from trnwatch.collectors.recording_frames import FrameEncoder, header_frame
from trnwatch.collectors.scheduler import SchedulerJob
from trnwatch.output import (
    OutputError,
    create_exclusive,
    create_exclusive_at,
    make_dirs,
    open_own_folder,
    os_error_reason,
)
from trnwatch.redaction import redact

SCHEMA = "trnwatch.recording/2"
SCHEMA_V1 = "trnwatch.recording/1"
FLUSH_EVERY_S = 1.0  # the session cuts a frame at least this often
FSYNC_EVERY_S = 5.0  # frames cut are fsynced at most this long after (and on every close)
FRAME_SPAN_S = 1.0  # a frame holds at most this much receive time ...
FRAME_MAX_RAW_BYTES = 4 * 1024 * 1024  # ... and about this many bytes of entries
PART_GLOB = "trnwatch-*.trnrec"
INDEX_SUFFIX = ".idx"


class RecordingHeader(BaseModel):
    model_config = ConfigDict(extra="ignore")

    recording: str
    tool: str
    started: float
    # The recording session's mode as started (live / simulated / replayed): a claim, never the
    # evidence on its own (a `watch --stdin` session is started live whatever feeds it); see
    # recording_reader.recorded_evidence.
    evidence: str
    ultraservers: dict[str, str] = {}
    session: str = ""  # /2: the recording session's id (its start, UTC), the same in every part
    part: int = 0  # /2: the file's place in a rotated set, from 0
    # /2: the thresholds the session judged by (ledger/rules.py's fields), so a replay judges the
    # same; absent in recordings made before they were kept (the defaults then).
    rules: dict[str, float] = {}
    # The scheduler job the recording session served (collectors/scheduler.py), so a replay
    # reports it and not the replaying shell's; absent: none (or a recording made before).
    scheduler: SchedulerJob | None = None


class RecordingError(ValueError):
    """The file is not a trnwatch recording (or not one this version reads)."""


@dataclass(frozen=True)
class Rotation:
    """When a recorder starts its next file, and how many files it keeps."""

    max_bytes: int | None = None
    max_age_s: float | None = None
    retain: int | None = None


def index_path(path: Path) -> Path:
    return path.with_name(path.name + INDEX_SUFFIX)


def _open_private(path: Path) -> int:
    """Create `path` for appending, mode 0600; an existing name (another session's recording, a
    planted symbolic link) is refused, never truncated or followed (trnwatch/output.py's rule)."""
    return create_exclusive(path, os.O_APPEND)


def _redacted(item: Line | SourceEvent) -> Line | SourceEvent:
    """`item` without the secrets trnwatch holds (trnwatch/redaction.py): a recording is an output."""
    if isinstance(item, SourceEvent):
        return (
            item if item.error is None or redact(item.error) == item.error else replace(item, error=redact(item.error))
        )
    return item if not item.text or redact(item.text) == item.text else replace(item, text=redact(item.text))


def _fsync_folder(folder: Path) -> None:
    """Make the names in `folder` durable (a new file)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class Recorder:
    """Appends every ingested line and source event to a /2 recording.

    `to_file` writes one file; `to_folder` writes parts into a folder, starting the next when
    `rotation` says, and deleting the oldest parts beyond `rotation.retain`. `known_hosts`
    (the ledger's host ids) and `simulated_sources` (ids of the sources whose data the ledger
    found marked by the simulator) are read when a frame is cut, for the catalog: `--info`
    and a replay tell simulated data from live by it, not by the header's mode.
    """

    def __init__(
        self,
        target: Path,
        folder: bool,
        evidence: str,
        ultraservers: dict[str, str],
        rotation: Rotation | None = None,
        known_hosts: Callable[[], Collection[str]] | None = None,
        on_file: Callable[[Path], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        simulated_sources: Callable[[], Collection[str]] | None = None,
        rules: dict[str, float] | None = None,
        scheduler: SchedulerJob | None = None,
    ):
        self.target = target
        self.folder = folder
        self.rotation = rotation or Rotation()
        self.known_hosts = known_hosts or (lambda: ())
        self.simulated_sources = simulated_sources or (lambda: ())
        self.on_file = on_file
        self.monotonic = monotonic  # rotation by age and the fsync interval
        self.started_s = time.time()
        self.session_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(self.started_s))
        self._header: dict[str, Any] = dict(
            recording=SCHEMA,
            tool=f"trnwatch {__version__}",
            started=self.started_s,
            evidence=evidence,
            ultraservers=ultraservers,
            session=self.session_id,
            rules=dict(rules or {}),
            scheduler=scheduler,
        )
        self.files: list[Path] = []
        self.frames = 0
        self.bytes_written = 0
        self.raw_bytes = 0
        self.error: str | None = None
        self.stopped_at_s: float | None = None
        self._encoder = FrameEncoder()
        self._fd = self._index_fd = -1
        # A rotated set's folder, opened once (never through a link, never another user's): every
        # part is created, listed and removed through it (trnwatch/output.py, open_own_folder).
        self._folder_fd = -1
        self._offset = 0
        self._lines_in_part = 0  # lines written to the part open now
        self._file_opened_s = 0.0
        self._synced_s = 0.0  # when the open file was last fsynced (monotonic)
        self._unsynced = False  # frames cut since then
        self._open_events: dict[str, SourceEvent] = {}  # sources open and not ended: repeated in each part
        self._sources_cataloged: dict[str, str] = {}
        self._sources_seen: dict[str, str] = {}
        self._hosts_cataloged: set[str] = set()
        self._simulated_cataloged: set[str] = set()
        self._guard(self._open_part)

    @classmethod
    def to_file(cls, path: Path, evidence: str, ultraservers: dict[str, str], **kw) -> "Recorder":
        return cls(path, False, evidence, ultraservers, **kw)

    @classmethod
    def to_folder(cls, folder: Path, evidence: str, ultraservers: dict[str, str], **kw) -> "Recorder":
        return cls(folder, True, evidence, ultraservers, **kw)

    @property
    def path(self) -> Path | None:
        """The file being written (None once stopped)."""
        return self.files[-1] if self.files and self.error is None and self._fd >= 0 else None

    def write(self, item: Line | SourceEvent | ClockMark | ReadMark) -> None:
        if self.error is None and self._fd >= 0:
            self._guard(self._write, item)

    def flush(self) -> None:
        """Cut the frame being collected, and fsync when FSYNC_EVERY_S passed since frames were
        cut (the session calls this every FLUSH_EVERY_S)."""
        if self.error is None and self._fd >= 0 and self._encoder.entries:
            self._guard(self._cut_and_rotate)
        if self.error is None and self._fd >= 0 and self._unsynced:
            self._guard(self._sync_if_due)

    def close(self) -> None:
        if self.error is None and self._fd >= 0:
            self._guard(self._end)

    def _end(self) -> None:
        """The session's end: the part is closed; with `retain`, a part opened by a rotation that
        took no line since is removed (it would push the last part with data out), then at most
        `retain` parts are kept."""
        self._close_part()
        retain = self.rotation.retain
        if not (self.folder and retain):
            return
        if len(self.files) > 1 and self._lines_in_part == 0:
            last = self.files.pop()
            self._remove_part(last.name)
        self._drop_old_parts(retain)

    def _guard(self, step, *args) -> None:
        try:
            step(*args)
        except (OSError, OutputError) as exc:
            self._stop(exc)
        finally:
            if self._fd < 0 and self._folder_fd >= 0:  # stopped, or the session's end
                os.close(self._folder_fd)
                self._folder_fd = -1

    def _stop(self, exc: OSError | OutputError) -> None:
        self.error = os_error_reason(exc) if isinstance(exc, OSError) else str(exc)
        self.stopped_at_s = time.time()
        for fd, keep in ((self._fd, self._offset), (self._index_fd, None)):
            if fd < 0:
                continue
            try:
                if keep is not None:
                    os.ftruncate(fd, keep)  # drop a partly written frame, if the disk lets us
            except OSError:
                pass
            try:
                os.close(fd)
            except OSError:
                pass
        self._fd = self._index_fd = -1

    def _write(self, item: Line | SourceEvent | ClockMark | ReadMark) -> None:
        encoder = self._encoder
        if isinstance(item, ClockMark | ReadMark):
            # Every tick and read mark: each says up to when the sources were read (ledger/lag.py),
            # so a replay judges lateness as the session did (about 40 bytes a second each).
            encoder.add(item)
            return
        t = item.t_s if isinstance(item, SourceEvent) else item.received_s
        if encoder.entries and t - encoder.t_first_s >= FRAME_SPAN_S:
            self._cut_and_rotate()
        if isinstance(item, SourceEvent):
            if item.event == "open":
                self._open_events[item.source_id] = item
            elif item.event == "end":
                self._open_events.pop(item.source_id, None)
        if item.source_id not in self._sources_seen:
            self._sources_seen[item.source_id] = item.kind
        if isinstance(item, Line):
            self._lines_in_part += 1
        encoder.add(_redacted(item))
        if len(encoder.buffer) >= FRAME_MAX_RAW_BYTES:
            self._cut_and_rotate()

    def _cut_and_rotate(self) -> None:
        self._cut()
        self._sync_if_due()
        if self.folder and self._rotation_due():
            self._close_part()
            self._open_part()

    def _cut(self) -> None:
        encoder = self._encoder
        hosts = self.known_hosts()
        new_sources = (
            {}
            if len(self._sources_seen) == len(self._sources_cataloged)
            else {k: v for k, v in self._sources_seen.items() if k not in self._sources_cataloged}
        )
        new_hosts = [] if len(hosts) == len(self._hosts_cataloged) else sorted(set(hosts) - self._hosts_cataloged)
        simulated = self.simulated_sources()
        new_simulated = (
            []
            if len(simulated) == len(self._simulated_cataloged)
            else sorted(set(simulated) - self._simulated_cataloged)
        )
        if new_sources or new_hosts or new_simulated:
            encoder.add_catalog(new_sources, new_hosts, new_simulated)
            self._sources_cataloged.update(new_sources)
            self._hosts_cataloged.update(new_hosts)
            self._simulated_cataloged.update(new_simulated)
        frame, info = encoder.take(self._offset)
        _write_all(self._fd, frame)
        self._offset += len(frame)
        _write_all(self._index_fd, info.index_record())
        self.frames += 1
        self.bytes_written += len(frame)
        self.raw_bytes += info.raw_bytes
        self._unsynced = True

    def _sync_if_due(self) -> None:
        if self._unsynced and self.monotonic() - self._synced_s >= FSYNC_EVERY_S:
            self._sync()

    def _sync(self) -> None:
        """The file, then its index (which only ever points at frames already durable)."""
        os.fsync(self._fd)
        os.fsync(self._index_fd)
        self._synced_s = self.monotonic()
        self._unsynced = False

    def _rotation_due(self) -> bool:
        r = self.rotation
        return bool(
            (r.max_bytes and self._offset >= r.max_bytes)
            or (r.max_age_s and self.monotonic() - self._file_opened_s >= r.max_age_s)
        )

    def _open_part(self) -> None:
        part = len(self.files)
        if self.folder:
            if self._folder_fd < 0:
                self._folder_fd = open_own_folder(self.target)
            path = self.target / f"trnwatch-{self.session_id}-{os.getpid()}-{part:04d}.trnrec"
            fd = create_exclusive_at(self._folder_fd, self.target, path.name, os.O_APPEND)
            try:
                self._index_fd = create_exclusive_at(self._folder_fd, self.target, index_path(path).name, os.O_APPEND)
            except OutputError:
                os.close(fd)
                os.unlink(path.name, dir_fd=self._folder_fd)  # created just now, exclusively: ours
                raise
        else:
            make_dirs(self.target.parent)
            path = self.target
            fd = _open_private(path)
            try:
                self._index_fd = _open_private(index_path(path))
            except OutputError:
                os.close(fd)
                path.unlink()  # created just now by this recorder, exclusively: nobody else's file
                raise
        self._fd = fd
        self.files.append(path)
        self._lines_in_part = 0
        self._file_opened_s = self.monotonic()
        header = RecordingHeader(**self._header, part=part).model_dump_json()
        frame = header_frame(header, time.time())
        _write_all(self._fd, frame)
        self._offset = len(frame)
        self.bytes_written += len(frame)
        self._sync()
        # A part read without the ones before it still knows its sources and hosts (an "open"
        # again is harmless to a replay of the whole set: registering a source is idempotent).
        self._sources_cataloged, self._hosts_cataloged, self._simulated_cataloged = {}, set(), set()
        now_s = time.time()
        for event in self._open_events.values():
            self._encoder.add(SourceEvent(event.source_id, event.kind, now_s, "open"))
        if self.rotation.retain:
            # The new part holds nothing yet: `retain` parts besides it stay until it does (at the
            # session's end, `_end` settles on `retain` parts).
            self._drop_old_parts(self.rotation.retain + 1)
        if self._folder_fd >= 0:
            os.fsync(self._folder_fd)
        else:
            _fsync_folder(path.parent)
        if self.on_file is not None:
            self.on_file(path)

    def _close_part(self) -> None:
        if self._encoder.entries:
            self._cut()
        self._sync()
        fd, index_fd = self._fd, self._index_fd
        self._fd = self._index_fd = -1
        os.close(fd)
        os.close(index_fd)

    def _drop_old_parts(self, retain: int) -> None:
        """Keep the newest `retain` parts in the folder: this session's parts are the newest, in
        the order written, after every other part there, by name (a part named after a clock that
        was ahead, before a step back, is older than any part this session writes)."""
        names = set(fnmatch.filter(os.listdir(self._folder_fd), PART_GLOB))
        own = [p.name for p in self.files if p.name in names]
        others = sorted(names - set(own))
        parts = others + own
        for old in parts[: max(0, len(parts) - retain)]:
            self._remove_part(old)

    def _remove_part(self, name: str) -> None:
        """Remove a part and its index from the set's folder (through its descriptor)."""
        for each in (name, name + INDEX_SUFFIX):
            try:
                os.unlink(each, dir_fd=self._folder_fd)
            except FileNotFoundError:
                pass
