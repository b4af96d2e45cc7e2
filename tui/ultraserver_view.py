"""UltraServer scope: every chip of one UltraServer at once, summary first.

The summary (four lines, fits 80 columns) is the UltraServer's rollup over its fresh hosts, with
that boundary in words. Below it every chip is one three-cell glyph group (utilisation bar, HBM
shade, ECC mark): hosts as blocks in a grid on narrow screens, one host per line with its names
on wide ones. Cells hold glyphs, not numbers, on purpose: 144 numbers that jitter every second
would repaint most of the screen each refresh; a glyph changes only when a level does. The few
chips that most need a look follow with their figures.
"""

from rich.style import Style
from rich.text import Text
from textual import events

from trnwatch.ledger import NO_GROUP, ChipSummary, HostSummary, units
from trnwatch.tui.efa_lines import SUMMARY_MIN_COLS, efa_spread, efa_summary
from trnwatch.tui.host_rows import FILTER_HELP
from trnwatch.tui.rollup_lines import rollup_lines
from trnwatch.tui.scope import Frame, OpenChip, ScopeView, Screenful, Selection, column, no_host_yet, outside, styled
from trnwatch.tui.text import clip
from trnwatch.tui.ultraserver_model import UltraServerModel, ultraserver_model
from trnwatch.tui.widgets import BARS, SHADES, TextLines, hbm_glyph, util_glyph

WIDE_MIN_COLS = 100  # from here on, one host per line with its names
ATTENTION_ROWS = 5  # chips listed with figures under the grid (narrow screens)
WIDE_ATTENTION_ROWS = 12  # in the side column (wide screens)
STALE_MARK = "~"
LOST_MARK = "×"
ECC_MARK = "!"
# An uncorrected ECC error (data lost on the chip, above any corrected count) or a hardware error
# the kernel log names on the chip.
UNCORRECTED_MARK = "#"
CELL_COLS = 3
# A chip's bar is redrawn only when its utilisation moved this many points from the figure the
# bar was drawn for (or reached or left exactly 0): steady training jitters by a few points
# around a level boundary, and each flip would repaint the grid line up to that cell.
UTIL_DEADBAND_PCT = 4.0


def _cell(
    chip: ChipSummary, row: HostSummary, frame: Frame, selected: bool, u: float | None
) -> list[tuple[str, Style | None]]:
    """One chip's three cells; `u` is the utilisation to draw (`UltraServerView._drawn_util`)."""
    pal = frame.palette
    extra = pal["cursor"] if selected else None
    if row.state == "lost":
        return [(LOST_MARK * 2 + " ", pal["bad"] + extra if extra else pal["bad"])]
    if row.state != "fresh":
        return [(STALE_MARK * 2 + " ", pal["warn"] + extra if extra else pal["warn"])]
    util_style = pal["dim"] if u is None else pal.heat[units.level(u, 100.0, len(pal.heat))]
    fill = chip.hbm_pct
    hbm_style = pal["dim"] if fill is None else pal.hbm[units.level(fill, 100.0, len(pal.hbm))]
    flag: tuple[str, Style | None]
    if chip.ecc_uncorrected or chip.hw_errors:
        flag = (UNCORRECTED_MARK, pal["bad"] + Style(reverse=True))
    elif chip.ecc_events or chip.ecc_undecided:
        flag = (ECC_MARK, pal["bad"])
    else:
        flag = (" ", None)
    if extra is None:
        return [(util_glyph(u), util_style), (hbm_glyph(fill), hbm_style), flag]
    return [
        (util_glyph(u), util_style + extra),
        (hbm_glyph(fill), hbm_style + extra),
        (flag[0], (flag[1] or Style()) + extra),
    ]


def _cell_key(row: HostSummary, chip: ChipSummary, selected: bool, u: float | None) -> tuple:
    """What `_cell` draws for a chip, as a value: equal keys draw equal cells (the bar's glyph
    is its level: eight bars, as eight heat levels; HBM and ECC are the cell's `marks`)."""
    if row.state != "fresh":
        return row.state, selected
    return util_glyph(u), _marks(chip), selected


def _marks(chip: ChipSummary) -> tuple[int | None, bool, bool]:
    """What a grid cell draws of the chip besides its utilisation bar, as a value (equal marks,
    equal cells): its HBM fill in eighths (None: no figure), uncorrected ECC or a kernel-log
    hardware error, and ECC events or an undecided counter."""
    fill = chip.hbm_pct
    eighth = None if fill is None else units.level(fill, 100.0, 8)
    return eighth, chip.ecc_uncorrected > 0 or chip.hw_errors > 0, chip.ecc_events > 0 or chip.ecc_undecided


def _ecc_count(chip: ChipSummary) -> str:
    return f"{chip.ecc_events}" + (f" ({chip.ecc_uncorrected} uncorr.)" if chip.ecc_uncorrected else "")


def _cols(lines: list[Text]) -> int:
    return max((line.cell_len for line in lines), default=0)


class UltraServerView(ScopeView):
    """All chips of the selected UltraServer (or of the hosts mapped to none)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.model: UltraServerModel | None = None
        # Cells of the last render, for cursor moves and clicks: grid lines of (host_id, chip),
        # and detail-line y -> [(x_start, host_id, chip)].
        self._grid: list[list[tuple[str, int]]] = []
        self._cell_x: dict[int, list[tuple[int, str, int]]] = {}
        # The utilisation each chip's bar was last drawn for (see UTIL_DEADBAND_PCT).
        self._drawn: dict[tuple[str, int], float | None] = {}
        # The last render's host lines by what they draw: a line that draws the same is the same
        # Text, so it costs neither building nor rendering (most lines of a refresh).
        self._host_lines: dict[tuple, Text] = {}
        # Each cell's parts by what it draws (palette, `_cell_key`): a few hundred kinds at most.
        self._cell_parts: dict[tuple, list[tuple[str, Style | None]]] = {}

    def _drawn_util(self, row: HostSummary, chip: ChipSummary) -> float | None:
        key = (row.host_id, chip.index)
        u, drawn = chip.util_pct, self._drawn.get(key)
        if u is None or drawn is None or (u == 0.0) != (drawn == 0.0) or abs(u - drawn) >= UTIL_DEADBAND_PCT:
            self._drawn[key] = drawn = u
        return drawn

    def _row_cells(self, row: HostSummary, sel) -> list[tuple]:
        """(row, chip, selected, drawn utilisation, `_cell_key`) of each chip of `row`."""
        cells = []
        for chip in row.chips:
            selected = row.host_id == sel.host_id and chip.index == sel.chip
            u = self._drawn_util(row, chip)
            cells.append((row, chip, selected, u, _cell_key(row, chip, selected, u)))
        return cells

    def _drawn_cell(self, frame: Frame, cell: tuple) -> list[tuple[str, Style | None]]:
        """`_cell`'s parts for `cell` (row, chip, selected, drawn utilisation, `_cell_key`),
        made once per palette and key: equal keys draw equal cells."""
        row, chip, selected, u, key = cell
        kept = self._cell_parts.get((id(frame.palette), key))
        if kept is None:
            kept = self._cell_parts[(id(frame.palette), key)] = _cell(chip, row, frame, selected, u)
        return kept

    # --- rendering ------------------------------------------------------------------------------

    def lines(self, frame: Frame) -> Screenful:
        sel = frame.selection
        model = ultraserver_model(frame.read, sel.group, sel.sort, sel.filter)
        self.model = model
        if model is None:
            self._grid, self._cell_x = [], {}
            return Screenful(styled(("ULTRASERVER", frame.palette["scope"])), [no_host_yet(frame)], [])
        subject = self._subject(model, frame)
        summary = self._summary(model, frame)
        if frame.width < WIDE_MIN_COLS:
            attention = self._attention(model, frame, ATTENTION_ROWS) + self._efa_hosts(model, frame, frame.width)
            return Screenful(subject, summary, self._blocks(model, frame) + [Text()] + attention)
        table = self._table(model, frame)
        table += self._efa_hosts(model, frame, _cols(table))  # as wide as the table, so the side column still fits
        attention = self._attention(model, frame, WIDE_ATTENTION_ROWS)
        # Side by side only when both fit (with padding and scroll bar); else the list goes below.
        if _cols(table) + 2 + _cols(attention) + 3 <= frame.width:
            return Screenful(subject, summary, table, attention)
        return Screenful(subject, summary, table + [Text()] + attention)

    def _subject(self, m: UltraServerModel, frame: Frame) -> Text:
        pal = frame.palette
        name = "(hosts in no UltraServer)" if m.group == NO_GROUP else m.group
        group = f" ({m.group_number + 1}/{m.group_count})" if m.group_count > 1 else ""
        id_cols = (12 if frame.width < WIDE_MIN_COLS else 40) if m.group != NO_GROUP else 26
        return styled(
            ("ULTRASERVER ", pal["scope"]),
            outside(name, id_cols, pal["title"]),
            (
                f"{group} · {units.plural(m.rollup.hosts_total, 'host')} · "
                f"{units.plural(m.rollup.chips_total, 'chip')}",
                pal["text"],
            ),
        )

    def _summary(self, m: UltraServerModel, frame: Frame) -> list[Text]:
        pal = frame.palette
        r = m.rollup
        if m.group == NO_GROUP:
            title = styled(
                ("Hosts mapped to no UltraServer", pal["title"]),
                (" (no --ultraservers entry, no ultraserver_id in reports)", pal["dim"]),
            )
        else:
            title = styled(
                ("UltraServer ", pal["label"]),
                outside(m.group, 40, pal["title"]),
                (f"  {units.plural(r.hosts_total, 'host')}  {units.plural(r.chips_total, 'chip')}", pal["text"]),
            )
        legend = styled(
            ("sort ", pal["label"]),
            (m.sort, pal["text"]),
            (" · filter ", pal["label"]),
            (m.filter, pal["text"]),
            ("  cell: ", pal["dim"]),
            (f"util {BARS[0]}…{BARS[-1]}", pal["text"]),
            (f" HBM {SHADES}", pal["text"]),
            (f" {ECC_MARK} ECC {UNCORRECTED_MARK} uncorr. {STALE_MARK} stale {LOST_MARK} lost", pal["dim"]),
        )
        efa = (
            efa_summary(m.efa, pal, frame.width, self._worst_host(m, frame)) if frame.width >= SUMMARY_MIN_COLS else []
        )
        return [title, *rollup_lines(r, pal, frame.width), *efa, legend]

    def _worst_host(self, m: UltraServerModel, frame: Frame) -> str:
        """The host with the most EFA errors/s as the grid numbers it (with its name where wide)."""
        worst = m.efa.worst_host if m.efa is not None else None
        if worst is None:
            return ""
        row = next((r for r in m.rows if r.host_id == worst), None)
        if row is None:
            return clip(worst, 24)
        return f"host {row.number}" + (f" {clip(row.name or row.host_id, 24)}" if frame.width >= WIDE_MIN_COLS else "")

    def _efa_hosts(self, m: UltraServerModel, frame: Frame, width: int) -> list[Text]:
        """The hosts' own EFA figures, lowest to highest, wrapped to `width` (and, on narrow
        screens, the UltraServer's, left out of the summary); nothing without sysfs."""
        lines = (
            []
            if frame.width >= SUMMARY_MIN_COLS
            else efa_summary(m.efa, frame.palette, width, self._worst_host(m, frame))
        )
        lines += efa_spread(m.efa, frame.palette, width)
        return [Text(), *lines] if lines else []

    def _filtered_note(self, m: UltraServerModel, frame: Frame) -> list[Text]:
        if m.filter == "all":
            return []
        return [
            styled(
                (
                    f"filter {m.filter}: {FILTER_HELP[m.filter]} — {len(m.rows)} of {m.rollup.hosts_total} hosts",
                    frame.palette["dim"],
                )
            )
        ]

    def _blocks(self, m: UltraServerModel, frame: Frame) -> list[Text]:
        """Narrow layout: hosts as blocks "07 ▇▓ ▇▓ ▇▓ ▇▓", as many per line as fit."""
        sel = frame.selection
        pal = frame.palette
        number_cols = len(str(max((r.number for r in m.rows), default=0)))
        chips = max((len(r.chips) for r in m.rows), default=0)
        block_cols = number_cols + 1 + chips * CELL_COLS
        per_line = max(1, (frame.width + 1) // (block_cols + 1))
        out = self._filtered_note(m, frame)
        self._grid, self._cell_x = [], {}
        drawn, self._host_lines = self._host_lines, {}
        for start in range(0, len(m.rows), per_line):
            grid_line: list[tuple[str, int]] = []
            xs: list[tuple[int, str, int]] = []
            cells = []
            x = 0
            hosts = m.rows[start : start + per_line]
            for row in hosts:
                x += number_cols + 1
                for cell in self._row_cells(row, sel):
                    chip = cell[1]
                    cells.append(cell)
                    grid_line.append((row.host_id, chip.index))
                    xs.append((x, row.host_id, chip.index))
                    x += CELL_COLS
                x += 1
            key = (
                id(pal),
                number_cols,
                tuple((row.number, row.state, len(row.chips)) for row in hosts),
                tuple(cell[4] for cell in cells),
            )
            line = drawn.get(key)
            if line is None:
                parts: list = []
                for row in hosts:
                    label_style = pal["label"] if row.state == "fresh" else pal["warn"]
                    parts.append((f"{row.number:>{number_cols}} ", label_style))
                    parts += [part for cell in cells if cell[0] is row for part in self._drawn_cell(frame, cell)]
                    parts.append(" ")
                line = styled(*parts)
            self._host_lines[key] = line
            self._cell_x[len(out)] = xs
            self._grid.append(grid_line)
            out.append(line)
        return out

    def _table(self, m: UltraServerModel, frame: Frame) -> list[Text]:
        """Wide layout: one host per line, with its name, id, chips, ECC count and freshness."""
        sel = frame.selection
        pal = frame.palette
        number_cols = len(str(max((r.number for r in m.rows), default=0)))
        name_cols = min(24, max((len(r.name or "") for r in m.rows), default=0))
        id_cols = min(22, max((len(r.host_id) for r in m.rows), default=0))
        out = self._filtered_note(m, frame)
        out.append(
            styled(
                (
                    f"{'#':>{number_cols}} {'host name':<{name_cols}} {'host id':<{id_cols}}  chips: util·HBM·ECC",
                    pal["dim"],
                )
            )
        )
        self._grid, self._cell_x = [], {}
        drawn, self._host_lines = self._host_lines, {}
        for row in m.rows:
            cells = self._row_cells(row, sel)
            x = number_cols + 1 + name_cols + 1 + id_cols + 2
            self._cell_x[len(out)] = [
                (x + i * (CELL_COLS + 1), row.host_id, chip.index) for i, chip in enumerate(row.chips)
            ]
            self._grid.append([(row.host_id, chip.index) for chip in row.chips])
            key = (
                id(pal),
                number_cols,
                name_cols,
                id_cols,
                row.number,
                row.name,
                row.host_id,
                row.state,
                units.age(row.age_s) if row.state == "stale" else "",
                tuple(cell[4] for cell in cells),
                sum(c.ecc_events for c in row.chips),
                sum(c.ecc_uncorrected for c in row.chips),
            )
            line = drawn.get(key) or self._table_line(row, cells, number_cols, name_cols, id_cols, frame)
            self._host_lines[key] = line
            out.append(line)
        return out

    def _table_line(
        self, row: HostSummary, cells: list, number_cols: int, name_cols: int, id_cols: int, frame: Frame
    ) -> Text:
        """One host of the wide layout; `cells`: (row, chip, selected, drawn utilisation, cell key) per chip."""
        pal = frame.palette
        parts: list = [
            (f"{row.number:>{number_cols}} ", pal["label"] if row.state == "fresh" else pal["warn"]),
            column(row.name or "", name_cols + 1, pal["text"]),
            column(row.host_id, id_cols + 2, pal["dim"]),
        ]
        for cell in cells:
            parts += self._drawn_cell(frame, cell)
            parts.append(" ")
        ecc = sum(c.ecc_events for c in row.chips)
        uncorrected = sum(c.ecc_uncorrected for c in row.chips)
        parts.append(
            (f" ECC {ecc}" + (f" ({uncorrected} uncorr.)" if uncorrected else ""), pal["bad"] if ecc else pal["dim"])
        )
        if row.state == "stale":
            parts.append((f"  stale {units.age(row.age_s)}", pal["warn"]))
        elif row.state == "lost":
            parts.append(("  lost", pal["bad"]))
        return styled(*parts)

    def _attention(self, m: UltraServerModel, frame: Frame, rows: int) -> list[Text]:
        """The fresh chips that most need a look, with why (`ReadModel.chips_to_look_at`), or by
        the sort chosen with `s`; then the hosts left out of the figures (stale or lost)."""
        pal = frame.palette
        by_id = {row.host_id: row for row in m.rows}
        cells = {(row.host_id, chip.index): chip for row in m.rows for chip in row.chips}
        if m.sort == "host":
            title = "Chips to look at first"
            hosts = [frame.ledger.hosts[r.host_id] for r in m.rows]
            picked = [
                (by_id[c.host_id], cells[(c.host_id, c.chip)], c.why)
                for c in frame.read.chips_to_look_at(hosts, frame.findings, rows)
            ]
        else:
            fresh = [(row, chip) for row in m.rows if row.state == "fresh" for chip in row.chips]
            if m.sort == "hbm":
                title, key = "Fullest HBM", lambda rc: -(rc[1].hbm_pct or 0.0)
            elif m.sort == "ecc":
                title, key = "Most ECC events", lambda rc: (-rc[1].ecc_uncorrected, -rc[1].ecc_events)
                fresh = [rc for rc in fresh if rc[1].ecc_events]
            else:
                title, key = "Lowest utilisation", lambda rc: (rc[1].util_pct is None, rc[1].util_pct or 0.0)
            picked = [
                (row, chip, "")
                for row, chip in sorted(fresh, key=lambda rc: (key(rc), rc[0].number, rc[1].index))[:rows]
            ]
        out = [styled((title, pal["title"]), (f" (sort {m.sort})" if m.sort != "host" else "", pal["dim"]))]
        if not picked:
            out.append(styled(("  no chip stands out from its peers" if m.sort == "host" else "  none", pal["dim"])))
        wide = frame.width >= WIDE_MIN_COLS
        for row, chip, why in picked:
            line = styled((f"{row.number:>3}/{chip.index:<2} ", pal["label"]))
            if wide:
                line.append(*column(row.name or row.host_id, 22, pal["text"]))
            line.append("util ", pal["label"])
            line.append(f"{units.pct(chip.util_pct):>6}", pal["text"])
            line.append("  HBM ", pal["label"])
            line.append(f"{units.pct(chip.hbm_pct):>6}", pal["text"])
            if why:
                line.append("  " + why, pal["warn"])
            else:
                line.append("  ECC ", pal["label"])
                line.append(_ecc_count(chip), pal["bad"] if chip.ecc_events else pal["text"])
            out.append(line)
        gone = [row for row in m.rows if row.state != "fresh"]
        if gone:
            out += [Text(), styled(("Hosts left out of the figures", pal["title"]))]
            for row in gone[:rows]:
                what = "lost" if row.state == "lost" else f"stale, last report {units.age(row.age_s)} ago"
                out.append(
                    styled(
                        (f"{row.number:>3}  ", pal["label"]),
                        column(row.name or row.host_id, 22, pal["text"]),
                        (what, pal["bad"] if row.state == "lost" else pal["warn"]),
                    )
                )
        return out

    # --- cursor ---------------------------------------------------------------------------------

    def move(self, sel: Selection, dx: int, dy: int) -> bool:
        """Move the selected chip by cells (dx) or grid lines (dy), within what is drawn."""
        flat = [cell for line in self._grid for cell in line]
        here = (sel.host_id, sel.chip)
        if here not in flat:
            if flat:
                sel.host_id, sel.chip = flat[0]
            return True
        if dx:
            i = max(0, min(len(flat) - 1, flat.index(here) + dx))
            sel.host_id, sel.chip = flat[i]
            return True
        y = next(i for i, line in enumerate(self._grid) if here in line)
        column = self._grid[y].index(here)
        target = max(0, min(len(self._grid) - 1, y + dy))
        line = self._grid[target]
        sel.host_id, sel.chip = line[min(column, len(line) - 1)]
        return True

    def cell_at(self, x: int, y: int) -> tuple[str, int] | None:
        """The chip drawn at detail-area position (x, y), if any."""
        for x0, host_id, chip in self._cell_x.get(y, ()):
            if x0 <= x < x0 + CELL_COLS:
                return host_id, chip
        return None

    def on_click(self, event: events.Click) -> None:
        detail = self.query_one(".detail", TextLines)
        region = detail.content_region
        if not region.contains_point(event.screen_offset):
            return
        cell = self.cell_at(
            event.screen_x - region.x + detail.scroll_offset.x, event.screen_y - region.y + detail.scroll_offset.y
        )
        if cell is not None:
            self.post_message(OpenChip(*cell))
