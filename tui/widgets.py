"""Widgets that cost little on the wire, and the glyphs they draw levels with.

`TextLines` is a line-API widget: a view hands it a list of `rich.text.Text` lines on every
refresh and it repaints only the lines that changed, and on a changed line only the runs of
cells that changed (sent from their own first cell with `span_updates.send_dirty_spans_only`;
without it Textual re-sends each run from the widget's left edge). An unchanged screen sends
nothing at all.

Levels are glyphs first: utilisation is a bar height, HBM fill a shade, so they read without
colour (monochrome theme, NO_COLOR); sparklines are single-style text.
"""

from collections.abc import Iterable

from rich.cells import cell_len
from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Region, Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from trnwatch.ledger import units

BARS = "▁▂▃▄▅▆▇█"
SHADES = "░▒▓█"
IDLE = "·"  # a level of exactly zero
NO_DATA = "-"  # no figure (not zero)


def util_glyph(util_pct: float | None) -> str:
    """One cell for a utilisation: a bar eighth, `·` for exactly idle, `-` for no figure."""
    if util_pct is None:
        return NO_DATA
    if util_pct <= 0.0:
        return IDLE
    return BARS[units.level(util_pct, 100.0, len(BARS))]


def hbm_glyph(fill_pct: float | None) -> str:
    """One cell for an HBM fill: four shades (a quarter each), `-` for no figure."""
    if fill_pct is None:
        return NO_DATA
    return SHADES[units.level(fill_pct, 100.0, len(SHADES))]


def sparkline(
    samples: list[tuple[float, float | None]],
    now_s: float,
    period_s: float,
    width: int,
    maximum: float,
    minimum: float = 0.0,
) -> str:
    """The last `width` report periods up to `now_s`, one bar per report, newest on the right,
    bars scaled from `minimum` (lowest bar) to `maximum` (full bar).

    Single-style text (cheap on the wire). A report that did not come (samples, or the newest
    sample and now, more than 1.5 periods apart) leaves a blank per missing period, so a gap
    stays a gap and is never interpolated; a report without a figure is `-`, a zero `·`.
    """
    cells: list[str] = []
    later_s = now_s
    for t_s, value in reversed(samples):
        if t_s > now_s:
            continue
        if later_s - t_s > 1.5 * period_s:
            cells.extend(" " * min(width, round((later_s - t_s) / period_s) - 1))
        if value is None or maximum <= minimum:
            cells.append(NO_DATA if value is None or maximum <= 0 else BARS[0])
        elif value <= 0:
            cells.append(IDLE)  # exactly zero, as in the grid: not the lowest bar
        else:
            cells.append(BARS[units.level(value - minimum, maximum - minimum, len(BARS))])
        later_s = t_s
        if len(cells) >= width:
            break
    return "".join(reversed(cells[:width])).rjust(width)


def shown_range(
    samples: list[tuple[float, float | None]], now_s: float, period_s: float, width: int
) -> tuple[float, float] | None:
    """(lowest, highest) of the values a `width`-wide sparkline up to `now_s` shows; None if none."""
    values = [v for t, v in samples if v is not None and now_s - width * period_s < t <= now_s]
    return (min(values), max(values)) if values else None


def _marks_spaces(style: Style) -> bool:
    """Whether a style is visible on a space (reverse video, lines through or under it)."""
    return bool(style.reverse or style.underline or style.strike or style.overline)


def merge_blanks(segments) -> list[Segment]:
    """Segments with fewer style changes: a run of spaces looks the same in any foreground
    colour, so it takes the style of the segment before it (when only the foreground differs)
    and joins it. Every style change costs an escape sequence on the wire, twice."""
    out: list[Segment] = []
    for seg in segments:
        prev = out[-1] if out else None
        if prev is not None and seg.text.isspace() and seg.style is not None and prev.style is not None:
            if seg.style.bgcolor == prev.style.bgcolor and not (_marks_spaces(seg.style) or _marks_spaces(prev.style)):
                out[-1] = Segment(prev.text + seg.text, prev.style)
                continue
        if out and out[-1].style == seg.style:
            out[-1] = Segment(out[-1].text + seg.text, seg.style)
            continue
        out.append(seg)
    return out


def line_segments(line: Text, console: Console, base: Style) -> Iterable[Segment]:
    """`Segment.apply_style(line.render(console), base)`: the line's segments over the widget's
    colours. The lines `scope.styled` builds (spans in order, none overlapping, each a Style) are
    cut at their spans directly, which is what Rich's general walk over span edges gives them."""
    spans = line.spans
    if (
        line.style
        or not all(isinstance(span.style, Style) for span in spans)
        or any(b.start < a.end for a, b in zip(spans, spans[1:], strict=False))
    ):
        return Segment.apply_style(line.render(console), base)
    text = line.plain
    if not spans:
        return [Segment(text, base)]
    out = []
    at = 0
    for span in spans:
        if span.end <= span.start:
            continue
        if span.start > at:
            out.append(Segment(text[at : span.start], base))
        out.append(Segment(text[span.start : span.end], base + span.style))  # type: ignore[operator]
        at = span.end
    if at < len(text):
        out.append(Segment(text[at:], base))
    return out


# Two changed runs of a line closer than this many cells are sent as one span: a span of its own
# costs a cursor move, and the cells between cost little more.
SPAN_GAP_CELLS = 3


def _cells(segments: list[Segment], at: int) -> tuple[list[tuple[str, Style | None]], list[int]]:
    """Each character of `segments` with its style, and the cell each one starts at (from
    cell `at`; last, the end)."""
    cells: list[tuple[str, Style | None]] = []
    starts = [at]
    for text, style, _ in segments:
        for ch in text:
            cells.append((ch, style))
            starts.append(starts[-1] + cell_len(ch))
    return cells, starts


def changed_spans(old: Strip | None, new: Strip) -> list[tuple[int, int]]:
    """The (start, end) cells of the runs that differ between two versions of a line, runs
    closer than `SPAN_GAP_CELLS` joined; [] when the lines are equal. Character by character,
    the i-th of one line against the i-th of the other; the equal segments a changed line
    starts with (and, when both lines hold as many characters in as many cells, ends with)
    are equal there character by character, so they are passed over whole."""
    if old is None:
        return [(0, max(new.cell_length, 1))]
    if old is new or old == new:
        return []
    old_segments, new_segments = list(old), list(new)
    first = x = 0
    while first < min(len(old_segments), len(new_segments)) and old_segments[first] == new_segments[first]:
        x += old_segments[first].cell_length
        first += 1
    old_end, new_end = len(old_segments), len(new_segments)
    if old.cell_length == new.cell_length and sum(len(seg.text) for seg in old_segments) == sum(
        len(seg.text) for seg in new_segments
    ):
        while old_end > first and new_end > first and old_segments[old_end - 1] == new_segments[new_end - 1]:
            old_end -= 1
            new_end -= 1
    return runs_that_differ(_cells(old_segments[first:old_end], x), _cells(new_segments[first:new_end], x))


def runs_that_differ(
    old: tuple[list[tuple[str, Style | None]], list[int]], new: tuple[list[tuple[str, Style | None]], list[int]]
) -> list[tuple[int, int]]:
    """The (start, end) cells where two runs of characters (`_cells`) differ, character by
    character, runs closer than `SPAN_GAP_CELLS` joined."""
    (a, a_at), (b, b_at) = old, new
    n = max(len(a), len(b))
    # Past a line's end its cells are blank, one per character.
    a_at += [a_at[-1] + i for i in range(1, n - len(a) + 1)]
    b_at += [b_at[-1] + i for i in range(1, n - len(b) + 1)]
    a += [(" ", None)] * (n - len(a))
    b += [(" ", None)] * (n - len(b))
    spans: list[tuple[int, int]] = []
    for i in range(n):
        if a[i] == b[i]:
            continue
        start, end = min(a_at[i], b_at[i]), max(a_at[i + 1], b_at[i + 1])
        if spans and start - spans[-1][1] < SPAN_GAP_CELLS:
            spans[-1] = (spans[-1][0], max(spans[-1][1], end))
        else:
            spans.append((start, end))
    return spans


class TextLines(ScrollView, can_focus=False):
    """Lines of styled text that repaint only what changed; scrolls when taller than its box."""

    DEFAULT_CSS = """
    TextLines { height: auto; overflow-x: hidden; }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._texts: list[Text] = []
        self._strips: list[Strip] = []
        self._style: Style | None = None  # the widget's colours the strips were rendered under
        # `rich_style` as last read, and the styles it was read under (see `_base_style`).
        self._base: Style | None = None
        self._base_key: tuple[tuple[int, int], ...] = ()
        self._width = 0

    @property
    def lines(self) -> list[str]:
        """The plain text of every line (for tests and plain-text dumps)."""
        return ["".join(seg.text for seg in strip) for strip in self._strips]

    def set_lines(self, lines: list[Text]) -> None:
        """Show `lines`; mark dirty only the changed part of each changed line. A line equal to
        the one shown at its place keeps its rendered strip: most lines of a refresh are."""
        console = self.app.console
        base = self._base_style()
        old_texts = self._texts if base == self._style else []
        new = [
            self._strips[y]
            if y < len(old_texts) and (line is old_texts[y] or line == old_texts[y])
            else Strip(merge_blanks(line_segments(line, console, base)), line.cell_len)
            for y, line in enumerate(lines)
        ]
        self._texts, self._style = list(lines), base
        width = max((s.cell_length for s in new), default=0)
        if len(new) != len(self._strips) or width != self._width:
            self._width = width
            self.virtual_size = Size(width, len(new))
        old = self._strips
        self._strips = new
        scroll_x, scroll_y = self.scroll_offset
        for y, strip in enumerate(new):
            for start, end in changed_spans(old[y] if y < len(old) else None, strip):
                x = max(0, start - scroll_x)
                if end - scroll_x > x:
                    self.refresh(Region(x, y - scroll_y, end - scroll_x - x, 1))
        if len(old) > len(new):
            self.refresh(Region(0, len(new) - scroll_y, self.size.width, len(old) - len(new)))

    def _base_style(self) -> Style:
        """The widget's colours under every segment (`rich_style`, as Textual's own Log uses),
        read again only when a style of the widget or of one of its ancestors changed (a theme,
        a class): Textual counts each node's style updates (`Styles._cache_key`, the key of its
        own `visual_style` cache), and `rich_style` walks every ancestor at each call."""
        key = tuple((id(node), node.styles._cache_key) for node in self.ancestors_with_self)
        if self._base is None or key != self._base_key:
            self._base, self._base_key = self.rich_style, key
        return self._base

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = y + scroll_y
        width = self.size.width
        base = self._base_style()
        if index >= len(self._strips):
            return Strip.blank(width, base)
        return self._strips[index].crop_extend(scroll_x, scroll_x + width, base)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self._strips)
