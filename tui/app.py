"""The trnwatch screen: a Textual app reading the ledger that a session fills.

`run_app` runs a `Session` inside the app's event loop: the session's sources are asyncio tasks
(they never block the loop; stdin is read in a thread), and one timer repaints the active view
from the ledger every `refresh_s`. Whatever ends the session (q, ctrl+c, SIGTERM, SIGHUP, a lost
terminal, `--duration`) goes through `Session.stop(reason)`; the task that ran the session then
writes the receipt, before the screen is torn down, and exits the app. When every source
reaches EOF the screen stays up (the receipt is already written) until the user quits.

The app itself only needs a ledger, so tests build it from a ledger filled at fixed times and
a fixed clock (`TrnwatchApp(ledger, clock=lambda: t)`), with no session at all.
"""

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from rich.text import Text
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import ContentSwitcher, Footer

from trnwatch.ledger.job import JobLedger
from trnwatch.ledger.ledger import Evidence, Ledger
from trnwatch.ledger.receipt import ExitReason
from trnwatch.ledger.snapshot import build_snapshot, session_now_s
from trnwatch.output import OutputError
from trnwatch.session import SIGNAL_REASONS, Session
from trnwatch.themes import THEME_NAMES, default_theme, next_theme
from trnwatch.themes.palettes import CSS_PATH, PALETTES, TEXTUAL_THEMES
from trnwatch.tui import units
from trnwatch.tui.chip_view import ChipView
from trnwatch.tui.cluster_view import ClusterView
from trnwatch.tui.export import DEFAULT_SNAPSHOT_DIR, write_snapshot
from trnwatch.tui.host_view import HostView
from trnwatch.tui.job_view import JobView
from trnwatch.tui.scope import SCOPES, Frame, ScopeView, Selection, outside, styled
from trnwatch.tui.screens import KEYMAP, HelpScreen, JumpScreen
from trnwatch.tui.terminal import TrnwatchDriver, require_terminal
from trnwatch.tui.text import clip
from trnwatch.tui.ultraserver_view import UltraServerView
from trnwatch.tui.view_models import (
    FILTERS, NO_GROUP, SORTS, group_hosts, groups, host_rows, resolve_target, sources_model,
)
from trnwatch.tui.widgets import TextLines

# Source states other than connected, with the style the status line counts them in, and the
# order in which one source's trouble is named beside the counts.
STATE_ROLES = (("stale", "warn"), ("lost", "bad"), ("reconnecting", "warn"), ("connecting", "dim"),
               ("waiting", "dim"), ("ended", "dim"))
WORST_FIRST = ("lost", "reconnecting", "stale", "connecting", "waiting")
BADGES = {"live": ("LIVE", "badge-live"), "simulated": ("SIMULATED", "badge-sim"), "replayed": ("REPLAY", "badge-replay")}


class TrnwatchApp(App[None]):
    """Scoped views of one ledger: cluster, UltraServer, host, chip, job."""

    CSS_PATH = str(CSS_PATH)
    TITLE = "trnwatch"
    BINDINGS = [
        *(Binding(keys, action, label, show=bool(label)) for keys, action, label, _ in KEYMAP if action),
        Binding("ctrl+c", "interrupt", show=False, priority=True),
        Binding("up", "move(0, -1)", show=False),
        Binding("down", "move(0, 1)", show=False),
        Binding("left", "move(-1, 0)", show=False),
        Binding("right", "move(1, 0)", show=False),
        Binding("left_square_bracket", "step(-1)", show=False),
        Binding("right_square_bracket", "step(1)", show=False),
    ]

    def __init__(
        self,
        ledger: Ledger,
        *,
        session: Session | None = None,
        clock: Callable[[], float] = time.time,
        refresh_s: float = 1.0,
        theme: str | None = None,
        snapshot_dir: Path | None = None,
        receipt_path: Path | None = None,
        recorded_evidence: Evidence | None = None,
        driver_class=None,
    ):
        super().__init__(driver_class=driver_class)
        self.ledger = ledger
        self.session = session
        self.clock = clock
        self.refresh_s = refresh_s
        self.theme_name = default_theme(theme)
        self.snapshot_dir = snapshot_dir or DEFAULT_SNAPSHOT_DIR
        self.receipt_path = receipt_path
        self.recorded_evidence = recorded_evidence
        self.selection = Selection()
        self.paused = False
        self.receipt: Path | None = None
        self.receipt_error: str | None = None
        self.last_export: tuple[Path, Path] | None = None
        self._session_done = False
        self._session_task: asyncio.Task | None = None

    @property
    def job(self) -> JobLedger | None:
        """The job scope: the ledger's, from the first job telemetry line on (None: not connected)."""
        return self.ledger.job

    # --- layout and refresh ---------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        # The clock ticks every second: in its own widget, it costs its own cells only.
        with Horizontal(id="header"):
            yield TextLines(id="scope-line")
            yield TextLines(id="clock-line")
        yield TextLines(id="status")
        with ContentSwitcher(initial="ultraserver"):
            yield ClusterView(id="cluster")
            yield UltraServerView(id="ultraserver")
            yield HostView(id="host")
            yield ChipView(id="chip")
            yield JobView(id="job")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        for theme in TEXTUAL_THEMES.values():
            self.register_theme(theme)
        self.theme = TEXTUAL_THEMES[self.theme_name].name
        self.set_interval(self.refresh_s, self._tick)
        self.call_after_refresh(self.render_now)
        if self.session is not None:
            # A message the session has for people (a recording that stopped) goes on the screen.
            self.session.notice = lambda text: self.notify(text, severity="error", markup=False, timeout=30)
            self._session_task = asyncio.create_task(self._run_session())

    def on_resize(self) -> None:
        self.call_after_refresh(self.render_now)

    @property
    def view(self) -> ScopeView:
        return self.query_one(f"#{self.selection.scope}", ScopeView)

    def now_s(self) -> float:
        return session_now_s(self.ledger, self.clock(), self.job)

    def _tick(self) -> None:
        # Paused, or a modal (help, jump) on top: nothing to repaint, nothing sent.
        if self.is_running and not self.paused and len(self.screen_stack) == 1:
            self.render_now()

    def render_now(self, selection_only: bool = False) -> None:
        """Repaint header, status and the active view from the ledger (only changed cells go out);
        `selection_only`: a key only moved the selection (see `Frame.selection_only`).

        Nothing once the app is shutting down: Textual removes the widgets before it stops the
        app's timers, so a refresh (or a late resize) that fires in between would find a view
        without its lines (`NoMatches`) and crash the screen on its way out."""
        if not self.is_running:
            return
        view = self.view
        frame = Frame(self.ledger, self.job, self.now_s(), PALETTES[self.theme_name], self.selection,
                      view.size.width or self.size.width, selection_only)
        with self.batch_update():
            view.show(frame)
            clock = self._clock(frame)
            self.query_one("#clock-line", TextLines).set_lines([clock])
            self.query_one("#scope-line", TextLines).set_lines([self._scope_line(frame, view, clock.cell_len)])
            self.query_one("#status", TextLines).set_lines([self._status(frame)])

    def _clock(self, frame: Frame) -> Text:
        """The session clock, evidence badge, PAUSED: the right end of the header. The clock
        comes first because it changes every second and a change costs the cells before it."""
        pal = frame.palette
        label, role = BADGES[self.ledger.evidence]
        if self.recorded_evidence and self.ledger.evidence == "replayed":
            label += f" of {self.recorded_evidence.upper()}"
        clock = styled((units.clock_utc(frame.now_s), pal["text"]), " ", (f" {label} ", pal[role]), " ")
        if self.paused:
            clock.append(" PAUSED ", pal["badge-paused"])
            clock.append(" ")
        return clock

    def _scope_line(self, frame: Frame, view: ScopeView, clock_cols: int) -> Text:
        """The scope shown and its boundary: the left of the header, cut to leave the clock room."""
        line = styled(" ") + view.subject(frame)
        room = max(0, frame.width - clock_cols)
        if line.cell_len > room:
            line.truncate(room, overflow="ellipsis")
        return line

    def _status(self, frame: Frame) -> Text:
        pal = frame.palette
        m = sources_model(self.ledger, frame.now_s)
        n = len(m.sources)
        parts: list = [(f" {n} source{'s' if n != 1 else ''}: ", pal["label"]),
                       (f"{m.count('connected')} connected", pal["ok"] if m.count("connected") else pal["text"])]
        for state, role in STATE_ROLES:
            count = m.count(state)
            if count or state in ("stale", "lost"):
                parts.append((f" · {count} {state}", pal[role] if count else pal["text"]))
        parts.append((f" · {m.rejected} rejected", pal["warn"] if m.rejected else pal["text"]))
        worst = next((s for state in WORST_FIRST for s in m.sources if s.state == state), None)
        if worst is not None:
            detail = worst.error if worst.state == "lost" else (
                f"{units.age(worst.age_s)} since last line" if worst.age_s is not None else "no line yet")
            parts += [("  ", None), outside(worst.source_id, 20, pal["warn"]), (f" {worst.state}: ", pal["warn"]),
                      outside(detail or "", 40, pal["warn"])]
        elif m.rejected:
            noisy = max(m.sources, key=lambda s: s.rejected)
            parts += [("  ", None), outside(noisy.source_id, 20, pal["warn"]), (f" {noisy.rejected} rejected: ", pal["warn"]),
                      outside(noisy.last_rejection, 40, pal["warn"])]
        if self._session_done:
            parts.append(("  session ended (", pal["warn"]))
            parts.append((self.session.exit_reason or "", pal["warn"]))
            parts.append(("): receipt written, q quits", pal["warn"]))
        return styled(*parts)

    # --- the session ----------------------------------------------------------------------------

    async def _run_session(self) -> None:
        try:
            reason = await self.session.run()
        finally:
            self._session_done = True
        try:
            self.receipt = await asyncio.to_thread(self.session.write_receipt, self.receipt_path)
        except Exception as exc:  # the screen must still close; run_app reports the error
            self.receipt_error = f"{type(exc).__name__}: {exc}"
        if reason == "eof":
            self.render_now()
            self.notify(f"Every source ended. Receipt: {self.receipt or self.receipt_error}. q quits.",
                        title="Session ended", markup=False, timeout=30)
            return
        self.exit()

    def request_exit(self, reason: ExitReason) -> None:
        """End the session for `reason` (its task writes the receipt, then exits the app), or
        exit at once if the session already ended or there is none."""
        if self.session is None or self._session_done:
            self.exit()
        else:
            self.session.stop(reason)

    def terminal_lost(self) -> None:
        """Called by the driver when the terminal has gone away."""
        self.request_exit("terminal-lost")

    async def action_quit(self) -> None:
        self.request_exit("quit")

    def action_interrupt(self) -> None:
        self.request_exit("interrupt")

    # --- navigation -----------------------------------------------------------------------------

    def action_scope(self, scope: str) -> None:
        if scope not in SCOPES:
            return
        self.selection.scope = scope
        self.query_one(ContentSwitcher).current = scope
        self.render_now()

    def open_chip(self, host_id: str, chip: int) -> None:
        """Drill down to one chip (from a grid cell, a host's chip line, or a jump)."""
        self.selection.host_id, self.selection.chip = host_id, chip
        self.action_scope("chip")

    def open_ultraserver(self, group: str) -> None:
        """Drill down from the cluster to one UltraServer (or to the hosts in none)."""
        if group not in groups(self.ledger):
            self.notify(f"No host of {clip(group, 40)} has reported yet.", severity="warning", markup=False)
            return
        self.selection.group, self.selection.host_id = group, None
        self.action_scope("ultraserver")

    def action_drill(self) -> None:
        if self.selection.scope == "cluster" and self.selection.group is not None:
            self.open_ultraserver(self.selection.group)
        elif self.selection.scope in ("ultraserver", "host") and self.selection.host_id is not None:
            self.action_scope("chip")

    def action_up(self) -> None:
        parent = {"chip": "host", "host": "ultraserver", "ultraserver": "cluster", "job": "ultraserver"}.get(
            self.selection.scope)
        if parent:
            self.action_scope(parent)

    def action_move(self, dx: int, dy: int) -> None:
        sel = self.selection
        view = self.view
        if sel.scope == "ultraserver":
            view.move(sel, dx, dy)
        elif sel.scope == "cluster" and dy:
            view.move(sel, dy)
        elif sel.scope == "host" and dy and sel.host_id in self.ledger.hosts:
            chips = len(self.ledger.hosts[sel.host_id].chips)
            sel.chip = max(0, min(chips - 1, sel.chip + dy))
        else:
            view.query_one(".detail", TextLines).scroll_relative(x=dx * 4, y=dy, animate=False)
            return
        self.render_now(selection_only=sel.scope == "cluster")

    def action_step(self, delta: int) -> None:
        """Previous / next of the current scope: UltraServer row, UltraServer, host (by number) or chip."""
        sel = self.selection
        if sel.scope == "cluster":
            self.view.move(sel, delta)
        elif sel.scope == "ultraserver":
            ids = groups(self.ledger)
            if ids:
                sel.group = ids[(ids.index(sel.group) + delta) % len(ids) if sel.group in ids else 0]
                sel.host_id = None
        elif sel.scope in ("host", "chip") and sel.host_id in self.ledger.hosts:
            group = self.ledger.ultraserver_of(self.ledger.hosts[sel.host_id]) or NO_GROUP
            ordered = [r.host_id for r in host_rows(self.ledger, group_hosts(self.ledger, group), 0.0)]
            here = ordered.index(sel.host_id)
            if sel.scope == "host":
                sel.host_id, sel.chip = ordered[(here + delta) % len(ordered)], 0
            else:
                chip = sel.chip + delta
                chips = len(self.ledger.hosts[sel.host_id].chips)
                if 0 <= chip < chips:
                    sel.chip = chip
                else:
                    sel.host_id = ordered[(here + delta) % len(ordered)]
                    sel.chip = 0 if delta > 0 else max(0, len(self.ledger.hosts[sel.host_id].chips) - 1)
        self.render_now(selection_only=sel.scope == "cluster")

    def action_sort(self) -> None:
        self.selection.sort = SORTS[(SORTS.index(self.selection.sort) + 1) % len(SORTS)]
        self.render_now()

    def action_filter(self) -> None:
        self.selection.filter = FILTERS[(FILTERS.index(self.selection.filter) + 1) % len(FILTERS)]
        self.render_now()

    def action_pause(self) -> None:
        self.paused = not self.paused
        self.render_now()

    def action_theme(self) -> None:
        self.set_theme(next_theme(self.theme_name))

    def set_theme(self, name: str) -> None:
        self.theme_name = name
        self.theme = TEXTUAL_THEMES[name].name
        self.render_now()

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_jump(self) -> None:
        self.push_screen(JumpScreen(), self._jump_to)

    def _jump_to(self, text: str | None) -> None:
        if not text:
            return
        target = resolve_target(self.ledger, self.selection.group, text)
        if target is None:
            self.notify(f"No host or chip matches {clip(text, 40)!r}.", severity="warning", markup=False)
            return
        host_id, chip = target
        self.selection.host_id, self.selection.chip = host_id, chip or 0
        self.selection.group = self.ledger.ultraserver_of(self.ledger.hosts[host_id]) or NO_GROUP
        self.action_scope("chip" if chip is not None else "host")

    def action_export(self) -> tuple[Path, Path] | None:
        """Write an SVG of the screen as it is and a JSON snapshot of every scope. A folder that
        cannot take them stops only the export: said on screen, marked in the receipt."""
        now_s = self.now_s()
        snapshot = build_snapshot(self.ledger, now_s, self.ledger.job_summary(now_s), self.recorded_evidence,
                                  written_at_s=time.time())
        svg = self.export_screenshot(title=f"trnwatch {self.selection.scope}")
        try:
            self.last_export = write_snapshot(self.snapshot_dir, now_s, self.selection.scope, svg, snapshot)
        except OutputError as exc:
            if self.session is not None:
                self.session.output_failed("snapshot", self.snapshot_dir, str(exc))
            self.notify(str(exc), title="Snapshot not written", severity="error", markup=False)
            return None
        self.notify(f"{self.last_export[0]}\n{self.last_export[1]}", title="Snapshot written", markup=False)
        return self.last_export

    def get_system_commands(self, screen) -> list[SystemCommand]:
        """The command palette: every action the keys have, by name."""
        commands = [
            SystemCommand("Cluster view", "every UltraServer as a row", lambda: self.action_scope("cluster")),
            SystemCommand("UltraServer view", "every chip of the UltraServer", lambda: self.action_scope("ultraserver")),
            SystemCommand("Host view", "the selected host", lambda: self.action_scope("host")),
            SystemCommand("Chip view", "the selected chip", lambda: self.action_scope("chip")),
            SystemCommand("Job view", "job telemetry", lambda: self.action_scope("job")),
            SystemCommand("Jump to host or chip", "by number, id, instance name or stream", self.action_jump),
            SystemCommand("Cycle sort", f"now: {self.selection.sort}", self.action_sort),
            SystemCommand("Cycle filter", f"now: {self.selection.filter}", self.action_filter),
            SystemCommand("Pause / resume", "the screen refresh", self.action_pause),
            SystemCommand("Export snapshot", f"SVG + JSON into {self.snapshot_dir}", self.action_export),
            SystemCommand("Keys", "the key map", self.action_help),
            SystemCommand("Quit", "write the receipt and quit", lambda: self.request_exit("quit")),
        ]
        commands += [SystemCommand(f"Theme: {name}", "screen colours", lambda name=name: self.set_theme(name))
                     for name in THEME_NAMES]
        return commands


def run_app(
    session: Session,
    refresh_s: float = 1.0,
    theme: str | None = None,
    receipt_path: Path | None = None,
    snapshot_dir: Path | None = None,
) -> tuple[ExitReason, Path | None]:
    """Run the screen on `session` until it ends; return (exit reason, receipt path).

    Raises `NoTerminal` when there is no terminal to draw on. SIGINT, SIGTERM and SIGHUP end the
    session like `q` does; the receipt is written on every path, even if the app crashes.
    """
    require_terminal()
    app = TrnwatchApp(
        session.ledger, session=session, refresh_s=refresh_s, theme=theme, snapshot_dir=snapshot_dir,
        receipt_path=receipt_path, recorded_evidence=session.recorded_evidence, driver_class=TrnwatchDriver,
    )

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for signum, reason in SIGNAL_REASONS.items():  # installed before the screen starts
            loop.add_signal_handler(signum, app.request_exit, reason)
        await app.run_async()

    try:
        asyncio.run(main())
    finally:
        if app.receipt is None and app.receipt_error is None:
            try:  # the app died before its session task wrote it
                app.receipt = session.write_receipt(receipt_path)
            except OutputError as exc:
                app.receipt_error = str(exc)
    # Where the receipt went, or why it went nowhere, is printed by the command line from the
    # session's receipt notes, once the screen is gone.
    return session.exit_reason or "error", app.receipt
