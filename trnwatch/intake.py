"""Intake: what the sources delivered, decoded and folded on the event loop in slices.

Each line is decoded (collectors/decode.py) and its typed records folded into the ledger on the
event loop (the ledger has one writer, and the screen reads it there), for at most `slice_s` at
a go; then the loop runs whatever waits (a key, a repaint, a source's read) before the next
slice. Source events (open, end, link) travel in the same queue, so the ledger sees everything
in the order it arrived, which is the order it was recorded in: a replay folds the same
sequence.

Why not decode on a worker thread (as the first intake did): msgspec and the fold both hold the
GIL, so a thread bought no parallelism, only handoffs and GIL switches, and it kept a decoded
batch alive between the two, whose objects the cycle collector then walked. Measured side by
side (tests/benchmarks/bench_ingest.py, whole process): the thread cost about 1.5x the CPU per
Gen2 report. A slice bounds the loop's stall by one line's decode and fold (about 0.3 ms for a
Gen2 report, 1.5 ms for a Gen1 one) past `slice_s`, wherever the decode runs. And a thread busy
decoding stretches every piece of work the loop does meanwhile: a key's cluster rollup at 1,152
hosts took 54-72 ms of wall time with one decoding thread beside it, 49-211 ms with two
(docs/scale-out.md).

The garbage collector is kept off long-lived state (issue 10: a full collection over 1,152
hosts' ledger and the imports took 40-120 ms): when the intake starts and whenever a fold added
hosts or sources, everything alive is frozen (`gc.freeze`), so a full collection walks only what
was made since (one refresh's replaced figures: 24 k objects at 1,152 hosts). Folding makes no
reference cycles (tests/test_intake.py checks it), so what the ledger drops later is freed by
reference counting, frozen or not; `close` unfreezes, so anything else frozen on the way is
collectable again once the session is over. The young generations are collected after each
slice, a slice's worth at a time, and the oldest one as often as CPython would, between two
slices too (`_collect`): CPython starts none of its own while the intake runs, because with
everything frozen its rule (a full collection once what survived since the last one reaches a
quarter of the old generation) fired every few slices wherever the loop was, and one inside a
Prometheus answer's split walked every row the split held (5-13 ms at 1,152 hosts, on top of
the split's slice: docs/scale-out.md).

Nothing is lost: `close` decodes and folds whatever is still queued when the session ends. The
queue is bounded in items and in line text (MAX_QUEUED, MAX_QUEUED_CHARS): a source whose lines
arrive faster than they are folded waits in `room` (a replay at full speed, a backlog of rank
files), so memory stays bounded, by a frame or two of a replay whose lines are tens of MB.
"""

import asyncio
import gc
import time
from collections import deque
from collections.abc import Callable

from trnwatch.collectors.decode import Decoded, decode
from trnwatch.collectors.lines import Carried, ClockMark, Line, ReadMark, SourceEvent
from trnwatch.ledger.ledger import Ledger

# Longest stretch of folding on the event loop before it runs other work (issue 10: no
# event-loop stall over 50 ms, keys answered within 100 ms). 5 ms, not 10: a split's slice, a
# fold's and a key's rollup can all run in one turn of the loop (docs/scale-out.md).
FOLD_SLICE_S = 0.005
# Slices between two collections of the collector's middle generation (the youngest is
# collected after every slice).
YOUNG_SLICES_PER_OLDER = 8
# Items queued (not yet folded) beyond which sources wait: ~2 refreshes of 1,152 promql lines.
MAX_QUEUED = 4096
# Characters of line text queued beyond which sources wait too (issue 36 item 9): a few frames
# as the recorder cuts them (4 MiB of entries), so a replay of frames that each hold one line of
# tens of MB holds a frame or two, not every frame the reader got ahead by.
MAX_QUEUED_CHARS = 16 << 20
# Collections of the middle generation between two full collections (CPython's own threshold).
OLDER_PER_FULL = 10
# Keeps CPython from starting a full collection of its own while the intake runs.
_NEVER = 2**31 - 1


class Intake:
    """Decode and fold on the event loop in slices, in arrival order."""

    def __init__(
        self,
        ledger: Ledger,
        slice_s: float = FOLD_SLICE_S,
        max_queued: int = MAX_QUEUED,
        max_queued_chars: int = MAX_QUEUED_CHARS,
        on_time: Callable[[float], None] | None = None,
    ):
        self.ledger = ledger
        # Called with each folded item's time (a line's, a source event's, a clock mark's): the
        # session judges incidents on that clock, so a replay at any speed judges where the live
        # session did, whatever the slices were.
        self.on_time = on_time
        self.slice_s = slice_s
        self.max_queued = max_queued
        self.max_queued_chars = max_queued_chars
        self._queued_chars = 0  # of the queued lines' text
        self.slices = 0  # fold slices run (each followed by a turn of the event loop)
        self._queue: deque[Line | SourceEvent | ClockMark | ReadMark | Carried] = deque()  # arrived, not yet folded
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._idle = asyncio.Event()  # nothing queued
        self._idle.set()
        self.freezes = 0  # times long-lived state was frozen out of the collector's walk
        self.full_collections = 0  # run by the intake (CPython runs none while it runs)
        self._frozen_size = (-1, -1)  # (hosts, sources) when last frozen
        self._thresholds: tuple[int, int, int] | None = None  # the collector's, while the intake runs
        self._halted = False  # `halt`: nothing more is folded

    def put(self, item: Line | SourceEvent | ClockMark | ReadMark | Carried) -> None:
        """Queue one item (already recorded); it is folded after everything queued before it."""
        if self._halted:
            return
        self._queue.append(item)
        self._queued_chars += _chars(item)
        self._wake.set()
        self._idle.clear()
        if self.full:
            self._room.clear()

    @property
    def queued(self) -> int:
        return len(self._queue)

    @property
    def full(self) -> bool:
        """As many items, or as much line text, queued as the bounds allow: sources wait (`room`)."""
        return len(self._queue) >= self.max_queued or self._queued_chars >= self.max_queued_chars

    def fold_queued(self) -> None:
        """Fold everything queued now, at once (the session's exit drain, between its reads)."""
        while self._queue:
            self._fold(self._queue.popleft())
        self._queued_chars = 0

    async def room(self) -> None:
        """Wait while the queue is full."""
        await self._room.wait()

    async def idle(self) -> None:
        """Wait until everything queued so far is folded."""
        await self._idle.wait()

    async def run(self) -> None:
        """Decode and fold until cancelled (then `close` folds what is left)."""
        self._hold_full_collections()
        self._freeze_if_grown()
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                self._fold_slice()
                if not self.full:
                    self._room.set()
                # The event loop's turn (keys, repaints, sources) after the slice and again after
                # its collection, so no turn runs both: a slice's 5 ms and a full collection's
                # 3-5 ms at 1,152 hosts (and whatever else is ready) never add up in one.
                await asyncio.sleep(0)
                self._collect()
                await asyncio.sleep(0)
            self._freeze_if_grown()
            self._idle.set()

    def _fold_slice(self) -> None:
        deadline = time.perf_counter() + self.slice_s
        self.slices += 1
        queue = self._queue
        while queue:
            item = queue.popleft()
            self._queued_chars -= _chars(item)
            self._fold(item)
            if time.perf_counter() >= deadline:
                return

    def _collect(self) -> None:
        """Collect what the slice made (a few hundred objects: under a millisecond), the
        generation above every few slices, and the oldest once the one above was collected
        OLDER_PER_FULL times since (`gc.get_count()[2]` counts them). Left to itself the
        collector would wait: folding frees about as many old objects as it makes, which holds
        its allocation count down while 30 k young objects pile up for one 15-30 ms pass."""
        if not gc.isenabled():
            return
        if gc.get_count()[2] >= OLDER_PER_FULL:
            gc.collect(2)
            # What survived a full collection is the ledger's (a rank's steps and waits at 18,432
            # ranks: millions of objects): frozen, so the next one walks only what came since.
            gc.freeze()
            self.full_collections += 1
        else:
            gc.collect(1 if self.slices % YOUNG_SLICES_PER_OLDER == 0 else 0)

    def _hold_full_collections(self) -> None:
        """Keep CPython from starting full collections of its own (`_collect` runs them);
        `close` gives the collector its thresholds back."""
        if self._thresholds is None:
            self._thresholds = gc.get_threshold()
            gc.set_threshold(self._thresholds[0], self._thresholds[1], _NEVER)

    def _freeze_if_grown(self) -> None:
        """Freeze what is alive when the ledger has new hosts or sources: their state lives as
        long as the session, and a full collection need not walk it again. Freezing is a list
        splice, no collection, so it costs the loop nothing."""
        size = (len(self.ledger.hosts), len(self.ledger.sources))
        if size != self._frozen_size:
            gc.freeze()
            self.freezes += 1
            self._frozen_size = size

    def _fold(self, item: Line | SourceEvent | ClockMark | ReadMark | Carried) -> None:
        fold_item(self.ledger, item)
        if self.on_time is not None and not isinstance(item, Carried):  # carried: from before a replay's window
            self.on_time(item.received_s if isinstance(item, Line) else item.t_s)

    def halt(self) -> None:
        """Fold nothing more: what is queued and whatever comes is dropped (a replay that ended
        at an --exit-on moment; the recording still holds the rest)."""
        self._halted = True
        self._queue.clear()
        self._queued_chars = 0

    def close(self) -> None:
        """Fold everything still queued, in order (once `run` is cancelled); unfreeze, and give
        the collector its own thresholds back."""
        self.fold_queued()
        gc.unfreeze()
        if self._thresholds is not None:
            gc.set_threshold(*self._thresholds)
            self._thresholds = None
        self._room.set()
        self._idle.set()


def _chars(item: Line | SourceEvent | ClockMark | ReadMark | Carried) -> int:
    if isinstance(item, Line):
        return len(item.text)
    return len(item.line.text) if isinstance(item, Carried) else 0


def fold_item(
    ledger: Ledger, item: Line | SourceEvent | ClockMark | ReadMark | Carried, decoded: Decoded | None = None
) -> None:
    """Decode and fold one item into the ledger: the one way a line, a carried line, a clock mark
    or a source event enters it (the intake's slices, and `trnwatch export`, which passes a
    line's `decoded` records when it read them itself)."""
    if isinstance(item, Line):
        ledger.fold(decoded if decoded is not None else decode(item))
    elif isinstance(item, ClockMark):
        ledger.clock_mark(item)
    elif isinstance(item, ReadMark):
        ledger.read_mark(item)
    elif isinstance(item, Carried):
        ledger.carry(decode(item.line))
    elif item.event == "open":
        ledger.source(item.source_id, item.kind)
    elif item.event == "end":
        ledger.end_source(item.source_id, item.t_s, item.error, item.unread_bytes, item.unread_lines, item.kind)
    else:  # "connecting" / "down" of a remote source that reconnects (SSH, Prometheus)
        ledger.link_event(item)
