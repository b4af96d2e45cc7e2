"""A monitoring session: sources -> (recording) -> ledger, until something says stop.

The session owns the exit paths. Whatever ends it (all sources at EOF, `--duration` reached,
Ctrl-C, SIGTERM, SIGHUP when an SSH connection drops, the screen quitting), the caller gets one
exit reason and writes one receipt. Headless mode and the TUI run the same session; the TUI
only adds a screen that reads the ledger.
"""

import asyncio
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

from trnwatch.collectors.lines import Line, SourceEvent
from trnwatch.collectors.recording import FLUSH_EVERY_S, Recorder
from trnwatch.collectors.streams import SourceLost
from trnwatch.ledger.ledger import Ledger
from trnwatch.ledger.receipt import ExitReason, Receipt, build_receipt, default_receipt_path, write_receipt

SIGNAL_REASONS: dict[int, ExitReason] = {
    signal.SIGINT: "interrupt",
    signal.SIGTERM: "sigterm",
    signal.SIGHUP: "sighup",
}


@dataclass(frozen=True)
class SourceSpec:
    """A source to run: its id, its parser kind, and a factory for its line stream.

    A relay (a replay) carries other sources' recorded lines and open/end events: it is not
    itself registered in the ledger, so a replayed receipt lists exactly the recorded sources.
    """

    source_id: str
    kind: str
    lines: Callable[[], AsyncIterator[Line | SourceEvent]]
    relay: bool = False


class Session:
    """Runs sources into a ledger and decides when and why the session ends."""

    def __init__(
        self,
        ledger: Ledger,
        sources: list[SourceSpec],
        recorder: Recorder | None = None,
        duration_s: float | None = None,
        recorded_evidence=None,
    ):
        self.ledger = ledger
        self.sources = sources
        self.recorder = recorder
        self.duration_s = duration_s
        self.recorded_evidence = recorded_evidence
        self.started_s = time.time()
        self.exit_reason: ExitReason | None = None
        self._stop = asyncio.Event()

    def stop(self, reason: ExitReason) -> None:
        """Ask the session to end; the first reason given is the one the receipt keeps."""
        if self.exit_reason is None:
            self.exit_reason = reason
        self._stop.set()

    def install_signal_handlers(self) -> None:
        """SIGINT, SIGTERM and SIGHUP end the session cleanly (and so leave a receipt)."""
        loop = asyncio.get_running_loop()
        for signum, reason in SIGNAL_REASONS.items():
            loop.add_signal_handler(signum, self.stop, reason)

    async def run(self) -> ExitReason:
        """Run until every source ends, the duration passes, or `stop` is called."""
        for spec in self.sources:
            if not spec.relay:
                self._apply(SourceEvent(spec.source_id, spec.kind, time.time(), "open"))
        tasks = [asyncio.create_task(self._consume(spec)) for spec in self.sources]
        helpers = [asyncio.create_task(self._all_ended(tasks))]
        if self.recorder is not None:
            helpers.append(asyncio.create_task(self._flush_recording()))
        if self.duration_s is not None:
            helpers.append(asyncio.create_task(self._deadline(self.duration_s)))
        try:
            await self._stop.wait()
        finally:
            for task in tasks + helpers:
                task.cancel()
            await asyncio.gather(*tasks, *helpers, return_exceptions=True)
            if self.recorder is not None:
                self.recorder.close()
        return self.exit_reason or "eof"

    def _apply(self, item: Line | SourceEvent) -> None:
        if self.recorder is not None:
            self.recorder.write(item)
        if isinstance(item, Line):
            self.ledger.ingest(item)
        elif item.event == "open":
            self.ledger.source(item.source_id, item.kind)
        else:
            self.ledger.end_source(item.source_id, item.t_s, item.error)

    async def _consume(self, spec: SourceSpec) -> None:
        error = None
        try:
            async for item in spec.lines():
                self._apply(item)
        except SourceLost as exc:
            error = str(exc)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a broken source must not take the session down with it
            error = f"{type(exc).__name__}: {exc}"
        if not spec.relay:
            self._apply(SourceEvent(spec.source_id, spec.kind, time.time(), "end", error))

    async def _all_ended(self, tasks: list[asyncio.Task]) -> None:
        await asyncio.gather(*tasks, return_exceptions=True)
        self.stop("eof")

    async def _deadline(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        self.stop("duration")

    async def _flush_recording(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_EVERY_S)
            self.recorder.flush()

    def receipt(self, job: dict | None = None) -> Receipt:
        return build_receipt(self.ledger, self.exit_reason or "error", self.recorded_evidence, job)

    def write_receipt(self, path: Path | None) -> Path:
        """Write the receipt (JSON + Markdown) to `path` or the default folder; return the path."""
        receipt = self.receipt()
        return write_receipt(receipt, path or default_receipt_path(receipt.evidence, self.started_s))


async def progress_lines(session: Session, every_s: float, out=sys.stderr) -> None:
    """Headless progress: one line every `every_s` seconds, so a long run never looks hung."""
    while True:
        await asyncio.sleep(every_s)
        ledger = session.ledger
        now = time.time()
        reports = sum(s.reports for s in ledger.sources.values())
        rejected = sum(sum(s.rejected.values()) for s in ledger.sources.values())
        fresh = sum(1 for h in ledger.hosts.values() if ledger.host_fresh(h, now))
        print(f"trnwatch: {now - session.started_s:.0f} s, {fresh}/{len(ledger.hosts)} hosts reporting, "
              f"{reports} reports, {rejected} rejected lines", file=out, flush=True)
