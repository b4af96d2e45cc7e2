"""The screen driven by Textual's pilot: every view and every key, on fixed ledgers and a fixed clock."""

import asyncio
import io
import json
import time
from dataclasses import dataclass

from rich.console import Console
from textual.command import CommandPalette

from trnwatch.collectors.lines import Line
from trnwatch.ledger.ledger import Ledger
from trnwatch.session import Session, SourceSpec
from trnwatch.tui.app import TrnwatchApp
from trnwatch.tui.screens import KEYMAP, HelpScreen, JumpScreen
from trnwatch.tui.widgets import TextLines
from trnwatch.workloads.sim.fleet import SimHost
from trnwatch.workloads.sim.topology import get_topology
from tests.tui_fleet import LAST_TICK, make_app, new_fleet_ledger, now_at, received_s, report_lines


@dataclass
class Seen:
    """The app, and what it showed after the keys (read before the app shut down)."""

    app: TrnwatchApp
    header: str = ""
    text: str = ""
    status: str = ""
    screen: str = ""


def drive(app, keys=(), size=(80, 24), check=None) -> Seen:
    """Run `app` headless at `size`, press `keys`, call `check(app, pilot)` (may be async), and
    return what was on screen then."""
    seen = Seen(app)

    async def main():
        async with app.run_test(size=size, notifications=True) as pilot:
            await pilot.pause()
            for key in keys:
                await pilot.press(key)
                await pilot.pause()
            if check is not None:
                result = check(app, pilot)
                if asyncio.iscoroutine(result):
                    await result
            if app.is_running and not app._exit:
                seen.header, seen.text, seen.screen = header(app), app.view.plain_text(), screen_text(app)
                seen.status = app.query_one("#status", TextLines).lines[0]

    asyncio.run(main())
    return seen


def header(app) -> str:
    return app.query_one("#scope-line", TextLines).lines[0] + app.query_one("#clock-line", TextLines).lines[0]


def screen_text(app) -> str:
    """The whole screen as text, modal screens and notifications included (as a screenshot sees it)."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), record=True, force_terminal=True)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text()


def test_scope_keys_switch_views_and_the_header_names_the_scope_and_its_boundary():
    seen = {}

    async def check(app, pilot):
        for key, scope in (("h", "HOST"), ("c", "CHIP"), ("j", "JOB"), ("u", "ULTRASERVER")):
            await pilot.press(key)
            await pilot.pause()
            seen[scope] = (app.selection.scope, header(app))

    drive(make_app(), check=check)
    assert seen["ULTRASERVER"][0] == "ultraserver" and "36 hosts · 144 chips" in seen["ULTRASERVER"][1]
    assert seen["HOST"][0] == "host" and "HOST 0 sim-trn3-gen2-us-00 · 4 chips" in seen["HOST"][1]
    assert seen["CHIP"][0] == "chip" and "CHIP 0/0 · 1 chip of host" in seen["CHIP"][1]
    assert seen["JOB"][0] == "job" and "JOB not connected" in seen["JOB"][1]
    assert all(" SIM " in text and "08:00:44 UTC" in text for _, text in seen.values())  # short badge at 80


def test_arrows_move_the_grid_selection_and_enter_opens_that_chip():
    # 80 columns: five hosts per grid line, so "down" moves five hosts on.
    seen = drive(make_app(), keys=("right", "right", "down", "enter"))
    assert seen.app.selection.scope == "chip"
    assert "CHIP 5/2" in seen.header
    assert "Chip 2 of host 5 sim-trn3-gen2-us-05" in seen.text


def test_escape_goes_back_up_one_scope_at_a_time():
    assert drive(make_app(), keys=("enter", "escape")).app.selection.scope == "host"
    assert drive(make_app(), keys=("enter", "escape", "escape")).app.selection.scope == "ultraserver"


def test_chip_view_shows_cores_hbm_categories_latency_counters_models_and_history():
    seen = drive(make_app(), keys=("slash", "7", "slash", "2", "enter"), size=(100, 60))
    text = seen.text
    assert "CHIP 7/2" in seen.header
    for expected in (
        "core 8",
        "core 11",
        "nc_v4.16",
        "TFLOP/s",
        "tensors",
        "constants",
        "model code",
        "scratchpad",
        "runtime",
        "144.00 GiB",
        "Execution latency",
        "p50",
        "p99",
        "ECC",
        "Loaded models",
        "×4",
        "History",
        "llama3-pretrain-rank120",
    ):
        assert expected in text, expected
    history = next(line for line in text.splitlines() if line.strip().startswith("util ") and "0-100%" in line)
    assert history.count("█") >= 10  # the straggler chip has been ~100% busy for the whole history


def test_host_view_lists_chips_cpu_memory_and_processes_and_enter_opens_the_chip():
    seen = drive(make_app(), keys=("slash", "7", "enter"))
    assert seen.app.selection.scope == "host"
    text = seen.text
    for expected in (
        "trn3pds.16xlarge",
        "trainium3",
        "4 chips × 4 cores (LNC 2)",
        "of 64 vCPU",
        "memory",
        "pid",
        "llama3-pretrain-rank112",
        "llama3-pretrain-rank124",
    ):
        assert expected in text, expected
    assert "CHIP 7/2" in drive(make_app(), keys=("slash", "7", "enter", "down", "down", "enter")).header


async def wait_until(pilot, condition, what: str, timeout_s: float = 120.0) -> None:
    """Let the app run until `condition()` holds; fail naming `what` if it never does (the
    timeout only bounds a broken test, it is no figure: a loaded machine just takes longer)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        await pilot.pause(0.01)


async def type_into(app, pilot, screen_type, text: str) -> None:
    """Wait for a modal screen, then type `text` and Enter into it (typed too early, the letters
    would reach the app's own key bindings)."""
    await wait_until(pilot, lambda: isinstance(app.screen, screen_type), f"{screen_type.__name__} open")
    await pilot.press(*text, "enter")
    await pilot.pause()


def test_jump_to_something_that_does_not_exist_says_so_and_stays():
    async def jump(app, pilot):
        await type_into(app, pilot, JumpScreen, "nope")

    seen = drive(make_app(), keys=("slash",), check=jump)
    assert seen.app.selection.scope == "ultraserver" and not seen.app.paused
    assert "No host or chip matches 'nope'" in seen.screen  # the notification


def test_brackets_step_through_hosts_and_chips():
    assert (
        "HOST 2 sim-trn3-gen2-us-02"
        in drive(make_app(), keys=("h", "right_square_bracket", "right_square_bracket")).header
    )
    # Before chip 0/0 comes the last host's last chip.
    assert "CHIP 35/3" in drive(make_app(), keys=("c", "left_square_bracket")).header


def test_sort_key_reorders_and_filter_key_narrows_the_grid():
    app = make_app("ecc", last_tick=52)
    app.selection.sort = "ecc"  # sort: host -> util -> hbm -> ecc; filter: all -> idle -> ecc
    text = drive(app, keys=("f", "f")).text
    assert (app.selection.filter, app.selection.sort) == ("ecc", "ecc")
    assert "filter ecc" in text and "1 of 36 hosts" in text
    grid = [line for line in text.splitlines() if line.lstrip().startswith("7 ")]
    assert grid and "#" in grid[0]  # host 7's chip 2 had an uncorrected error: its own mark, above "!"
    assert "Most ECC events (sort ecc)" in text
    seen = drive(make_app(), keys=("s",))
    assert seen.app.selection.sort == "util" and "sort util" in seen.text


def test_lost_host_shows_as_stale_in_grid_status_and_side_column():
    def check(app, pilot):
        text = app.view.plain_text()
        assert "over 140 chips on 35/36 fresh hosts" in text and "stale 1" in text
        assert "sim-trn3-gen2-us-07" in text and "stale, last report 6 s ago" in text
        assert "1 stale" in app.query_one("#status", TextLines).lines[0]

    drive(make_app("host-loss", last_tick=50), size=(200, 60), check=check)


def test_pause_marks_the_header_and_holds_the_screen_until_resumed():
    ledger = new_fleet_ledger("straggler", last_tick=40)
    clock = [now_at(40)]
    app = TrnwatchApp(ledger, clock=lambda: clock[0], theme="dark")

    async def check(app, pilot):
        await pilot.press("p")
        await pilot.pause()
        assert app.paused and "PAUSED" in header(app)
        before = app.view.plain_text()
        host = SimHost(get_topology("trn3-gen2-us"), 7, 0, "straggler")
        ledger.ingest(Line("sim-host-07", "neuron-monitor", received_s(41, 7), host.report_line(41)))
        clock[0] = now_at(41)
        app._tick()
        await pilot.pause()
        assert app.view.plain_text() == before and "08:00:40 UTC" in header(app)
        await pilot.press("p")
        await pilot.pause()
        assert not app.paused and "PAUSED" not in header(app) and "08:00:41 UTC" in header(app)

    drive(app, check=check)


def test_theme_key_cycles_themes_and_mono_keeps_levels_as_glyphs():
    app = drive(make_app(), keys=("t",)).app
    assert (app.theme_name, app.theme) == ("light", "trnwatch-light")

    def check(app, pilot):
        detail = app.view.query_one(".detail", TextLines)
        colours = {seg.style.color for strip in detail._strips for seg in strip if seg.text.strip()}
        assert colours == {detail.rich_style.color}, "mono draws in the one text colour only"
        assert "█" in app.view.plain_text() and "▅" in app.view.plain_text()  # levels still readable

    drive(make_app(theme="mono"), check=check)


def test_help_screen_lists_every_key_and_closes():
    def check(app, pilot):
        assert isinstance(app.screen, HelpScreen)
        text = screen_text(app)
        for _keys, _action, _label, what in KEYMAP:
            assert what[:40] in text, what

    drive(make_app(), keys=("question_mark",), size=(120, 40), check=check)
    seen = drive(make_app(), keys=("question_mark", "escape"))
    assert "trnwatch keys" not in seen.screen and "ULTRASERVER" in seen.header


def test_command_palette_runs_a_scope_command():
    async def run_command(app, pilot):
        await type_into(app, pilot, CommandPalette, "job view")

    assert drive(make_app(), keys=("ctrl+p",), check=run_command).app.selection.scope == "job"


def test_export_key_writes_an_svg_of_the_screen_and_a_json_of_every_scope(tmp_path):
    async def let_the_notification_show(app, pilot):
        await wait_until(pilot, lambda: "Snapshot written" in screen_text(app), "the notification drawn")

    seen = drive(make_app(snapshot_dir=tmp_path), keys=("c", "e"), check=let_the_notification_show)
    svg_path, json_path = seen.app.last_export
    assert svg_path.parent == tmp_path and svg_path.name == "trnwatch-20270115-080044Z-chip.svg"
    assert "CHIP" in svg_path.read_text() and svg_path.read_text().startswith("<svg")
    snap = json.loads(json_path.read_text())
    assert len(snap["chips"]) == 144 and len(snap["hosts"]) == 36 and snap["now"] == now_at(LAST_TICK)
    assert "Snapshot written" in seen.screen and "080044Z-chip" in seen.screen.replace("\n", "")


def test_q_quits():
    seen = drive(make_app(), keys=("q",))
    assert seen.app._exit and seen.app.return_code == 0


def test_a_refresh_while_the_screen_is_torn_down_does_not_crash_it(monkeypatch):
    """The refresh timer outlives the widgets: Textual removes them before it stops the app's
    timers, and on a loaded machine a tick lands in between (it raised `NoMatches: No nodes match
    '.summary' on UltraServerView`). Here a tick fires as each line widget is removed."""
    app = make_app()
    ticks = []

    def tick_on_unmount(widget):
        ticks.append(widget)
        app._tick()
        app.render_now()

    monkeypatch.setattr(TextLines, "on_unmount", tick_on_unmount, raising=False)
    seen = drive(app, keys=("q",))
    assert seen.app._exit and seen.app.return_code == 0 and len(ticks) >= 3


def test_job_view_without_telemetry_names_the_missing_source_and_shows_no_figures():
    text = drive(make_app(), keys=("j",)).text
    assert "no job telemetry: start with --job-dir DIR" in text
    assert "tokens/s" not in text.replace("tokens/s, step-time", "") and "0.0" not in text


def test_job_view_with_telemetry_shows_verdict_throughput_collectives_and_where_ranks_run():
    seen = drive(make_app(with_job=True), keys=("j",), size=(200, 60))
    text = seen.text
    assert "JOB llama3-70b-run-0042 · 144 ranks on 36 hosts" in seen.header
    for expected in (
        "SLOW  rank 30 sim-trn3-gen2-us-07 chip 2 core 8",
        "straggler rank 30",
        "8,388,608 tokens/s",
        "1.00 steps/s",
        "step time p50 1.00 s",
        "all_reduce",
        "rank 30",
        "sim-trn3-gen2-us-07 chip 2 core 8",
        "vs peers' median",
        "TP 4 PP 1 DP 36",
    ):
        assert expected in text, expected


def test_clicking_a_grid_cell_opens_that_chip():
    async def check(app, pilot):
        detail = app.view.query_one(".detail", TextLines)
        # On a busy machine the refresh can redraw the grid between reading a cell's place and the
        # click landing (pytest-xdist saw it once): then that click hits another place, as a user's
        # would, and the test reads the places again and clicks again, a bounded number of times.
        for _attempt in range(5):
            y = next(y for y, xs in app.view._cell_x.items() if any(h == xs[0][1] for _, h, _ in xs))
            x0, host_id, chip = app.view._cell_x[y][5]  # the sixth cell drawn on the first grid line
            region = detail.content_region
            await pilot.click(offset=(region.x + x0 - detail.scroll_offset.x, region.y + y - detail.scroll_offset.y))
            for _pause in range(50):  # the view posts OpenChip up to the app: a few hops, a pause each
                if app.selection.scope == "chip":
                    break
                await pilot.pause()
            if app.selection.scope == "chip":
                break
        assert (app.selection.scope, app.selection.host_id, app.selection.chip) == ("chip", host_id, chip)

    drive(make_app(), check=check)


def test_replay_and_live_badges():
    replay = Ledger("replayed")
    for line in report_lines("healthy", LAST_TICK - 1, LAST_TICK):
        replay.ingest(line)
    seen = drive(TrnwatchApp(replay, clock=time.time, theme="dark", recorded_evidence="simulated"), size=(120, 30))
    assert "REPLAY of SIMULATED" in seen.header
    assert "08:00:44 UTC" in seen.header  # the replay clock: the latest line, not the wall clock


def test_an_unchanged_ledger_repaints_nothing():
    async def check(app, pilot):
        dirty = []
        for widget in app.query(TextLines):
            original = widget.refresh
            widget.refresh = lambda *regions, _o=original, **kw: (dirty.append(regions), _o(*regions, **kw))[1]
        app.render_now()
        await pilot.pause()
        assert dirty == []

    drive(make_app(), check=check)


def test_session_runs_inside_the_app_and_q_writes_the_receipt(tmp_path):
    hosts = [SimHost(get_topology("trn3-gen2-us"), h, 0, "healthy") for h in range(2)]

    async def lines(host):
        for tick in range(3):
            yield Line(f"sim-host-{host.host_index:02d}", "neuron-monitor", time.time(), host.report_line(tick))
            await asyncio.sleep(0.05)
        await asyncio.Event().wait()  # a live stream: no EOF

    session = Session(
        Ledger("simulated"),
        [SourceSpec(f"sim-host-{h.host_index:02d}", "neuron-monitor", lambda h=h: lines(h)) for h in hosts],
    )
    receipt = tmp_path / "r.json"
    app = TrnwatchApp(session.ledger, session=session, receipt_path=receipt, refresh_s=0.1, theme="dark")

    async def check(app, pilot):
        status = app.query_one("#status", TextLines)
        await wait_until(
            pilot,
            lambda: all(h.reports == 3 for h in session.ledger.hosts.values()) and len(session.ledger.hosts) == 2,
            "both hosts' three reports folded",
        )
        await wait_until(pilot, lambda: "2 sources: 2 connected" in status.lines[0], "the status line repainted")
        await pilot.press("q")
        await app._session_task

    drive(app, check=check)
    assert app.receipt == receipt and json.loads(receipt.read_text())["exit_reason"] == "quit"
    assert session.ledger.hosts and all(h.reports == 3 for h in session.ledger.hosts.values())


def test_when_every_source_ends_the_screen_stays_with_the_receipt_written(tmp_path):
    host = SimHost(get_topology("trn3-gen2-us"), 0, 0, "healthy")

    async def lines():
        yield Line("stdin", "neuron-monitor", time.time(), host.report_line(0))

    session = Session(Ledger("live"), [SourceSpec("stdin", "neuron-monitor", lines)])
    receipt = tmp_path / "r.json"
    app = TrnwatchApp(session.ledger, session=session, receipt_path=receipt, theme="dark")

    async def check(app, pilot):
        await app._session_task
        await pilot.pause()
        assert receipt.exists() and not app._exit
        assert "session ended (eof): receipt written, q quits" in app.query_one("#status", TextLines).lines[0]
        await pilot.press("q")
        await pilot.pause()
        assert app._exit

    drive(app, check=check)
    assert json.loads(receipt.read_text())["exit_reason"] == "eof"


def test_outside_strings_are_shown_as_plain_text_on_screen():
    host = SimHost(get_topology("trn3-gen2-us"), 0, 0, "healthy")
    report = host.report(25)
    report["neuron_runtime_data"][0]["neuron_runtime_tag"] = "[bold red]x[/]\x1b]52;c;aGVsbG8=\x07\x1b[31mred"
    report["neuron_runtime_data"][0]["error"] = "[blink]boom[/blink]\x1b[2J"
    ledger = Ledger("live")
    ledger.ingest(Line("stdin", "neuron-monitor", now_at(25) - 0.5, json.dumps(report)))
    styles = []

    def check(app, pilot):
        detail = app.view.query_one(".detail", TextLines)
        styles.extend(seg.style for strip in detail._strips for seg in strip if "[bold red]x[/]" in seg.text)

    seen = drive(TrnwatchApp(ledger, clock=lambda: now_at(25), theme="dark"), keys=("h",), size=(120, 30), check=check)
    assert "[bold red]x[/]]52;c;aGVsbG8=[31mred" in seen.screen
    assert "error: [blink]boom[/blink][2J" in seen.screen
    assert "\x1b" not in seen.screen and "\x07" not in seen.screen
    assert styles and not any(style.bold or style.blink for style in styles)  # drawn as the view styles tags


def test_rejected_lines_are_counted_and_named_in_status_and_host_view():
    ledger = Ledger("live")
    host = SimHost(get_topology("trn3-gen2-us"), 0, 0, "healthy")
    ledger.ingest(Line("stdin", "neuron-monitor", now_at(25) - 1.5, "{not json"))
    ledger.ingest(Line("stdin", "neuron-monitor", now_at(25) - 0.5, host.report_line(25)))
    seen = drive(TrnwatchApp(ledger, clock=lambda: now_at(25), theme="dark"), keys=("h",), size=(120, 30))
    assert "1 rejected" in seen.status and "stdin 1 rejected: " in seen.status
    assert "1 rejected: " in seen.text.splitlines()[1]  # beside the host's stream


def test_duration_ends_the_screen_by_itself_with_the_receipt(tmp_path):
    async def silent():
        await asyncio.Event().wait()
        yield  # an async generator that never yields a line

    session = Session(Ledger("live"), [SourceSpec("stdin", "neuron-monitor", silent)], duration_s=0.3)
    receipt = tmp_path / "r.json"
    app = TrnwatchApp(session.ledger, session=session, receipt_path=receipt, theme="dark")

    async def wait_for_the_end(app, pilot):
        await asyncio.wait_for(app._session_task, 10)
        await pilot.pause()
        assert app._exit

    drive(app, check=wait_for_the_end)
    assert json.loads(receipt.read_text())["exit_reason"] == "duration"


def test_footer_at_80_columns_lists_every_key_with_its_whole_label():
    seen = drive(make_app())
    footer = seen.screen.splitlines()[-1]
    for part in ("q Quit", "? Help", "luhcj View", "g Fault", "/ Jump", "s Sort", "f Filter", "p Pause", "t Theme"):
        assert part in footer, footer
    assert footer.rstrip().endswith("e Export"), footer


def test_help_keys_f1_and_f10_and_the_theme_key_says_which_theme():
    def check(app, pilot):
        assert isinstance(app.screen, HelpScreen)
        first = screen_text(app)
        assert "esc, q or ? closes this; q on the screen quits" in first and "q F10  quit" in first

    drive(make_app(), keys=("f1",), check=check)
    seen = drive(make_app(), keys=("f1", "f1"))  # F1 closes it too
    assert "trnwatch keys" not in seen.screen and "ULTRASERVER" in seen.header
    assert drive(make_app(), keys=("f10",)).app._exit
    seen = drive(make_app(), keys=("t",))
    assert "Theme: light (t for the next)" in seen.screen


def test_page_keys_scroll_the_chip_view_and_another_chip_starts_at_its_top():
    async def check(app, pilot):
        detail = app.view.query_one(".detail", TextLines)
        assert detail.max_scroll_y > 0  # 80x24 holds only part of a chip's detail
        await pilot.press("pagedown")
        await pilot.pause()
        assert detail.scroll_y > 0
        await pilot.press("end")
        await pilot.pause()
        assert detail.scroll_y == detail.max_scroll_y
        await pilot.press("home")
        await pilot.pause()
        assert detail.scroll_y == 0
        await pilot.press("end", "slash", "7", "slash", "1", "enter")
        await pilot.pause()
        assert app.selection.chip == 1 and detail.scroll_y == 0
        await pilot.press("end", "right_square_bracket")
        await pilot.pause()
        assert app.selection.chip == 2 and detail.scroll_y == 0

    drive(make_app(), keys=("slash", "7", "slash", "2", "enter"), check=check)


def test_export_toast_names_the_folder_it_wrote_to(tmp_path):
    async def export(app, pilot):
        await pilot.press("e")
        await wait_until(pilot, lambda: "Snapshot written" in screen_text(app), "the export's toast drawn")

    seen = drive(make_app(snapshot_dir=tmp_path), keys=("c",), size=(120, 30), check=export)
    toast = "".join(line.strip(" ▌▐▎") for line in seen.screen.splitlines())
    assert "Snapshot written in" in toast and f"{tmp_path.name}:" in toast, toast
