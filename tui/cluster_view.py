"""Cluster scope: every UltraServer as one row, summary first.

The summary (five lines that fit 80 columns and never scroll) is the cluster's totals over its
fresh hosts with that boundary in words, the job's verdict, the sort, and the column heads. Below
it one row per UltraServer (and one for the hosts in none), from `Ledger.read(now_s).cluster`: hosts
up / total, chips counted, HBM used / capacity and fill, mean and minimum utilisation, idle chips,
chips with ECC events, and "stalls": the job's verdict on the UltraServer(s) holding its suspect
ranks. Only job telemetry can say a job stalls, so without it that column stays empty.

Rows show utilisation in whole percent on purpose: a mean over 144 chips moves by tenths every
refresh, and every row would be sent again each second. Moving the selection lays out the
last refresh's rows again: at 1,152 hosts the rollup is most of a repaint's cost, and a key must
be answered at once. Enter (or a click) on a row opens that UltraServer's view.
"""

from rich.cells import cell_len
from rich.style import Style
from rich.text import Text
from textual import events
from textual.geometry import Region

from trnwatch.ledger import NO_GROUP, EfaRollup, hbm_high, units
from trnwatch.tui.cluster_model import CLUSTER_SORT_HELP, ClusterModel, UltraServerLine, cluster_model
from trnwatch.tui.efa_lines import SUMMARY_MIN_COLS, efa_rows, efa_summary
from trnwatch.tui.job_view import VERDICT_ROLE
from trnwatch.tui.rollup_lines import rollup_lines
from trnwatch.tui.scope import Frame, OpenUltraServer, ScopeView, Screenful, Selection, no_host_yet, styled
from trnwatch.tui.text import clip
from trnwatch.tui.widgets import TextLines

WIDE_MIN_COLS = 100  # from here on, UltraServer ids get more room
ID_COLS = 16  # UltraServer id, cut with an ellipsis beyond (narrow screens)
WIDE_ID_COLS = 28
NO_GROUP_LABEL = "(no UltraServer)"
# Column heads; the HBM head gets the column's unit appended.
HEADS = ("UltraServer", "hosts", "chips", "HBM", "fill", "util", "min", "idle", "ECC", "stalls")
LEFT_ALIGNED = {0, 9}


def _hbm_unit(m: ClusterModel) -> tuple[str, int, int]:
    """(unit, bytes per unit, decimals) for the HBM column: TiB once any row holds 1 TiB."""
    largest = max((r.rollup.hbm_capacity_bytes or r.rollup.hbm_used_bytes for r in m.rows), default=0)
    return ("TiB", units.TIB, 2) if largest >= units.TIB else ("GiB", units.GIB, 1)


def _stalls(row: UltraServerLine, m: ClusterModel) -> str:
    """The job's verdict on the UltraServer holding suspect ranks; nothing elsewhere (and
    nothing at all without job telemetry: device reports alone cannot tell a stall)."""
    if m.diagnosis is None or not row.suspect_ranks:
        return ""
    ranks = row.suspect_ranks
    return f"{m.diagnosis.verdict.upper()} " + (f"r{ranks[0]}" if len(ranks) == 1 else f"{len(ranks)} ranks")


def _worst(efa: EfaRollup | None) -> str:
    """The host with the most EFA errors/s, by its id (empty: none has errors)."""
    return clip(efa.worst_host, 24) if efa is not None and efa.worst_host else ""


def _row(cells: tuple[str, ...], widths: list[int], styles: list[Style], cursor: Style | None = None) -> Text:
    """One table line: cells padded to their column (ids and stalls left, figures right), the
    selected row drawn in the cursor style across its whole width."""
    parts: list = []
    for i, (cell, width, style) in enumerate(zip(cells, widths, styles, strict=True)):
        pad = " " * (width - cell_len(cell))
        text = cell + pad if i in LEFT_ALIGNED else pad + cell
        parts.append((text if i == len(cells) - 1 else text + " ", style + cursor if cursor else style))
    return styled(*parts)


class ClusterView(ScopeView):
    """Every UltraServer of the ledger, one row each, with drill-down to the UltraServer view."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.model: ClusterModel | None = None
        self.row_groups: list[str] = []  # detail line y -> UltraServer id, as drawn

    # --- rendering ------------------------------------------------------------------------------

    def show(self, frame: Frame) -> Text:
        subject = super().show(frame)
        if frame.selection.group in self.row_groups:  # keep the selected row on screen
            y = self.row_groups.index(frame.selection.group)
            self.query_one(".detail", TextLines).scroll_to_region(
                Region(0, y, 1, 1), animate=False, force=True, x_axis=False
            )
        return subject

    def lines(self, frame: Frame) -> Screenful:
        sel = frame.selection
        pal = frame.palette
        m = self.model
        if m is None or not frame.selection_only or m.sort != sel.sort:
            m = self.model = cluster_model(frame.read, sel.sort)
        self.row_groups = [row.group for row in m.rows]
        if not m.rows:
            return Screenful(styled(("CLUSTER", pal["scope"])), [no_host_yet(frame)], [])
        r = m.rollup
        subject = styled(
            ("CLUSTER", pal["scope"]),
            (
                f" · {units.plural(len(r.ultraservers), 'UltraServer')} · {units.plural(r.hosts_total, 'host')}"
                f" · {units.plural(r.chips_total, 'chip')}",
                pal["text"],
            ),
        )
        cells = self._cells(m, frame)
        widths = [max(cell_len(line[i]) for line in cells) for i in range(len(HEADS))]
        summary = self._summary(m, frame) + [_row(cells[0], widths, [pal["dim"]] * len(HEADS))]
        cursor = pal["cursor"]
        selected = sel.group if sel.group in self.row_groups else self.row_groups[0]
        detail = [
            _row(line, widths, self._styles(row, m, frame), cursor if row.group == selected else None)
            for row, line in zip(m.rows, cells[1:], strict=True)
        ]
        return Screenful(subject, summary, detail + self._efa_rows(m, frame, widths[0]))

    def _efa_rows(self, m: ClusterModel, frame: Frame, id_cols: int) -> list[Text]:
        """EFA (between UltraServers) per UltraServer, in the table's order (nothing without sysfs)."""
        if m.efa is None:
            return []
        rows = [(self._label(row, frame), row.efa, _worst(row.efa)) for row in m.rows if row.efa is not None]
        cluster = (
            [] if frame.width >= SUMMARY_MIN_COLS else efa_summary(m.efa, frame.palette, frame.width, _worst(m.efa))
        )
        return [Text(), *cluster, *efa_rows(rows, frame.palette, frame.width, id_cols)]

    @staticmethod
    def _label(row: UltraServerLine, frame: Frame) -> str:
        """An UltraServer's id as its table row shows it."""
        return (
            NO_GROUP_LABEL
            if row.group == NO_GROUP
            else clip(row.group, ID_COLS if frame.width < WIDE_MIN_COLS else WIDE_ID_COLS)
        )

    def _summary(self, m: ClusterModel, frame: Frame) -> list[Text]:
        pal = frame.palette
        legend = styled(
            ("sort ", pal["label"]),
            (CLUSTER_SORT_HELP[m.sort], pal["text"]),
            (" · Enter opens the selected UltraServer", pal["dim"]),
        )
        efa = efa_summary(m.efa, pal, frame.width, _worst(m.efa)) if frame.width >= SUMMARY_MIN_COLS else []
        return [*rollup_lines(m.rollup, pal, frame.width), *efa, self._job_line(m, frame), legend]

    def _job_line(self, m: ClusterModel, frame: Frame) -> Text:
        """The job's verdict and where its suspect ranks are, or why the stalls column is empty."""
        pal = frame.palette
        d = m.diagnosis
        if d is None:
            return styled(("stalls: no job telemetry (--job-dir DIR or --job-log FILE), so none is shown", pal["dim"]))
        placed = sum(len(row.suspect_ranks) for row in m.rows)
        where = ""
        if placed:
            on = sum(1 for row in m.rows if row.suspect_ranks)
            where = f"{units.plural(placed, 'suspect rank')} on {units.plural(on, 'row')}"
        if m.suspects_unseen:
            where += (", " if where else "") + (
                f"{len(m.suspects_unseen)} on hosts without device telemetry "
                f"(rank {', '.join(map(str, m.suspects_unseen[:3]))}"
                f"{'…' if len(m.suspects_unseen) > 3 else ''})"
            )
        line = styled(
            ("job ", pal["label"]),
            (d.verdict.upper(), pal[VERDICT_ROLE.get(d.verdict, "text")]),
            (f"  {where}" if where else "", pal["text"]),
            ("  ", None),
        )
        line.append(clip(d.reason, max(0, frame.width - line.cell_len - 1)), pal["dim"])
        return line

    def _cells(self, m: ClusterModel, frame: Frame) -> list[tuple[str, ...]]:
        """The column heads, then each row's cells as text."""
        unit, per, places = _hbm_unit(m)
        out: list[tuple[str, ...]] = [HEADS[:3] + (f"HBM {unit}",) + HEADS[4:]]
        for row in m.rows:
            r = row.rollup
            if not r.chips:
                hbm = units.NA
            else:
                capacity = "?" if r.hbm_capacity_bytes is None else f"{r.hbm_capacity_bytes / per:.{places}f}"
                hbm = f"{r.hbm_used_bytes / per:.{places}f}/{capacity}"
            out.append(
                (
                    self._label(row, frame),
                    f"{r.hosts_fresh}/{r.hosts_total}",
                    f"{r.chips}",
                    hbm,
                    units.pct(r.hbm_fill_pct, 0),
                    units.pct(r.util_mean_pct, 0),
                    units.pct(r.util_min_pct, 0),
                    f"{r.chips_idle}",
                    f"{r.chips_with_ecc}",
                    _stalls(row, m),
                )
            )
        return out

    def _styles(self, row: UltraServerLine, m: ClusterModel, frame: Frame) -> list[Style]:
        pal = frame.palette
        r = row.rollup
        full = pal["hbm-full"] if hbm_high(r.hbm_fill_pct) else pal["text"]
        verdict = m.diagnosis.verdict if m.diagnosis is not None else ""
        return [
            pal["dim"] if row.group == NO_GROUP else pal["title"],
            pal["warn"] if r.hosts_fresh < r.hosts_total else pal["text"],
            pal["text"],
            full,
            full,
            pal["text"],
            pal["text"],
            pal["warn"] if r.chips_idle else pal["text"],
            pal["bad"] if r.chips_with_ecc else pal["text"],
            pal[VERDICT_ROLE.get(verdict, "text")],
        ]

    # --- selection ------------------------------------------------------------------------------

    def move(self, sel: Selection, dx: int, dy: int) -> bool:
        """Select the row `dy` rows below (above, when negative) the selected one, as drawn."""
        if not dy or not self.row_groups:
            return False
        here = self.row_groups.index(sel.group) if sel.group in self.row_groups else 0
        sel.group = self.row_groups[max(0, min(len(self.row_groups) - 1, here + dy))]
        return True

    def on_click(self, event: events.Click) -> None:
        detail = self.query_one(".detail", TextLines)
        region = detail.content_region
        if not region.contains_point(event.screen_offset):
            return
        y = event.screen_y - region.y + detail.scroll_offset.y
        if 0 <= y < len(self.row_groups):
            self.post_message(OpenUltraServer(self.row_groups[y]))
