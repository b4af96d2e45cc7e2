"""A monitoring session: sources -> (recording) -> decode -> ledger, until something says stop.

Every line is recorded raw as it arrives, then decoded and folded on the event loop in slices
(trnwatch/intake.py), in arrival order.

The session owns the exit paths. Whatever ends it (all sources at EOF, `--duration` reached,
Ctrl-C, SIGTERM, SIGHUP when an SSH connection drops, the screen quitting), the caller gets one
exit reason and writes one receipt. Headless mode and the TUI run the same session; the TUI
only adds a screen that reads the ledger.
"""

import asyncio
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trnwatch.alerts import Alerts
from trnwatch.collectors.lines import Carried, ClockMark, Line, ReadMark, SourceEvent
from trnwatch.collectors.recording import FLUSH_EVERY_S, Recorder
from trnwatch.collectors.streams import SourceLost
from trnwatch.exit_signals import catch_exit_signals
from trnwatch.intake import FOLD_SLICE_S, Intake
from trnwatch.ledger.findings import Finding
from trnwatch.ledger.incidents import Incident, IncidentLog
from trnwatch.ledger.lag import behind_words
from trnwatch.ledger.ledger import Ledger, SourceState
from trnwatch.ledger.receipt import (
    ExitReason,
    OutputFailure,
    OutputName,
    Receipt,
    RecordingEntry,
    ReplayEntry,
    build_receipt,
)
from trnwatch.ledger.receipt_markdown import render_markdown
from trnwatch.ledger.snapshot import session_now_s
from trnwatch.ledger.timeline_svg import render_timeline_svg
from trnwatch.output import OutputError, default_receipt_name, receipt_places, rewrite_own, write_new
from trnwatch.outside import clean
from trnwatch.source_spec import SourceSpec

if TYPE_CHECKING:
    from trnwatch.stacks import StackCapturer

# How often the session judges findings into incidents, on the clock of what it folded (each line's,
# source event's and clock mark's recorded time, trnwatch/intake.py `on_time`): a live session
# judges at the same moments as its replay at any speed, so both keep the same incidents.
INCIDENT_PERIOD_S = 1.0
# A tick this much later than its period says the event loop was not scheduled meanwhile.
PAUSED_AFTER_S = 1.0

SIGNAL_REASONS: dict[int, ExitReason] = {
    signal.SIGINT: "interrupt",
    signal.SIGTERM: "sigterm",
    signal.SIGHUP: "sighup",
}


class Session:
    """Runs sources into a ledger and decides when and why the session ends."""

    def __init__(
        self,
        ledger: Ledger,
        sources: list[SourceSpec],
        recorder: Recorder | None = None,
        duration_s: float | None = None,
        recorded_evidence=None,
        *,
        background: list[Callable[[], Coroutine[Any, Any, None]]] | None = None,
        replay: Callable[[], ReplayEntry] | None = None,
        receipt_path: Path | None = None,
        remote_sources: bool = False,
        fold_slice_s: float = FOLD_SLICE_S,
    ):
        self.ledger = ledger
        self.sources = sources
        self.recorder = recorder
        self.duration_s = duration_s
        self.claimed_recorded_evidence = recorded_evidence  # a replay: what the recording says it holds
        # Workloads that run beside the sources for the session's length (the demo's simulated job).
        self.background = list(background or [])
        # What a replay read (the receipt says it).
        self.replay = replay
        self.receipt_path = receipt_path  # where the receipt goes (None: the default folder)
        self.remote_sources = remote_sources  # SSH hosts or Prometheus endpoints: headless shows their links
        # Decodes and folds on the event loop for at most `fold_slice_s` at a go.
        self._intake = Intake(ledger, fold_slice_s, on_time=self._judge_at)
        # Every finding of the session as an incident (ledger/incidents.py), judged once per
        # INCIDENT_PERIOD_S whether or not a screen is shown; `on_incidents` hears of each change.
        self.incidents = IncidentLog()
        self.on_incidents: list[Callable[[list[Incident]], None]] = []
        self._observed_s: float | None = None
        # Alerts (trnwatch/alerts.py) and --exit-on: labels or severities that end the session.
        self.alerts: Alerts | None = None
        self.exit_on: frozenset[str] = frozenset()
        self.exit_on_incident: Incident | None = None  # the incident that ended the session
        self.started_s = time.time()
        self.exit_reason: ExitReason | None = None
        # Outputs that stopped (a snapshot folder that filled up, a receipt that had to move):
        # the receipt lists them; `receipt_notes` says to the user where the receipt went instead.
        self.output_failures: list[OutputFailure] = []
        self.receipt_notes: list[str] = []
        self.receipt_markdown: Path | None = None
        self._stop = asyncio.Event()
        # Where a message for people goes once (the screen replaces it with a notification).
        self.notice: Callable[[str], None] = _stderr_notice
        # Takes ranks' stacks with py-spy (`watch`, `record`: trnwatch/stacks.py); None: not here.
        self.stacks: StackCapturer | None = None

    def now_s(self) -> float:
        """The session's clock: the wall for live and simulated sessions, the data's for a replay."""
        return session_now_s(self.ledger, time.time(), self.ledger.job)

    def observe(self, now_s: float) -> list[Finding]:
        """Judge the findings at `now_s` into the incident log, tell `on_incidents` what changed,
        and return what the fault line shows: the open incidents' latest findings."""
        read = self.ledger.read(now_s)
        findings, diagnosis = list(read.findings), read.diagnosis
        verdict = diagnosis.verdict if diagnosis else None
        changed = self.incidents.update(findings, now_s, verdict)
        self._observed_s = now_s
        if changed:
            if self.alerts is not None:
                self.alerts.offer(changed, self.ledger.evidence, verdict)
            self._check_exit_on(changed)
            for listener in self.on_incidents:
                listener(changed)
        return self.incidents.open_findings()

    def _check_exit_on(self, changed: list[Incident]) -> None:
        for incident in changed:
            if incident.state != "open" or self.exit_on_incident is not None:
                continue
            if incident.label.lower() in self.exit_on or incident.severity in self.exit_on:
                self.exit_on_incident = incident
                self.stop("exit-on")
                if self.relayed_clock:
                    # A replay ends where the recorded session would have: what the recording
                    # holds after this moment stays in it, unfolded (a live session's queue
                    # holds what arrived, and is folded).
                    self._intake.halt()

    def _judge_at(self, t_s: float) -> None:
        """Judge at `t_s`, the time of the item just folded, once INCIDENT_PERIOD_S passed on that
        clock since the last judgement (or it stepped back). A live session's clock marks (one a
        second, `_tick`) keep it going while nothing arrives; a replay's are the recorded ones."""
        observed = self._observed_s
        if observed is None or t_s - observed >= INCIDENT_PERIOD_S or t_s < observed:
            self.observe(t_s)

    def stop(self, reason: ExitReason) -> None:
        """Ask the session to end; the first reason given is the one the receipt keeps."""
        if self.exit_reason is None:
            self.exit_reason = reason
        self._stop.set()

    def install_signal_handlers(self) -> Callable[[], None]:
        """SIGINT, SIGTERM and SIGHUP end the session cleanly (and so leave a receipt); returns
        what puts the previous handlers back (trnwatch/exit_signals.py)."""
        return catch_exit_signals(asyncio.get_running_loop(), lambda signum: self.stop(SIGNAL_REASONS[signum]))

    async def run(self) -> ExitReason:
        """Run until every source ends, the duration passes, or `stop` is called."""
        for spec in self.sources:
            if not spec.relay and not spec.companion:
                self.apply(SourceEvent(spec.source_id, spec.kind, time.time(), "open"))
        tasks = [asyncio.create_task(self._consume(spec)) for spec in self.sources]
        awaited = [task for task, spec in zip(tasks, self.sources, strict=True) if not spec.companion] or tasks
        helpers = [asyncio.create_task(self._intake.run()), asyncio.create_task(self._all_ended(awaited))]
        helpers += [asyncio.create_task(work()) for work in self.background]
        helpers.append(asyncio.create_task(self._tick()))
        if self.duration_s is not None:
            helpers.append(asyncio.create_task(self._deadline(self.duration_s)))
        try:
            await self._stop.wait()
        finally:
            ended_s = time.time()
            for task in tasks + helpers:
                task.cancel()
            await asyncio.gather(*tasks, *helpers, return_exceptions=True)
            self._drain()
            if not self.relayed_clock:
                # The session's end, as data: the receipt is judged at it, and a replay too.
                self.apply(ClockMark(ended_s, end=True))
            self._intake.close()  # what is still queued is folded: nothing collected is lost
            if self.recorder is not None:
                self.recorder.close()
                self._check_recording()
            try:
                ended = self.ledger.latest_s()  # the session's end, as the receipt judges it
                self.observe(ended if ended is not None else self.now_s())
            except Exception as exc:  # a defect in a rule must not cost the receipt
                self.notice(f"incidents not judged at the end: {type(exc).__name__}: {exc}")
        return self.exit_reason or "eof"

    def _drain(self) -> None:
        """The followers' last reads (what their files hold at the end, within their bound), folded
        as they are read so the queue stays bounded; their sources end after them."""
        for spec in self.sources:
            if spec.drain is None:
                continue
            try:
                for item in spec.drain():
                    self.apply(item)
                    if self._intake.full:
                        self._intake.fold_queued()
            except Exception as exc:  # a broken follower must not cost the receipt
                self.notice(f"{spec.source_id}: the last read failed: {type(exc).__name__}: {exc}")

    def _check_recording(self) -> None:
        """A recording write failed: mark it for the receipt and say so once; monitoring goes on."""
        rec = self.recorder
        if rec is not None and rec.error is not None:
            path = rec.files[-1] if rec.files else rec.target
            if self.output_failed("recording", path, rec.error):
                self.notice(
                    f"recording stopped: {path}: {rec.error}; monitoring goes on, "
                    "the receipt says where the recording ends"
                )

    def apply(self, item: Line | SourceEvent | ClockMark | ReadMark | Carried) -> None:
        """Record, then queue for folding, one item: a source's, or one the session made itself
        (a stack capture). A replay window's carried state was recorded before the window: it is
        not recorded again."""
        if self.recorder is not None and self.recorder.error is None and not isinstance(item, Carried):
            self.recorder.write(item)
            self._check_recording()
        self._intake.put(item)  # decoded and folded in slices, in order (trnwatch/intake.py)

    async def _consume(self, spec: SourceSpec) -> None:
        error = None
        try:
            async for item in spec.lines():
                self.apply(item)
                if (
                    isinstance(item, SourceEvent)
                    and item.event == "connecting"
                    and item.error
                    and not spec.recorded_clock
                ):
                    self.notice(f"{item.source_id}: {item.error}")  # a follower reading again after a shortage
                if self._intake.full:
                    if _cancelled():  # a follower's last reads after its cancel: the intake stopped
                        self._intake.fold_queued()
                    else:
                        # Lines arrive faster than they are folded. Awaited after the stop too, until
                        # the cancel comes: a poll of 18,432 files went on synchronously to its end
                        # (tens of seconds on a starved machine) instead of leaving its rest to the
                        # bounded drain.
                        await self._intake.room()
        except SourceLost as exc:
            error = str(exc)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a broken source must not take the session down with it
            error = f"{type(exc).__name__}: {exc}"
        if error is not None:  # said at once (stderr, or the screen's notification), not only in the receipt
            self.notice(f"{spec.source_id} lost: {error}")
        if not spec.relay and not spec.companion:
            self.apply(SourceEvent(spec.source_id, spec.kind, time.time(), "end", error))

    async def _all_ended(self, tasks: list[asyncio.Task]) -> None:
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._intake.idle()  # what the sources delivered is folded, still a slice at a time
        self.stop("eof")

    async def _deadline(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        self.stop("duration")

    async def _tick(self) -> None:
        """Every FLUSH_EVERY_S: the clock's progress as a mark (a live session's; a replay's
        clock comes from its recording), then the recording's frame is cut. A tick that comes
        PAUSED_AFTER_S late or more says how long the event loop was not scheduled (a SIGSTOP, a
        starved machine), and one made while the intake's queue is full says so: neither says the
        sources were read up to it (ledger/lag.py)."""
        before = time.monotonic()
        while True:
            await asyncio.sleep(FLUSH_EVERY_S)
            after = time.monotonic()
            late_s, before = after - before - FLUSH_EVERY_S, after
            if not self.relayed_clock:
                paused_s = round(late_s, 3) if late_s >= PAUSED_AFTER_S else 0.0
                self.apply(ClockMark(time.time(), paused_s=paused_s, held=self._intake.full))
            if self.recorder is not None:
                self.recorder.flush()
                self._check_recording()

    @property
    def relayed_clock(self) -> bool:
        """True when a replay carries the recorded session's clock marks (judged on them)."""
        return any(spec.recorded_clock for spec in self.sources)

    @property
    def recorded_evidence(self):
        """A replay's recorded evidence, corrected by the replayed data (Ledger.recorded_evidence)."""
        return self.ledger.recorded_evidence(self.claimed_recorded_evidence)

    @property
    def job(self):
        """The job scope's ledger (None until job telemetry arrives)."""
        return self.ledger.job

    def output_failed(self, output: OutputName, path: Path, error: str) -> bool:
        """Mark an output that stopped, for the receipt; False if it was marked already (the
        caller says so to the user only the first time)."""
        if any(f.output == output and f.path == str(path) for f in self.output_failures):
            return False
        self.output_failures.append(OutputFailure(output=output, path=str(path), error=error, at=time.time()))
        return True

    def receipt(self) -> Receipt:
        rec = self.recorder
        recording = (
            None
            if rec is None
            else RecordingEntry(
                path=str(rec.target),
                files=[str(p) for p in rec.files],
                frames=rec.frames,
                bytes=rec.bytes_written,
                error=rec.error,
                stopped_at=rec.stopped_at_s,
            )
        )
        replay = self.replay() if self.replay is not None else None
        return build_receipt(
            self.ledger,
            self.exit_reason or "error",
            self.recorded_evidence,
            written_at_s=time.time(),
            output_failures=self.output_failures,
            recording=recording,
            replay=replay,
            incidents=self.incidents,
            alerts=None if self.alerts is None else self.alerts.counted(),
        )

    def write_receipt(self, path: Path | None) -> Path:
        """Write the receipt (JSON + Markdown and its SVG timeline beside it) to `path`, or the
        default folder; when that cannot be written, to the default folder, then the current
        directory. Return the JSON path. The receipt is built once and rendered three ways; an
        output that fails on the way is added to its `output_failures` (the copy written next
        lists it).

        `receipt_notes` say what failed on the way (for the command line to print once the screen
        is gone), `receipt_markdown` where the Markdown went (None if it was not written). Raises
        `OutputError` when no place takes the receipt."""
        places = receipt_places(path, default_receipt_name(self.ledger.evidence, self.started_s))
        if self.alerts is not None:  # its `alerts` block says how each ended (docs/alerts.md)
            self.alerts.close()
        try:
            receipt = self.receipt()
        except Exception as exc:  # a defect must not hide that there is no receipt
            self.receipt_notes.append(f"the receipt could not be built: {type(exc).__name__}: {exc}")
            raise OutputError(self.receipt_notes[-1]) from exc
        for json_path in places:
            try:
                write_new(json_path, receipt.to_json())
            except OutputError as exc:
                self.receipt_notes.append(f"receipt not written to {json_path}: {exc}")
                receipt = self._failed(receipt, "receipt", json_path, str(exc))
                continue
            self.receipt_markdown = self._write_markdown(json_path, receipt)
            return json_path
        self.receipt_notes.append("the receipt could not be written anywhere")
        raise OutputError("; ".join(self.receipt_notes))

    def _failed(self, receipt: Receipt, output: OutputName, path: Path, error: str) -> Receipt:
        """Mark an output that failed while the receipt was written; the receipt, listing it."""
        self.output_failed(output, path, error)
        return receipt.model_copy(update={"output_failures": list(self.output_failures)})

    def _write_svg(self, json_path: Path, receipt: Receipt) -> tuple[str | None, Receipt]:
        """The receipt's timeline picture beside it; its file name for the Markdown's link (None
        if not written), and the receipt (listing the failure, if any)."""
        svg_path = json_path.with_suffix(".svg")
        try:
            write_new(svg_path, render_timeline_svg(receipt))
            return svg_path.name, receipt
        except OutputError as exc:
            error = str(exc)
        except Exception as exc:  # a drawing defect must not cost the Markdown
            error = f"cannot draw the timeline: {type(exc).__name__}: {exc}"
        self.receipt_notes.append(f"receipt timeline SVG not written: {error}")
        return None, self._failed(receipt, "receipt-svg", svg_path, error)

    def _write_markdown(self, json_path: Path, receipt: Receipt) -> Path | None:
        markdown_path = json_path.with_suffix(".md")
        written = receipt  # as the JSON has it
        svg_name, receipt = self._write_svg(json_path, receipt)
        try:
            write_new(markdown_path, render_markdown(receipt, svg_name))
            failed = None
        except OutputError as exc:
            failed = str(exc)
        except Exception as exc:  # a rendering defect must not hide that the Markdown is missing
            failed = f"cannot render the Markdown: {type(exc).__name__}: {exc}"
        if failed is not None:
            self.receipt_notes.append(f"receipt Markdown not written: {failed} (the JSON is complete)")
            receipt = self._failed(receipt, "receipt-markdown", markdown_path, failed)
        if receipt is not written:
            try:  # the JSON says what failed beside it; if even that fails, the JSON written before stays whole
                rewrite_own(json_path, receipt.to_json())
            except OutputError:
                pass
        return None if failed is not None else markdown_path


def _cancelled() -> bool:
    """Whether the running task has been asked to cancel (Task.cancelling, Python 3.11)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _stderr_notice(text: str) -> None:
    try:
        print(f"trnwatch: {clean(text)}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


async def progress_lines(session: Session, every_s: float, out=sys.stderr) -> None:
    """Headless progress: one line every `every_s` seconds, so a long run never looks hung."""
    while True:
        await asyncio.sleep(every_s)
        ledger = session.ledger
        now = time.time()
        reports = sum(s.reports for s in ledger.sources.values())
        rejected = sum(sum(s.rejected.values()) for s in ledger.sources.values())
        read = ledger.read(session_now_s(ledger, now, ledger.job))  # a replay's own clock, else the wall
        fresh = sum(1 for state in read.freshness.values() if state == "fresh")
        diagnosis = read.diagnosis  # the job's verdict too, when job telemetry is read
        job = f", job {diagnosis.verdict}" if diagnosis is not None else ""
        behind = "".join(f"; {behind_words(source_id, s)}" for source_id, s in read.behind.items())
        print(
            f"trnwatch: {now - session.started_s:.0f} s, {fresh}/{len(ledger.hosts)} hosts reporting, "
            f"{reports} lines folded, {rejected} rejected{job}{behind}",
            file=out,
            flush=True,
        )


async def link_progress_lines(session: Session, every_s: float = 0.5, out=sys.stderr) -> None:
    """Headless progress of remote sources (SSH hosts, Prometheus endpoints): a line whenever
    how many are up changes ("12 of 36 up, 24 connecting"), and one per source that goes down,
    with its error, or comes back."""
    last_summary = None
    last_states: dict[str, SourceState] = {}
    while True:
        await asyncio.sleep(every_s)
        ledger = session.ledger
        states = ledger.source_states(time.time())
        for source_id, state in states.items():
            before = last_states.get(source_id)
            stats = ledger.sources[source_id]
            if state == "lost" and before != "lost" and not stats.ended_s:  # an ended one: the session said it
                error = stats.link_error or "no message"
                print(
                    clean(f"trnwatch: {source_id} lost: {error}; will retry"),
                    file=out,
                    flush=True,
                )
            elif state == "connected" and before in ("lost", "reconnecting", "stale"):
                print(clean(f"trnwatch: {source_id} up again"), file=out, flush=True)
        last_states = states
        counts = Counter(states.values())
        up = counts.pop("connected", 0)
        summary = f"{up} of {len(states)} up" + "".join(f", {n} {state}" for state, n in sorted(counts.items()))
        if summary != last_summary:
            print(f"trnwatch: {summary}", file=out, flush=True)
            last_summary = summary
