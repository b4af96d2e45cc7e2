"""Intake: what the sources delivered, decoded off the event loop and folded on it in slices.

Lines are decoded (collectors/decode.py) on one worker thread, in arrival order, a batch at a
time: whatever arrived while the previous batch was decoded and folded. The typed records are
folded into the ledger on the event loop (the ledger has one writer, and the screen reads it
there), for at most `slice_s` at a go, then the loop runs whatever waits (a key, a repaint, a
source's read) before the next slice. Source events (open, end, link) travel in the same queue,
so the ledger sees everything in the order it arrived, which is the order it was recorded in:
a replay folds the same sequence.

Nothing is lost: `close` decodes and folds whatever is still queued (or being decoded) when the
session ends. The queue is bounded: a source whose lines arrive faster than they are folded
waits in `room` (a replay at full speed, a backlog of rank files), so memory stays bounded.
"""

import asyncio
import concurrent.futures
import time
from collections import deque

from trnwatch.collectors.decode import Decoded, decode
from trnwatch.collectors.lines import Line, SourceEvent
from trnwatch.ledger.ledger import Ledger

# Longest stretch of folding on the event loop before it runs other work (issue 10: no
# event-loop stall over 50 ms, keys answered within 100 ms).
FOLD_SLICE_S = 0.010
# Items queued (not yet folded) beyond which sources wait: ~2 refreshes of 1,152 promql lines.
MAX_QUEUED = 4096


def _decode_all(items: list[Line | SourceEvent]) -> list[Decoded | SourceEvent]:
    return [decode(item) if isinstance(item, Line) else item for item in items]


class Intake:
    """Decode on a worker thread, fold on the event loop in slices, in arrival order."""

    def __init__(self, ledger: Ledger, slice_s: float = FOLD_SLICE_S, max_queued: int = MAX_QUEUED):
        self.ledger = ledger
        self.slice_s = slice_s
        self.max_queued = max_queued
        self.slices = 0  # fold slices run (each followed by a turn of the event loop)
        self._arrived: list[Line | SourceEvent] = []  # not yet handed to the decoder
        self._decoded: deque[Decoded | SourceEvent] = deque()  # decoded, not yet folded
        self._in_flight: tuple[list[Line | SourceEvent], concurrent.futures.Future] | None = None
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._idle = asyncio.Event()  # nothing queued
        self._idle.set()
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="trnwatch-decode")

    def put(self, item: Line | SourceEvent) -> None:
        """Queue one item (already recorded); it is folded after everything queued before it."""
        self._arrived.append(item)
        self._wake.set()
        self._idle.clear()
        if self.queued >= self.max_queued:
            self._room.clear()

    @property
    def queued(self) -> int:
        in_flight = len(self._in_flight[0]) if self._in_flight is not None else 0
        return len(self._arrived) + in_flight + len(self._decoded)

    async def room(self) -> None:
        """Wait while the queue is full."""
        await self._room.wait()

    async def idle(self) -> None:
        """Wait until everything queued so far is folded."""
        await self._idle.wait()

    async def run(self) -> None:
        """Decode and fold until cancelled (then `close` folds what is left)."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._arrived:
                batch, self._arrived = self._arrived, []
                future = self._executor.submit(_decode_all, batch)
                self._in_flight = (batch, future)
                decoded = await asyncio.wrap_future(future)
                self._in_flight = None
                self._decoded.extend(decoded)
                await self._fold_in_slices()
            self._idle.set()

    async def _fold_in_slices(self) -> None:
        while self._decoded:
            self._fold_slice()
            if self.queued < self.max_queued:
                self._room.set()
            await asyncio.sleep(0)  # the event loop's turn: keys, repaints, sources

    def _fold_slice(self) -> None:
        deadline = time.perf_counter() + self.slice_s
        self.slices += 1
        while self._decoded:
            self._fold(self._decoded.popleft())
            if time.perf_counter() >= deadline:
                return

    def _fold(self, item: Decoded | SourceEvent) -> None:
        ledger = self.ledger
        if isinstance(item, Decoded):
            ledger.fold(item)
        elif item.event == "open":
            ledger.source(item.source_id, item.kind)
        elif item.event == "end":
            ledger.end_source(item.source_id, item.t_s, item.error)
        else:  # "connecting" / "down" of a remote source that reconnects (SSH, Prometheus)
            ledger.link_event(item)

    def close(self) -> None:
        """Fold everything still queued, in order (once `run` is cancelled), and stop the worker."""
        rest: list[Decoded | SourceEvent] = list(self._decoded)
        self._decoded.clear()
        if self._in_flight is not None:
            batch, future = self._in_flight
            self._in_flight = None
            rest += _decode_all(batch) if future.cancelled() else future.result()
        rest += _decode_all(self._arrived)
        self._arrived = []
        for item in rest:
            self._fold(item)
        self._executor.shutdown(wait=True)
        self._room.set()
        self._idle.set()
