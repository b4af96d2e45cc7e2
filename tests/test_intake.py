"""The intake (trnwatch/intake.py): lines are decoded and folded on the event loop in slices;
the loop runs between slices, nothing is lost at the end, the ledger sees every line and source
event in the order they arrived (the order they are recorded in), and long-lived state is kept
out of the garbage collector's walk."""

import asyncio
import gc
import threading

from trnwatch.collectors.decode import Decoded, decode
from trnwatch.collectors.lines import Line, SourceEvent
from trnwatch.collectors.prometheus_sources import host_lines
from trnwatch.intake import Intake
from trnwatch.ledger.ledger import Ledger
from trnwatch.session import Session, SourceSpec
from tests.reports import line as report_line
from tests.reports import report
from tests.test_prometheus import _refresh_answers


class OrderLedger(Ledger):
    """A real ledger that also notes what it folded, in order, and on which thread."""

    def __init__(self):
        super().__init__("live")
        self.folded: list[tuple[str, float]] = []
        self.threads: set[int] = set()

    def fold(self, decoded: Decoded) -> None:
        self.folded.append((decoded.source_id, decoded.received_s))
        self.threads.add(threading.get_ident())
        super().fold(decoded)


TEXT = report_line(report([]))


def _lines(n: int, sources: int = 3) -> list[Line]:
    return [Line(f"h{i % sources}", "neuron-monitor", 1000.0 + i, TEXT if i % 7 else "{bad") for i in range(n)]


def test_the_loop_runs_between_fold_slices_and_everything_is_folded_in_order():
    lines = _lines(60)
    ledger = OrderLedger()
    seen: list[int] = []

    async def burst():  # everything at once, as one refresh of a Prometheus server arrives
        for line in lines:
            yield line

    async def main():
        session = Session(ledger, [SourceSpec("relay", "neuron-monitor", burst, relay=True)], fold_slice_s=0.0)
        done = asyncio.Event()

        async def watch():  # another task on the loop: it runs between slices
            while not done.is_set():
                seen.append(len(ledger.folded))
                await asyncio.sleep(0)

        watcher = asyncio.create_task(watch())
        await session.run()
        done.set()
        await watcher

    asyncio.run(main())
    assert ledger.folded == [(line.source_id, line.received_s) for line in lines]  # all of them, in order
    assert ledger.threads == {threading.main_thread().ident}  # folded on the event loop's thread
    # The watcher saw the fold advance a slice at a time (a zero budget: one line per slice).
    progress = sorted(set(seen))
    assert len([n for n in progress if 0 < n < len(lines)]) >= len(lines) // 2, progress
    assert seen == sorted(seen)
    assert sum(s.reports for s in ledger.sources.values()) == len([t for t in lines if t.text == TEXT])
    assert sum(sum(s.rejected.values()) for s in ledger.sources.values()) == len([t for t in lines if t.text != TEXT])


def test_a_full_queue_holds_the_source_back_and_loses_nothing():
    lines = _lines(200)
    ledger = OrderLedger()
    high_water: list[int] = []

    async def main():
        session = Session(
            ledger, [SourceSpec("relay", "neuron-monitor", lambda: burst(session), relay=True)], fold_slice_s=0.0
        )
        session._intake.max_queued = 10
        await session.run()

    async def burst(session):
        for line in lines:
            high_water.append(session._intake.queued)
            yield line

    asyncio.run(main())
    assert ledger.folded == [(line.source_id, line.received_s) for line in lines]
    assert max(high_water) <= 10  # the source waited for room instead of queueing all 200


def test_closing_folds_what_is_queued_in_order():
    ledger = OrderLedger()
    events = [SourceEvent("h0", "neuron-monitor", 999.0, "open"), SourceEvent("h1", "neuron-monitor", 999.0, "open")]
    lines = _lines(300, sources=2)
    end = SourceEvent("h1", "neuron-monitor", 2000.0, "end", "lost")

    async def main():
        intake = Intake(ledger, slice_s=0.0)
        runner = asyncio.create_task(intake.run())
        for item in [*events, *lines[:150]]:
            intake.put(item)
        while not ledger.folded:  # folding under way
            await asyncio.sleep(0)
        for item in [*lines[150:], end]:
            intake.put(item)
        runner.cancel()  # the session ends mid-fold, with a batch queued behind
        await asyncio.gather(runner, return_exceptions=True)
        assert len(ledger.folded) < len(lines)
        intake.close()

    asyncio.run(main())
    assert ledger.folded == [(line.source_id, line.received_s) for line in lines]
    assert set(ledger.sources) == {"h0", "h1"}
    assert ledger.sources["h1"].end_error == "lost" and ledger.sources["h0"].ended_s is None


def _promql_lines() -> list[Line]:
    return [
        Line("http://prom:9090", "promql", 1000.0 + k, text)
        for k in range(3)
        for text in host_lines(_refresh_answers(), 15.0, 1000.0 + k)
    ]


def test_folding_makes_no_reference_cycles_so_frozen_ledger_state_is_freed_when_replaced():
    # The intake freezes long-lived state out of the collector's walk (gc.freeze): that is sound
    # only if what the ledger later drops is freed by reference counting, with no cycle left.
    ledger = Ledger("live")
    lines = [*_promql_lines(), *_lines(30)]
    gc.collect()
    gc.disable()
    try:
        for line in lines:
            ledger.fold(decode(line))
        assert gc.collect() == 0  # nothing unreachable: no cycles made by decoding and folding
    finally:
        gc.enable()
    assert len(ledger.hosts) == 4 and ledger.sources["http://prom:9090"].reports == 9


def test_the_intake_freezes_state_while_hosts_appear_collects_each_slice_and_unfreezes_at_the_end():
    lines = _promql_lines()
    ledger = OrderLedger()
    collections: list[int] = []
    frozen_during: list[int] = []

    def note(phase: str, info: dict) -> None:
        if phase == "start":
            collections.append(info["generation"])
            frozen_during.append(gc.get_freeze_count())

    async def burst():
        for line in lines:
            yield line

    async def main():
        session = Session(ledger, [SourceSpec("relay", "promql", burst, relay=True)], fold_slice_s=0.0)
        await session.run()
        return session._intake

    gc.unfreeze()
    gc.callbacks.append(note)
    try:
        intake = asyncio.run(main())
    finally:
        gc.callbacks.remove(note)
    assert len(ledger.folded) == len(lines)
    assert max(frozen_during) > 0  # long-lived state frozen while the session folded
    assert intake.freezes >= 2  # at the start, and once the hosts had appeared
    assert gc.get_freeze_count() == 0  # collectable again once the session is over
    assert collections.count(0) + collections.count(1) >= intake.slices  # a young collection per slice


def test_full_collections_run_between_slices_and_the_collector_gets_its_thresholds_back(monkeypatch):
    # CPython starts no full collection of its own while the intake runs (one inside a fold or
    # a Prometheus answer's split would stall the loop): the intake runs them between two slices.
    # Here one is due after every collection of the middle generation.
    monkeypatch.setattr("trnwatch.intake.OLDER_PER_FULL", 1)
    lines = _lines(60, sources=2) * 3
    ledger = OrderLedger()
    full_inside: list[str] = []
    intakes: list[Intake] = []

    class NotingIntake(Intake):
        running = collecting = False

        async def run(self) -> None:
            self.running = True
            await super().run()

        def close(self) -> None:
            super().close()
            self.running = False

        def _collect(self) -> None:
            self.collecting = True
            super()._collect()
            self.collecting = False

    def note(phase: str, info: dict) -> None:
        intake = intakes[0] if intakes else None
        if phase == "start" and info["generation"] == 2 and intake and intake.running and not intake.collecting:
            full_inside.append(f"a full collection outside the intake's, {intake.queued} queued")

    async def arriving():
        for line in lines:
            yield line

    async def main():
        session = Session(ledger, [SourceSpec("relay", "neuron-monitor", arriving, relay=True)], fold_slice_s=0.0)
        session._intake = NotingIntake(ledger, 0.0)
        intakes.append(session._intake)
        await session.run()

    thresholds = gc.get_threshold()
    gc.set_threshold(10, 1, 0)  # the collector on its own would collect everything at every chance
    gc.callbacks.append(note)
    try:
        asyncio.run(main())
    finally:
        gc.callbacks.remove(note)
        restored = gc.get_threshold()
        gc.set_threshold(*thresholds)
    assert len(ledger.folded) == len(lines)
    assert intakes[0].full_collections >= 1
    assert full_inside == []
    assert restored == (10, 1, 0)
