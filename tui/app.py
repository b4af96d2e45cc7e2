"""The trnwatch screen: a Textual app reading the ledger that a session fills.

`run_app` runs a `Session` inside the app's event loop: the session's sources are asyncio tasks
(they never block the loop; stdin is read in a thread), and one timer repaints the active view
from the ledger every `refresh_s`. Whatever ends the session (q, ctrl+c, SIGTERM, SIGHUP, a lost
terminal, `--duration`) goes through `Session.stop(reason)`; the task that ran the session then
writes the receipt, before the screen is torn down, and exits the app. When every source
reaches EOF the screen stays up (the receipt is already written) until the user quits.

The app itself only needs a ledger, so tests build it from a ledger filled at fixed times and
a fixed clock (`TrnwatchApp(ledger, clock=lambda: t)`), with no session at all. `clock` is the
screen's one reading of the wall clock, and the data cannot stand in for it: in a live or
simulated session "now" is the wall clock (`session_now_s`), since a host that stops reporting
must go stale, and the header's time go on, while no line arrives. A replay's "now" comes from
its data, whatever the clock says. Only tests pass a clock: snapshot and pilot tests render a
fixed "now" and move it (a paused screen holds while time passes).
"""

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from rich.cells import cell_len
from rich.text import Text
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import ContentSwitcher, Footer

from trnwatch.exit_signals import catch_exit_signals, hold_exit_signals
from trnwatch.ledger import (
    NO_GROUP,
    WORST_STATE_FIRST,
    Evidence,
    ExitReason,
    Finding,
    JobLedger,
    Ledger,
    build_snapshot,
    session_now_s,
    units,
)
from trnwatch.output import OutputError
from trnwatch.session import SIGNAL_REASONS, Session
from trnwatch.stacks import suspect_requests
from trnwatch.themes import THEME_NAMES, default_theme, next_theme
from trnwatch.themes.palettes import CSS_PATH, PALETTES, TEXTUAL_THEMES
from trnwatch.tui.chip_view import ChipView
from trnwatch.tui.cluster_view import ClusterView
from trnwatch.tui.export import DEFAULT_SNAPSHOT_DIR, offline_svg, write_snapshot
from trnwatch.tui.fault_line import fault_lines
from trnwatch.tui.host_rows import FILTERS, SORTS, resolve_target
from trnwatch.tui.host_view import HostView
from trnwatch.tui.job_model import selected_suspect
from trnwatch.tui.job_view import JobView
from trnwatch.tui.navigation import settle, step
from trnwatch.tui.scope import SCOPE_OF, SCOPES, Frame, OpenChip, OpenUltraServer, ScopeView, Selection, outside, styled
from trnwatch.tui.screens import KEYMAP, SCOPE_KEYS, HelpScreen, JumpScreen
from trnwatch.tui.sources_model import sources_model
from trnwatch.tui.span_updates import send_dirty_spans_only
from trnwatch.tui.terminal import TrnwatchDriver, no_color, require_terminal
from trnwatch.tui.text import clean, clip
from trnwatch.tui.ultraserver_view import UltraServerView
from trnwatch.tui.widgets import TextLines

# Source states other than connected, with the style the status line counts them in; one source's
# trouble is named beside the counts in the ledger's order (WORST_STATE_FIRST).
STATE_ROLES = (
    ("stale", "warn"),
    ("lost", "bad"),
    ("reconnecting", "warn"),
    ("connecting", "dim"),
    ("waiting", "dim"),
    ("ended", "dim"),
)
BADGES = {
    "live": ("LIVE", "badge-live"),
    "simulated": ("SIMULATED", "badge-sim"),
    "replayed": ("REPLAY", "badge-replay"),
}
# Below WIDE_HEADER_COLS the badges take their short forms, so the scope's boundary keeps its room.
WIDE_HEADER_COLS = 100
SHORT_BADGES = {
    "LIVE": "LIVE",
    "SIMULATED": "SIM",
    "REPLAY": "REPLAY",
    "REPLAY of SIMULATED": "REPLAY/SIM",
    "REPLAY of LIVE": "REPLAY/LIVE",
}
PAUSED = "PAUSED"
SCOPE_GROUP = Binding.Group("View", compact=True)  # l u h c j under one footer label
NOTIFY_S = 4.0  # notifications: one short line, gone after this
# The view of each scope (`SCOPES` is their order).
VIEWS: dict[str, type[ScopeView]] = {
    "cluster": ClusterView,
    "ultraserver": UltraServerView,
    "host": HostView,
    "chip": ChipView,
    "job": JobView,
}


class TrnwatchApp(App[None]):
    """Scoped views of one ledger: cluster, UltraServer, host, chip, job."""

    CSS_PATH = str(CSS_PATH)
    TITLE = "trnwatch"
    BINDINGS = [
        *(
            Binding(keys, action, label, show=bool(label), group=SCOPE_GROUP if keys in SCOPE_KEYS else None)
            for keys, action, label, _ in KEYMAP
            if action
        ),
        Binding("pageup", "page(-1)", show=False),
        Binding("pagedown", "page(1)", show=False),
        Binding("home", "scroll_end(0)", show=False),
        Binding("end", "scroll_end(1)", show=False),
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
        # NO_COLOR (no-color.org): Textual's filter then strips every colour, leaving the
        # terminal's own foreground and background (not a monochrome palette of its own).
        super().__init__(driver_class=driver_class, ansi_color=True if no_color() else None)
        self.ledger = ledger
        self.session = session
        self.clock = clock
        self.refresh_s = refresh_s
        self.theme_name = default_theme(theme)
        self.snapshot_dir = snapshot_dir or DEFAULT_SNAPSHOT_DIR
        self.receipt_path = receipt_path
        self.recorded_evidence = recorded_evidence
        # A session of job sources only (`watch --job-dir` alone) opens on the job view and says
        # why the device scopes are empty.
        self.job_only = (
            session is not None
            and bool(session.sources)
            and all(spec.kind in ("job", "job-log") for spec in session.sources)
        )
        # Named by the job view while no job line has arrived (waiting, not missing).
        self.job_sources = tuple(
            spec.source_id for spec in (session.sources if session else ()) if spec.kind in ("job", "job-log")
        )
        self.selection = Selection(scope="job" if self.job_only else "ultraserver")
        self.findings: tuple[Finding, ...] = ()
        self.paused = False
        self.receipt: Path | None = None
        self.receipt_error: str | None = None
        self.last_export: tuple[Path, Path] | None = None
        self._session_done = False
        self._receipt_done = False  # the session's task wrote its receipt (or failed to)
        self._exit_asked = False  # asked while the receipt was being written: exit after it
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
        yield TextLines(id="fault-line")
        yield TextLines(id="status")
        with ContentSwitcher(initial=self.selection.scope):
            for scope in SCOPES:
                yield VIEWS[scope.name](id=scope.name)
        yield Footer(compact=True, show_command_palette=False)  # ctrl+p is in the key map (?)

    def on_mount(self) -> None:
        for theme in TEXTUAL_THEMES.values():
            self.register_theme(theme)
        self.theme = TEXTUAL_THEMES[self.theme_name].name
        self.set_interval(self.refresh_s, self._tick)
        self.call_after_refresh(self.render_now)
        if self.session is not None:
            # A message the session has for people (a recording that stopped) goes on the screen.
            self.session.notice = lambda text: self.notify(text, severity="error", markup=False, timeout=30)
            if self.session.stacks is not None:
                self.session.stacks.notice = lambda text: self.notify(text, markup=False, timeout=NOTIFY_S)
            self._session_task = asyncio.create_task(self._run_session(self.session))

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
        now_s = self.now_s()
        read = self.ledger.read(now_s)
        settle(read, self.selection)
        if not selection_only:
            # With a session, its incidents (judged as it folds, on its data's clock: the screen
            # adds no judgement, so a session with a screen keeps the incidents its replay does):
            # a finding held through a pause stays on the fault line.
            self.findings = read.findings if self.session is None else tuple(self.session.incidents.open_findings())
        view = self.view
        frame = Frame(
            read,
            self.job,
            PALETTES[self.theme_name],
            self.selection,
            view.size.width or self.size.width,
            selection_only,
            self.findings,
            self.job_only,
            self.job_sources,
            frozenset(self.session.stacks.in_flight) if self.session and self.session.stacks else frozenset(),
        )
        with self.batch_update():
            subject = view.show(frame)
            clock = self._clock(frame)
            self.query_one("#clock-line", TextLines).set_lines([clock])
            self.query_one("#scope-line", TextLines).set_lines([self._scope_line(frame, subject, clock.cell_len)])
            self.query_one("#fault-line", TextLines).set_lines(
                fault_lines(frame.findings, self.size.width, frame.palette)
            )
            self.query_one("#status", TextLines).set_lines([self._status(frame)])

    def _clock(self, frame: Frame) -> Text:
        """The session clock, evidence badge, PAUSED: the right end of the header, each in a
        place of its own that never moves (the badge's slot fits the longest label this session
        can show, PAUSED's is kept blank while running), so none ever covers another. The clock
        comes first because it changes every second and a change costs the cells before it."""
        pal = frame.palette
        narrow = self.size.width < WIDE_HEADER_COLS
        label, role = BADGES[self.ledger.evidence]
        recorded = self.ledger.recorded_evidence(self.recorded_evidence)
        if recorded and self.ledger.evidence == "replayed":
            label += f" of {recorded.upper()}"
        # A live session turns simulated when a simulated report arrives: room for either.
        labels = [BADGES[e][0] for e in ("live", "simulated")] if self.ledger.mode == "live" else [label]
        if narrow:
            label, labels = SHORT_BADGES[label], [SHORT_BADGES[x] for x in labels]
        clock = styled(
            (units.clock_utc(frame.now_s), pal["text"]),
            " ",
            (f" {label} ", pal[role]),
            " " * (max(map(len, labels)) - len(label)),
        )
        clock.append(*((f" {PAUSED} ", pal["badge-paused"]) if self.paused else (" " * (len(PAUSED) + 2), None)))
        return clock

    def _scope_line(self, frame: Frame, subject: Text, clock_cols: int) -> Text:
        """The scope shown and its boundary: the left of the header, cut to leave the clock room.
        The scheduler job follows where it fits whole ("slurm 4242 pretrain", else "slurm 4242";
        "k8s team/llama", else "k8s llama"), never cutting the scope's own figures."""
        line = styled(" ") + subject
        room = max(0, frame.width - clock_cols)
        if line.cell_len > room:
            line.truncate(room, overflow="ellipsis")
        for tag in self.ledger.scheduler_tags():
            if line.cell_len + cell_len(f" · {tag}") <= room:
                line.append(f" · {tag}", frame.palette["label"])
                break
        return line

    def _status(self, frame: Frame) -> Text:
        pal = frame.palette
        m = sources_model(frame.read)
        n = m.total
        parts: list = [
            (f" {n} source{'s' if n != 1 else ''}: ", pal["label"]),
            (f"{m.count('connected')} connected", pal["ok"] if m.count("connected") else pal["text"]),
        ]
        for state, role in STATE_ROLES:
            count = m.count(state)
            if count or state in ("stale", "lost"):
                parts.append((f" · {count} {state}", pal[role] if count else pal["text"]))
        parts.append((f" · {m.rejected} rejected", pal["warn"] if m.rejected else pal["text"]))
        worst = next((s for state in WORST_STATE_FIRST if (s := m.first_in(state)) is not None), None)
        if worst is not None:
            detail = (
                worst.error
                if worst.state == "lost"
                else (f"{units.age(worst.age_s)} since last line" if worst.age_s is not None else "no line yet")
            )
            parts += [
                ("  ", None),
                outside(worst.source_id, 20, pal["warn"]),
                (f" {worst.state}: ", pal["warn"]),
                outside(detail or "", 40, pal["warn"]),
            ]
        elif m.rejected:
            noisy = max(m.notable, key=lambda s: s.rejected)
            parts += [
                ("  ", None),
                outside(noisy.source_id, 20, pal["warn"]),
                (f" {noisy.rejected} rejected: ", pal["warn"]),
                outside(noisy.last_rejection, 40, pal["warn"]),
            ]
        if self._session_done and self.session is not None:
            parts.append(("  session ended (", pal["warn"]))
            parts.append((self.session.exit_reason or "", pal["warn"]))
            parts.append(("): receipt written, q quits", pal["warn"]))
        return styled(*parts)

    # --- the session ----------------------------------------------------------------------------

    async def _run_session(self, session: Session) -> None:
        try:
            reason = await session.run()
        finally:
            self._session_done = True
        try:
            self.receipt = await asyncio.to_thread(session.write_receipt, self.receipt_path)
        except Exception as exc:  # the screen must still close; run_app reports the error
            self.receipt_error = f"{type(exc).__name__}: {exc}"
        finally:
            self._receipt_done = True
        if reason == "eof" and not self._exit_asked:
            self.render_now()
            # The status line keeps saying so (and where the receipt is): the notification is short.
            self.notify("Every source ended: receipt written. q quits.", markup=False, timeout=NOTIFY_S)
            return
        self.exit()

    def request_exit(self, reason: ExitReason) -> None:
        """End the session for `reason` (its task writes the receipt, then exits the app), or
        exit at once if the session already ended and its receipt is written, or there is none."""
        if self.session is not None and self._session_done and not self._receipt_done:
            self._exit_asked = True
            self.notify("Finishing: writing the receipt, please wait.", markup=False, timeout=NOTIFY_S)
        elif self.session is None or self._session_done:
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
        if scope not in SCOPE_OF:
            return
        self.selection.scope = scope
        self.query_one(ContentSwitcher).current = scope
        self.render_now()

    def open_chip(self, host_id: str, chip: int) -> None:
        """Drill down to one chip (from a grid cell, a host's chip line, or a jump)."""
        self.selection.host_id, self.selection.chip = host_id, chip
        self.action_scope("chip")
        self._from_the_top()

    def on_open_chip(self, message: OpenChip) -> None:
        self.open_chip(message.host_id, message.chip)

    def on_open_ultra_server(self, message: OpenUltraServer) -> None:
        self.open_ultraserver(message.group)

    def _from_the_top(self) -> None:
        """Another host or chip is shown: its detail starts at its top, not where the last one's was."""
        self.view.query_one(".detail", TextLines).scroll_home(animate=False)

    def open_ultraserver(self, group: str) -> None:
        """Drill down from the cluster to one UltraServer (or to the hosts in none)."""
        if group not in self.ledger.read(self.now_s()).groups:
            self.notify(
                f"No host of {clip(group, 40)} has reported yet.", severity="warning", markup=False, timeout=NOTIFY_S
            )
            return
        self.selection.group, self.selection.host_id = group, None
        self.action_scope("ultraserver")

    def action_drill(self) -> None:
        sel = self.selection
        child = SCOPE_OF[sel.scope].child
        if child == "ultraserver" and sel.group is not None:
            self.open_ultraserver(sel.group)
        elif child == "chip" and sel.host_id is not None:
            self.action_scope("chip")

    def action_up(self) -> None:
        parent = SCOPE_OF[self.selection.scope].parent
        if parent:
            self.action_scope(parent)

    def action_move(self, dx: int, dy: int) -> None:
        sel = self.selection
        if self.view.move(sel, dx, dy):
            self.render_now(selection_only=sel.scope == "cluster")
        else:
            # Sideways too: a line wider than the screen (the job's ranks table) is read by scrolling.
            self.view.query_one(".detail", TextLines).scroll_relative(x=dx * 4, y=dy, animate=False, force=True)

    def action_page(self, pages: int) -> None:
        """Scroll the view's detail (the part that scrolls) by whole pages."""
        detail = self.view.query_one(".detail", TextLines)
        detail.scroll_relative(y=pages * max(1, detail.size.height - 1), animate=False)

    def action_scroll_end(self, end: int) -> None:
        """Scroll the view's detail to its top (0) or its end (1)."""
        detail = self.view.query_one(".detail", TextLines)
        if end:
            detail.scroll_end(animate=False)
        else:
            detail.scroll_home(animate=False)

    def action_step(self, delta: int) -> None:
        """Previous / next of the current scope: UltraServer row (as drawn), UltraServer, host or chip."""
        sel = self.selection
        if sel.scope == "cluster":
            self.view.move(sel, 0, delta)
        elif sel.scope == "job":
            self.query_one(JobView).step_suspect(sel, delta)
        else:
            step(self.ledger.read(self.now_s()), sel, delta)
            self._from_the_top()
        self.render_now(selection_only=sel.scope == "cluster")

    def action_fault(self) -> None:
        """Go to the site of the most severe finding: its chip, else its host, else the job."""
        if not self.findings:
            self.notify("No finding to go to.", markup=False, timeout=NOTIFY_S)
            return
        site = self.findings[0].site
        if site.host_id is not None and site.host_id in self.ledger.hosts:
            self.selection.group = site.ultraserver or NO_GROUP
            if site.chip is not None:
                self.open_chip(site.host_id, site.chip)
            else:
                self.selection.host_id, self.selection.chip = site.host_id, 0
                self.action_scope("host")
        elif site.rank is not None or self.findings[0].scope == "job":
            self.action_scope("job")
        else:
            self.notify(
                f"{clip(site.source_id or 'the site', 40)} is not a host on screen.", markup=False, timeout=NOTIFY_S
            )

    def action_stack(self, native: bool) -> None:
        """Take the selected suspect's Python stack (py-spy, on its host); the job view shows it
        when it arrives. The capture runs beside the session: this returns at once."""
        suspects = self.ledger.job_diagnosis(self.now_s())
        chosen = selected_suspect(suspects.suspects if suspects else (), self.selection.rank)
        if chosen is None:
            self.notify("No suspect to take a stack of: the job names none now.", markup=False, timeout=NOTIFY_S)
            return
        self.take_stacks([chosen.rank], native, "key")

    def take_stacks(self, ranks: list[int] | None, native: bool, trigger: str) -> None:
        """Start stack captures of the current suspects (`ranks` only, if given) and show the job view."""
        capturer = self.session.stacks if self.session is not None else None
        if capturer is None:
            self.notify(
                "Stacks are taken only in a live session (watch, record): a replay or the demo has no process to read.",
                severity="warning",
                markup=False,
                timeout=NOTIFY_S,
            )
            return
        requests = suspect_requests(self.ledger, self.now_s(), trigger, native, ranks)
        if not requests:
            self.notify("No suspect to take a stack of: the job names none now.", markup=False, timeout=NOTIFY_S)
            return
        started = capturer.request(requests)
        names = ", ".join(str(r.rank) for r in started) or "none (already running)"
        self.notify(f"Taking the stack of rank {names} with py-spy…", markup=False, timeout=NOTIFY_S)
        self.action_scope("job")

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
        self.notify(f"Theme: {self.theme_name} (t for the next)", markup=False, timeout=NOTIFY_S)

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
        target = resolve_target(self.ledger.read(self.now_s()), self.selection.group, text)
        if target is None:
            self.notify(
                f"No host or chip matches {clip(text, 40)!r}.", severity="warning", markup=False, timeout=NOTIFY_S
            )
            return
        host_id, chip = target
        self.selection.host_id, self.selection.chip = host_id, chip or 0
        self.selection.group = self.ledger.ultraserver_of(self.ledger.hosts[host_id]) or NO_GROUP
        self.action_scope("chip" if chip is not None else "host")
        self._from_the_top()

    def action_export(self) -> None:
        """Export the screen (`export_now`) once the notifications shown, the last export's among
        them, have left it: the picture is of the screen, not of what was said over it."""
        if self._notifications:
            self.clear_notifications()
            self.call_after_refresh(self.export_now)
        else:
            self.export_now()

    def screen_svg(self) -> str:
        """The screen as an SVG that reads the same offline, in any monospace font (tui/export.py)."""
        return offline_svg(self.export_screenshot(title=f"trnwatch {self.selection.scope}"))

    def export_now(self) -> tuple[Path, Path] | None:
        """Write an SVG of the screen as it is and a JSON snapshot of every scope. A folder that
        cannot take them stops only the export: said on screen, marked in the receipt."""
        now_s = self.now_s()
        recorded = self.ledger.recorded_evidence(self.recorded_evidence)
        open_incidents = self.session.incidents.open_incidents() if self.session is not None else []
        snapshot = build_snapshot(
            self.ledger,
            now_s,
            self.ledger.job_summary(now_s),
            recorded,
            written_at_s=time.time(),
            incidents=open_incidents,
        )
        svg = self.screen_svg()
        try:
            self.last_export = write_snapshot(self.snapshot_dir, now_s, self.selection.scope, svg, snapshot)
        except OutputError as exc:
            if self.session is not None:
                self.session.output_failed("snapshot", self.snapshot_dir, str(exc))
            reason = str(exc)  # its end says why (the path comes first): keep the end on one line
            reason = reason if len(reason) <= 70 else "…" + reason[-69:]
            self.notify(f"Snapshot not written: {clip(reason, 70)}", severity="error", markup=False, timeout=NOTIFY_S)
            return None
        svg_path = self.last_export[0]
        folder = clean(str(svg_path.parent.resolve()))
        folder = folder if len(folder) <= 60 else "…" + folder[-59:]  # its end names it: keep the end
        self.notify(f"Snapshot written in {folder}: {svg_path.name} (+ .json)", markup=False, timeout=NOTIFY_S)
        return self.last_export

    def get_system_commands(self, screen) -> list[SystemCommand]:
        """The command palette: every action the keys have, by name."""
        commands = [
            *(
                SystemCommand(s.palette_title, s.palette_help, lambda name=s.name: self.action_scope(name))
                for s in SCOPES
            ),
            SystemCommand("Jump to host or chip", "by number, id, instance name or stream", self.action_jump),
            SystemCommand("Cycle sort", f"now: {self.selection.sort}", self.action_sort),
            SystemCommand("Cycle filter", f"now: {self.selection.filter}", self.action_filter),
            SystemCommand(
                "Stacks of the suspects",
                "py-spy dump of each suspect rank",
                lambda: self.take_stacks(None, False, "palette"),
            ),
            SystemCommand(
                "Stacks of the suspects, native",
                "py-spy dump --native of each suspect rank",
                lambda: self.take_stacks(None, True, "palette"),
            ),
            SystemCommand("Pause / resume", "the screen refresh", self.action_pause),
            SystemCommand("Export snapshot", f"SVG + JSON into {self.snapshot_dir}", self.action_export),
            SystemCommand("Keys", "the key map", self.action_help),
            SystemCommand("Quit", "write the receipt and quit", lambda: self.request_exit("quit")),
        ]
        commands += [
            SystemCommand(f"Theme: {name}", "screen colours", lambda name=name: self.set_theme(name))
            for name in THEME_NAMES
        ]
        return commands


def run_app(
    session: Session,
    refresh_s: float = 1.0,
    theme: str | None = None,
    receipt_path: Path | None = None,
    snapshot_dir: Path | None = None,
    hold_signals: bool = False,
) -> tuple[ExitReason, Path | None]:
    """Run the screen on `session` until it ends; return (exit reason, receipt path).

    Raises `NoTerminal` when there is no terminal to draw on. SIGINT, SIGTERM and SIGHUP end the
    session like `q` does; the receipt is written on every path, even if the app crashes. With
    `hold_signals` (the program itself) they only say "finishing" once the screen is gone, to the
    process's end; else the handlers from before come back (trnwatch/exit_signals.py).
    """
    require_terminal()
    send_dirty_spans_only()
    app = TrnwatchApp(
        session.ledger,
        session=session,
        refresh_s=refresh_s,
        theme=theme,
        snapshot_dir=snapshot_dir,
        receipt_path=receipt_path,
        recorded_evidence=session.recorded_evidence,
        driver_class=TrnwatchDriver,
    )

    async def main() -> None:
        loop = asyncio.get_running_loop()  # installed before the screen starts
        restore = catch_exit_signals(loop, lambda signum: app.request_exit(SIGNAL_REASONS[signum]))
        try:
            await app.run_async()
        finally:
            if hold_signals:
                hold_exit_signals()
            else:
                restore()

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
