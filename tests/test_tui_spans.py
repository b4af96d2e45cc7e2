"""Partial screen updates: only the changed runs of a line are sent, and the terminal ends up the same."""

import asyncio
import random

import pytest
import textual
from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual._compositor import ChopsUpdate
from textual.strip import Strip

from trnwatch.themes import THEME_NAMES
from trnwatch.tui.span_updates import CHECKED_VERSIONS, render_dirty_spans, send_dirty_spans_only
from trnwatch.tui.widgets import SPAN_GAP_CELLS, TextLines, _cells, changed_spans, line_segments, runs_that_differ
from tests.terminal_screen import terminal_cells
from tests.tui_fleet import make_scenario_app

RED, BLUE, GREEN = Style(color="#ff0000"), Style(color="#0000ff", bgcolor="#101010"), Style(color="#00ff00", bold=True)


def strip(*parts: tuple[str, Style]) -> Strip:
    return Strip([Segment(text, style) for text, style in parts])


def test_a_dirty_span_is_sent_from_its_own_first_cell_and_leaves_the_same_terminal_cells():
    # Two widgets side by side on one line (cells 0-19 and 20-29); the span 7-24 is dirty.
    left = strip(("ab", RED), ("cdef", BLUE), ("▁▂▃", GREEN), ("ghijklmnopq", RED))
    right = strip(("0123", BLUE), ("456789", GREEN))
    update = ChopsUpdate([{0: left, 20: right}], [(0, 7, 25)], [[20, 30]])
    console = Console(color_system="truecolor", force_terminal=True, width=30)
    before, after = update.render_segments(console), render_dirty_spans(update, console)
    full = terminal_cells(before)
    sent = terminal_cells(after)
    assert sorted(x for _, x in sent) == list(range(7, 25))  # the dirty cells, no more
    assert all(full[cell] == sent[cell] for cell in sent)  # in the same characters and styles
    assert min(x for _, x in full) == 0  # Textual's own method re-sends the line from its left edge
    assert len(after) < len(before)
    # Painted over the screen the full method leaves, the new one changes nothing.
    assert terminal_cells(after, dict(full)) == full


def test_a_line_wholly_inside_its_span_is_sent_whole():
    line = strip(("abc", RED), ("def", BLUE))
    update = ChopsUpdate([{0: line}], [(0, 0, 6)], [[6]])
    console = Console(color_system="256", force_terminal=True, width=6)
    assert render_dirty_spans(update, console) == update.render_segments(console)


def test_the_replacement_is_installed_only_under_the_textual_versions_it_was_checked_against(monkeypatch):
    original = ChopsUpdate.render_segments
    monkeypatch.setattr(ChopsUpdate, "render_segments", original)  # restored after the test
    monkeypatch.setattr(textual, "__version__", "0.0.0")
    assert not send_dirty_spans_only()
    assert ChopsUpdate.render_segments is original
    monkeypatch.setattr(textual, "__version__", CHECKED_VERSIONS[0])
    assert send_dirty_spans_only()
    assert ChopsUpdate.render_segments is render_dirty_spans


def test_the_installed_textual_is_one_the_replacement_was_checked_against():
    # Fails when the venv moves to a Textual this module was not checked against: look at its
    # ChopsUpdate.render_segments and add the version (or drop the replacement) on purpose.
    assert textual.__version__ in CHECKED_VERSIONS


def test_changed_spans_are_the_runs_that_differ_with_near_runs_joined():
    old = strip(("0123456789", RED), ("abcdefghij", BLUE))
    assert changed_spans(old, old) == []
    assert changed_spans(None, old) == [(0, 20)]
    one = strip(("01X3456789", RED), ("abcdefghiZ", BLUE))
    assert changed_spans(old, one) == [(2, 3), (19, 20)]
    assert SPAN_GAP_CELLS == 3  # the two lines below: runs 2 cells apart are joined, 3 apart are not
    assert changed_spans(old, strip(("01X34Y6789", RED), ("abcdefghij", BLUE))) == [(2, 6)]
    assert changed_spans(old, strip(("01X345Y789", RED), ("abcdefghij", BLUE))) == [(2, 3), (6, 7)]
    restyled = strip(("0123456789", RED), ("abc", BLUE), ("def", GREEN), ("ghij", BLUE))
    assert changed_spans(old, restyled) == [(13, 16)]


def test_changed_spans_count_cells_not_characters():
    old = strip(("日本ab", RED))  # two double-width characters, then a, b at cells 4 and 5
    new = strip(("日本aX", RED))
    assert changed_spans(old, new) == [(5, 6)]
    shorter = strip(("日本", RED))  # the tail is cleared: cells 4 and 5
    assert changed_spans(old, shorter) == [(4, 6)]


def every_line(app) -> list[Text]:
    return [line for widget in app.query(TextLines) for line in widget._texts]


@pytest.mark.parametrize("size", [(80, 24), (200, 60)])
@pytest.mark.parametrize("scenario", ["ecc", "hang", "host-loss"])
def test_lines_are_cut_at_their_spans_as_rich_renders_them(scenario, size):
    app = make_scenario_app(scenario)
    lines: list[Text] = []

    async def run() -> None:
        async with app.run_test(size=size) as pilot:
            for key in ("", "l", "j", "h", "c"):  # every scope's lines
                if key:
                    await pilot.press(key)
                await pilot.pause()
                lines.extend(every_line(app))

    asyncio.run(run())
    console, base = app.console, Style(color="#cccccc", bgcolor="#111111")
    assert len(lines) > 100
    for line in lines:
        assert list(line_segments(line, console, base)) == list(Segment.apply_style(line.render(console), base))


def test_lines_rich_must_walk_are_left_to_rich():
    console, base = Console(), Style(bgcolor="#111111")
    overlapping = Text("abcdef")
    overlapping.stylize(RED, 0, 4)
    overlapping.stylize(GREEN, 2, 6)
    with_base = Text("abc", style=BLUE)
    with_base.stylize(RED, 1, 2)
    named = Text("abc")
    named.stylize("bold", 0, 2)
    for line in (overlapping, with_base, named):
        assert list(line_segments(line, console, base)) == list(Segment.apply_style(line.render(console), base))


def changed_spans_by_character(old: Strip, new: Strip) -> list[tuple[int, int]]:
    """The rule `changed_spans` follows, walked character by character over the whole line."""
    return [] if old == new else runs_that_differ(_cells(list(old), 0), _cells(list(new), 0))


def test_changed_spans_pass_over_equal_segments_and_find_what_the_character_walk_finds():
    rng = random.Random(0)
    pieces = ["ab", "▇█ ", "日本", " ", "x", "07 ", "▁▂▃", "!"]

    def line() -> Strip:
        return strip(*((rng.choice(pieces), rng.choice((RED, BLUE, GREEN))) for _ in range(rng.randint(0, 8))))

    for _ in range(3000):
        old = line()
        segments = list(old)
        # Mostly a few segments changed in place (as a refresh changes a line), sometimes a new line.
        for _ in range(rng.randint(0, 2)):
            if segments:
                i = rng.randrange(len(segments))
                segments[i] = Segment(rng.choice(pieces), rng.choice((RED, BLUE, GREEN)))
        new = Strip(segments) if rng.random() < 0.8 else line()
        assert changed_spans(old, new) == changed_spans_by_character(old, new), (list(old), list(new))


def test_lines_are_drawn_over_the_widgets_colours_again_after_every_theme_change():
    # `TextLines` keeps its colours (`rich_style`) until a style of it or an ancestor changes.
    app = make_scenario_app("straggler")

    async def run() -> None:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            seen = set()
            for _ in THEME_NAMES:
                await pilot.press("t")
                await pilot.pause()
                app.render_now()
                await pilot.pause()
                for widget in app.query(TextLines):
                    assert widget._base_style() == widget.rich_style
                    if widget._strips:
                        assert widget._style == widget.rich_style
                        seen.add(widget.rich_style.bgcolor)
            assert len(seen) > 2  # the themes' backgrounds differ: the colours were read again

    asyncio.run(run())
