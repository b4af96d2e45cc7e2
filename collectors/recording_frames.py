"""The on-disk form of `trnwatch.recording/2`: zstd frames, each with its times, and an index.

A /2 recording file is a valid zstd stream (`zstd -dc FILE` prints its entries). It is a
sequence of frames, each written with one append:

    meta    a zstd skippable frame (magic 0x184D2A5E, 36 bytes of payload):
            t_first_s f64, t_last_s f64 (receive times of its entries, min and max),
            zstd_bytes u32, raw_bytes u32, crc32 of the zstd bytes u32, entries u32, flags u32
    data    one zstd frame holding the entries, each a JSON head line, raw bytes after it when
            the head says `"n"`:
              {"src": "trn3-001", "kind": "neuron-monitor", "t": 1733050000.25, "n": 24398}\\n
              <the 24,398 bytes of the line as received>\\n
              {"t", "src", "kind", "oversize": N}\\n                 (a line discarded for its length)
              {"t", "src", "kind", "event": "open"|"end"|"connecting"|"down", "error"}\\n  (an end at exit
                  with lines left unread adds "unread_bytes", "unread_lines")
              {"t", "clock": "tick"|"end", "paused": S, "held": true}\\n   (the session's clock: a
                  second passed, or the session ended, so a replay judges silence as it was;
                  "paused" and "held" only when set: the event loop was not scheduled for S
                  seconds before the tick, or the intake's queue was full)
              {"t", "src", "read": WAITING_BYTES, "files": N}\\n   (a file follower's poll that
                  began at t: 0 bytes waiting is caught up to t; ledger/lag.py)
              {"t", "catalog": {"sources": {id: kind}, "hosts": [id, ...], "simulated": [id, ...]}}\\n
                  (sources and hosts first seen in this file; sources first found marked by the
                  simulator in it: the evidence of the data, per source)

The first frame (flag HEADER) holds the header JSON line. The index beside the file
(`FILE.idx`) has one fixed-size record per data frame, appended after the frame itself:
t_first_s, t_last_s, offset, frame_bytes, raw_bytes, entries, flags. It only speeds things
up: a reader checks every frame it reads against its meta and CRC, and frames written after
the last index record (a SIGKILL between the two appends) are found by scanning metas.
"""

import json
import math
import struct
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

import msgspec
import zstandard

from trnwatch.collectors.lines import ClockMark, Line, ReadMark, SourceEvent

SKIPPABLE_MAGIC = 0x184D2A5E
_META = struct.Struct("<IIddIIIII")  # magic, payload size, then the payload below
META_BYTES = _META.size
_META_PAYLOAD_BYTES = META_BYTES - 8
_INDEX = struct.Struct("<ddQIIII")
INDEX_RECORD_BYTES = _INDEX.size
MAGIC_BYTES = struct.pack("<I", SKIPPABLE_MAGIC)

# Frame flags.
HEADER = 1  # the header frame (always the first)
EVENTS = 2  # holds source events: read even before a replay window, so sources are as they were
CATALOG = 4  # holds a catalog entry (--info reads only these and EVENTS frames)
JOB = 8  # holds job telemetry lines: read before a replay window for the job's state (JobCarrier)

# The most a frame may hold, compressed or not: frames are cut at about 4 MiB of entries, and one
# entry is at most a 16 MiB Prometheus answer. A meta claiming more is corrupt (a crafted 1 GiB
# claim with a valid CRC would otherwise be allocated before being refused).
MAX_FRAME_BYTES = 64 << 20
ZSTD_LEVEL = 3  # measured: 11.5x on the demo in 1 s frames, 0.1% of a core (README, Performance)


class FrameInfo(NamedTuple):
    """Where a frame is and what it covers (an index record, or its meta read from the file)."""

    t_first_s: float
    t_last_s: float
    offset: int
    frame_bytes: int  # meta + zstd data
    raw_bytes: int
    entries: int
    flags: int

    @property
    def end(self) -> int:
        return self.offset + self.frame_bytes

    def index_record(self) -> bytes:
        return _INDEX.pack(
            self.t_first_s, self.t_last_s, self.offset, self.frame_bytes, self.raw_bytes, self.entries, self.flags
        )


class FrameEncoder:
    """Collects entries of one frame and encodes them (not thread-safe; one per writer)."""

    def __init__(self):
        self._compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
        self.buffer = bytearray()
        self.entries = 0
        self.flags = 0
        self.t_first_s = self.t_last_s = 0.0
        self._line_heads: dict[tuple[str, str], bytes] = {}  # (source, kind) -> the head's fixed start

    def add(self, item: Line | SourceEvent | ClockMark | ReadMark) -> None:
        if isinstance(item, ClockMark):
            head: dict = {"t": item.t_s, "clock": "end" if item.end else "tick"}
            if item.paused_s:
                head["paused"] = item.paused_s
            if item.held:
                head["held"] = True
            self._head(head, item.t_s)
        elif isinstance(item, ReadMark):
            head = {"t": item.t_s, "src": item.source_id, "read": item.waiting_bytes, "files": item.waiting_files}
            self._head(head, item.t_s)
        elif isinstance(item, SourceEvent):
            head = {"t": item.t_s, "src": item.source_id, "kind": item.kind, "event": item.event, "error": item.error}
            if item.unread_bytes:
                head |= {"unread_bytes": item.unread_bytes, "unread_lines": item.unread_lines}
            self._head(head, item.t_s)
            self.flags |= EVENTS
        elif item.oversize_bytes:
            self._head(
                {"t": item.received_s, "src": item.source_id, "kind": item.kind, "oversize": item.oversize_bytes},
                item.received_s,
            )
        else:
            # The hot path (every line): the head's source and kind are encoded once per source.
            key = (item.source_id, item.kind)
            start = self._line_heads.get(key)
            if start is None:
                start = self._line_heads[key] = _json_bytes({"src": item.source_id, "kind": item.kind})[:-1] + b',"t":'
            t = item.received_s
            self._note(t)
            if item.kind == "job":
                self.flags |= JOB
            body = item.text.encode("utf-8", "surrogatepass")
            time_text = repr(t) if math.isfinite(t) else json.dumps(t)
            self.buffer += b"".join((start, time_text.encode(), b',"n":', str(len(body)).encode(), b"}\n", body, b"\n"))

    def add_catalog(self, sources: dict[str, str], host_ids: list[str], simulated: list[str]) -> None:
        """Sources and hosts first seen in this file, and sources first found simulated in it, at
        the frame's last time."""
        catalog = {"sources": sources, "hosts": host_ids, "simulated": simulated}
        self._head({"t": self.t_last_s, "catalog": catalog}, self.t_last_s)
        self.flags |= CATALOG

    def _head(self, head: dict, t_s: float) -> None:
        self._note(t_s)
        self.buffer += _json_bytes(head) + b"\n"

    def _note(self, t_s: float) -> None:
        """One more entry, received at `t_s`."""
        if not self.entries:
            self.t_first_s = self.t_last_s = t_s
        elif t_s < self.t_first_s:
            self.t_first_s = t_s
        elif t_s > self.t_last_s:
            self.t_last_s = t_s
        self.entries += 1

    def take(self, offset: int, flags: int = 0) -> tuple[bytes, FrameInfo]:
        """The frame's bytes (meta + zstd) and its index record; the encoder starts a new frame."""
        data = self._compressor.compress(self.buffer)
        info = FrameInfo(
            self.t_first_s,
            self.t_last_s,
            offset,
            META_BYTES + len(data),
            len(self.buffer),
            self.entries,
            self.flags | flags,
        )
        meta = _META.pack(
            SKIPPABLE_MAGIC,
            _META_PAYLOAD_BYTES,
            info.t_first_s,
            info.t_last_s,
            len(data),
            info.raw_bytes,
            zlib.crc32(data),
            info.entries,
            info.flags,
        )
        self.buffer = bytearray()
        self.entries = self.flags = 0
        return meta + data, info


def _json_bytes(value: dict) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")


def header_frame(header_json: str, t_s: float) -> bytes:
    """The first frame of a file: the header line, flag HEADER."""
    encoder = FrameEncoder()
    encoder.buffer += header_json.encode("utf-8") + b"\n"
    encoder.t_first_s = encoder.t_last_s = t_s
    frame, _ = encoder.take(0, HEADER)
    return frame


class FrameError(ValueError):
    """A frame that cannot be used; `reason` is `truncated` or `corrupt`."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason


def parse_meta(buf: bytes, offset: int) -> FrameInfo:
    """The frame whose meta starts `buf` (read at file `offset`); FrameError if `buf` is none."""
    if len(buf) < META_BYTES:
        raise FrameError("truncated", f"frame meta at byte {offset} cut short")
    magic, size, t_first, t_last, zstd_bytes, raw_bytes, _crc, entries, flags = _META.unpack_from(buf)
    if magic != SKIPPABLE_MAGIC or size != _META_PAYLOAD_BYTES or not t_first <= t_last:
        raise FrameError("corrupt", f"no frame meta at byte {offset}")
    if zstd_bytes > MAX_FRAME_BYTES or raw_bytes > MAX_FRAME_BYTES:
        raise FrameError(
            "corrupt",
            f"frame at byte {offset} claims {max(zstd_bytes, raw_bytes):,} bytes (a frame holds at most 64 MiB)",
        )
    return FrameInfo(t_first, t_last, offset, META_BYTES + zstd_bytes, raw_bytes, entries, flags)


def decompress_frame(buf: bytes, info: FrameInfo) -> bytes:
    """The raw entries of a whole frame `buf` (meta + data), checked against its meta."""
    if len(buf) < info.frame_bytes:
        raise FrameError("truncated", f"frame at byte {info.offset} cut short ({len(buf)} of {info.frame_bytes} bytes)")
    found = parse_meta(buf, info.offset)
    if found != info:
        raise FrameError("corrupt", f"frame at byte {info.offset} does not match its index record")
    data = buf[META_BYTES : info.frame_bytes]
    if zlib.crc32(data) != _META.unpack_from(buf)[6]:
        raise FrameError("corrupt", f"frame at byte {info.offset} fails its CRC")
    try:
        raw = zstandard.ZstdDecompressor().decompress(data, max_output_size=info.raw_bytes)
    except zstandard.ZstdError as exc:
        raise FrameError("corrupt", f"frame at byte {info.offset}: {exc}") from None
    if len(raw) != info.raw_bytes:
        raise FrameError(
            "corrupt", f"frame at byte {info.offset} decompresses to {len(raw)} bytes, not {info.raw_bytes}"
        )
    return raw


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """Sources (id -> kind) and hosts first seen in a file by the time `t_s`, and sources whose
    data the simulator marked (a file of an earlier version has none: empty)."""

    t_s: float
    sources: dict[str, str]
    hosts: list[str]
    simulated: list[str]


# An entry's head ({"t":..., "src":..., ...}, written by json.dumps) decoded by msgspec: a tenth of
# json.loads's time, and the replay of a demo minute decodes 88,000 of them.
_HEADS = msgspec.json.Decoder()


def _head(raw: memoryview) -> dict:
    try:
        return _HEADS.decode(raw)
    except msgspec.DecodeError:  # what msgspec refuses and json reads: a lone surrogate (a file
        return json.loads(bytes(raw))  # name's undecodable byte, escaped), a number past a float


def frame_entries(raw: bytes, bad: Counter) -> Iterator[Line | SourceEvent | ClockMark | ReadMark | CatalogEntry]:
    """The entries of a decompressed frame: Lines, SourceEvents, clock marks and catalog entries.
    An entry that cannot be read is counted in `bad["entry"]` and ends the frame (the rest of a
    frame cannot be framed without it)."""
    pos, size = 0, len(raw)
    view = memoryview(raw)
    while pos < size:
        nl = raw.find(b"\n", pos)
        try:
            if nl < 0:
                raise ValueError("head without newline")
            head = _head(view[pos:nl])
            pos = nl + 1
            t = float(head["t"])
            if "n" in head:
                n = int(head["n"])
                if n < 0 or raw[pos + n : pos + n + 1] != b"\n":
                    raise ValueError("body length does not match")
                text = raw[pos : pos + n].decode("utf-8", "surrogatepass")
                pos += n + 1
                yield Line(head["src"], head["kind"], t, text)
            elif "event" in head:
                yield SourceEvent(
                    head["src"],
                    head["kind"],
                    t,
                    head["event"],
                    head.get("error"),
                    int(head.get("unread_bytes", 0)),
                    int(head.get("unread_lines", 0)),
                )
            elif "clock" in head:
                yield ClockMark(t, head["clock"] == "end", float(head.get("paused", 0.0)), bool(head.get("held")))
            elif "read" in head:
                yield ReadMark(str(head["src"]), t, int(head["read"]), int(head.get("files", 0)))
            elif "oversize" in head:
                yield Line(head["src"], head["kind"], t, "", int(head["oversize"]))
            elif "catalog" in head:
                catalog = head["catalog"]
                yield CatalogEntry(
                    t,
                    {str(k): str(v) for k, v in catalog["sources"].items()},
                    [str(h) for h in catalog["hosts"]],
                    [str(i) for i in catalog.get("simulated", [])],
                )
            else:
                raise ValueError("unknown entry")
        except (ValueError, KeyError, TypeError, AttributeError):
            bad["entry"] += 1
            return


# Fields of an index record as a plain tuple (a day's index is 86,400 records: plain tuples from
# `struct.iter_unpack` cost a third of named ones; `FrameInfo._make(record)` names them).
T_FIRST, T_LAST, OFFSET, FRAME_BYTES, RAW_BYTES, ENTRIES, FLAGS = range(7)


def read_index(buf: bytes) -> list[tuple]:
    """The whole records of an index file's bytes, as plain tuples in FrameInfo's field order
    (a record cut by a crash is ignored)."""
    whole = len(buf) - len(buf) % INDEX_RECORD_BYTES
    return list(_INDEX.iter_unpack(memoryview(buf)[:whole]))
