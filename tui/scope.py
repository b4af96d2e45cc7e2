"""What every scope view shares: the selection, one refresh's inputs, and the view base class.

A view is a summary (fixed at the top, never scrolls: the figures someone at 80x24 needs first)
above a detail area (scrolls when it does not fit). Both are `TextLines`, so a refresh repaints
only what changed. Views are given a `Frame` and lay text out; they never read a source and
never change the selection (`tui.navigation.settle` points it at something that exists first):
a click posts a message (`OpenChip`, `OpenUltraServer`) up to the app, which acts on it.
"""

import re
from dataclasses import dataclass, field

from rich.cells import cell_len
from rich.control import strip_control_codes
from rich.style import Style
from rich.text import Span, Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message

from trnwatch.ledger import Finding, JobLedger, Ledger, ReadModel
from trnwatch.themes.palettes import Palette
from trnwatch.tui.text import clip
from trnwatch.tui.widgets import TextLines


@dataclass(frozen=True)
class Scope:
    """One scope of the screen: its name (its view's id), its key and footer label, what the key
    map and the command palette say of it, and where Escape (`parent`) and Enter (`child`) go."""

    name: str
    key: str
    label: str
    keymap_help: str
    palette_title: str
    palette_help: str
    parent: str | None
    child: str | None


# The one list of scopes: keys, footer, help, the palette, the views and navigation follow it.
SCOPES: tuple[Scope, ...] = (
    Scope(
        "cluster",
        "l",
        "Cluster",
        "cluster view: every UltraServer as a row, Enter opens one",
        "Cluster view",
        "every UltraServer as a row",
        None,
        "ultraserver",
    ),
    Scope(
        "ultraserver",
        "u",
        "US",
        "UltraServer view: every chip of the UltraServer",
        "UltraServer view",
        "every chip of the UltraServer",
        "cluster",
        "chip",
    ),
    Scope(
        "host",
        "h",
        "Host",
        "host view: chips, CPU, memory, Neuron processes",
        "Host view",
        "the selected host",
        "ultraserver",
        "chip",
    ),
    Scope(
        "chip",
        "c",
        "Chip",
        "chip view: cores, HBM categories, latency, counters, history",
        "Chip view",
        "the selected chip",
        "host",
        None,
    ),
    Scope(
        "job",
        "j",
        "Job",
        "job view: verdict, throughput, collectives, ranks",
        "Job view",
        "job telemetry",
        "ultraserver",
        None,
    ),
)
SCOPE_OF = {scope.name: scope for scope in SCOPES}


@dataclass
class Selection:
    """Where the user is: the scope shown, the UltraServer group (the cluster view's selected
    row), the host and chip selected, and how the grid and the rows are sorted and filtered.
    Shared by all views, so `h` after a drill-down shows the host of the chip being looked at."""

    scope: str = "ultraserver"
    group: str | None = None
    host_id: str | None = None
    chip: int = 0
    sort: str = "host"
    filter: str = "all"
    rank: int | None = None  # the suspect selected in the job view (None: the first suspect)


@dataclass(frozen=True)
class Frame:
    """Inputs of one refresh: the ledger's read model at its "now", and the screen's state."""

    read: ReadModel  # `Ledger.read(now_s)`
    job: JobLedger | None  # None: no job telemetry connected
    palette: Palette
    selection: Selection
    width: int  # cells available to the view
    # Only the selection moved since the last refresh: a view whose figures are costly (the
    # cluster's rollup over every host) may lay out its last model again instead of rebuilding it.
    selection_only: bool = False
    findings: tuple[Finding, ...] = ()  # the fault line's: `ReadModel.findings` or the open incidents'
    job_only: bool = False  # the session has job sources only: the device scopes stay empty
    job_sources: tuple[str, ...] = ()  # the session's job sources (--job-dir, --job-log, --ckpt-dir)
    stacks_pending: frozenset[int] = frozenset()  # ranks whose stack capture is running

    @property
    def ledger(self) -> Ledger:
        return self.read.ledger

    @property
    def now_s(self) -> float:
        return self.read.now_s


NO_DEVICE_SOURCE = (
    "No device telemetry in this session (job sources only: no neuron-monitor here); "
    "the job view (j) has the job. For devices: --neuron-monitor PATH, --stdin, --scrape URL."
)


def no_host_yet(frame: "Frame") -> Text:
    """What a device scope says before any host reported: why, when no device source runs."""
    if frame.job_only:
        return styled((NO_DEVICE_SOURCE, frame.palette["warn"]))
    return styled(("No host has reported yet.", frame.palette["warn"]))


@dataclass(frozen=True)
class Screenful:
    """What a view shows for one frame, laid out from one model: the header's subject (what the
    scope covers, with its boundary), the summary, the detail and the wide screens' side column."""

    subject: Text
    summary: list[Text]
    detail: list[Text]
    side: list[Text] = field(default_factory=list)


def styled(*parts: str | tuple[str, Style | None]) -> Text:
    """A line from plain strings and (string, style) pairs; never parsed as markup. The same
    `Text` as appending each part in turn (control codes stripped, a span per styled part),
    built in one go: a refresh builds a few hundred parts."""
    texts: list[str] = []
    spans: list[Span] = []
    at = 0
    for part in parts:
        text, style = part if isinstance(part, tuple) else (part, None)
        if text:
            text = strip_control_codes(text)
            end = at + len(text)
            if style:
                spans.append(Span(at, end, style))
            texts.append(text)
            at = end
    return Text("".join(texts), no_wrap=True, overflow="crop", spans=spans)


UNIT_AFTER_FIGURE = re.compile(r"\d [A-Za-z]{1,3}(?![\w-])")


def _break_at(plain: str, room: int) -> int:
    """Where a line of at most `room` cells ends: after the last space that fits (so a word or
    a figure is never split), but not between a figure and its unit (`5 s`, `64 MiB`); else at
    `room` cells (a word longer than a whole line)."""
    cells = 0
    last_space = 0
    for i, ch in enumerate(plain):
        cells += cell_len(ch)
        if cells > room:
            return last_space or max(i, 1)
        if ch == " " and not UNIT_AFTER_FIGURE.match(plain, max(0, i - 1)):
            last_space = i + 1
    return len(plain)


def wrapped(line: Text, width: int, indent: int = 4) -> list[Text]:
    """`line` on as many lines of at most `width` cells as it needs, broken at spaces, the
    further lines indented by `indent` cells: what does not fit goes on, never cut."""
    out: list[Text] = []
    room = max(width, 1)
    while line.cell_len > room:
        cut = _break_at(line.plain, room)
        head, line = line[:cut], line[cut:]
        head.rstrip()
        out.append(head)
        line = line[len(line.plain) - len(line.plain.lstrip(" ")) :]
        room = max(width - indent, 8)  # the further lines start at the indent
    out.append(line)
    return [out[0], *(styled(" " * indent) + part for part in out[1:])]


def outside(value: object, width: int, style: Style | None = None) -> tuple[str, Style | None]:
    """A string from a report (tag, name, error), cleaned and clipped, as a line part."""
    return clip(value, width), style


def column(value: object, width: int, style: Style | None = None) -> tuple[str, Style | None]:
    """An outside string in a fixed-width column: cleaned, clipped to leave one space, padded."""
    text = clip(value, width - 1)
    return text + " " * (width - cell_len(text)), style


class OpenChip(Message):
    """A view asks for one chip to be shown (a grid cell or a host's chip line was clicked)."""

    def __init__(self, host_id: str, chip: int) -> None:
        super().__init__()
        self.host_id = host_id
        self.chip = chip


class OpenUltraServer(Message):
    """A view asks for one UltraServer (or the hosts in none: NO_GROUP) to be shown (a cluster row was clicked)."""

    def __init__(self, group: str) -> None:
        super().__init__()
        self.group = group


class ScopeView(Vertical):
    """A scope's screen area: `summary` lines above scrolling `detail` lines, and on wide
    screens a `side` column beside the detail, its own widget: figures that change every
    refresh go there, not at the end of otherwise still lines (where, without
    `span_updates`, a changed cell would cost the whole line up to it)."""

    DEFAULT_CSS = """
    ScopeView { height: 1fr; }
    ScopeView > .summary { height: auto; }
    ScopeView > Horizontal { height: 1fr; }
    ScopeView .detail { height: 1fr; width: 1fr; }
    ScopeView .side { height: 1fr; width: auto; display: none; padding: 0 1 0 2; }
    ScopeView.-wide .side { display: block; }
    ScopeView.-wide .detail { width: auto; }
    """

    def compose(self) -> ComposeResult:
        yield TextLines(classes="summary")
        with Horizontal():
            yield TextLines(classes="detail")
            yield TextLines(classes="side")

    def show(self, frame: Frame) -> Text:
        """Lay out `frame` and repaint what changed; return the header's subject."""
        screen = self.lines(frame)
        self.set_class(bool(screen.side), "-wide")
        self.query_one(".summary", TextLines).set_lines(screen.summary)
        self.query_one(".detail", TextLines).set_lines(screen.detail)
        self.query_one(".side", TextLines).set_lines(screen.side)
        return screen.subject

    def lines(self, frame: Frame) -> Screenful:
        """Everything this view shows for `frame`; the side column stays empty on narrow screens."""
        raise NotImplementedError

    def move(self, sel: Selection, dx: int, dy: int) -> bool:
        """Move the selection by (dx, dy) within what is drawn; False when this view has no
        selection to move (the arrows then scroll the detail)."""
        return False

    def plain_text(self) -> str:
        """Everything the view shows, as plain text (for tests)."""
        parts = ("summary", "detail", "side")
        return "\n".join(line for part in parts for line in self.query_one(f".{part}", TextLines).lines)
