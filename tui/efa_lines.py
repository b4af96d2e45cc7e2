"""EFA (between UltraServers) as the UltraServer and cluster views show it, from the read model's
`efa` rollups (ledger/sysfs_host.py `efa_rollup`): on Trn3, EFA carries only the traffic that
leaves an UltraServer. Each figure says over how many of the group's hosts it is ("n/m hosts"),
"unavailable" when none of them gave EFA rates (never a zero). Lines are packed from whole
figures and wrapped, never cut, at any width. Without sysfs sampled at all the read model gives
no rollup and none of these lines is drawn.
"""

from rich.text import Text

from trnwatch.ledger import EfaRollup, units
from trnwatch.themes.palettes import Palette
from trnwatch.tui.scope import styled, wrapped

LABEL = "EFA (between UltraServers)"
# From this width on the group's EFA lines are in the summary; narrower, they go to the end of the
# detail (it scrolls), so the summary of a small terminal keeps room for the grid.
SUMMARY_MIN_COLS = 80
INDENT = 2  # further lines of one figure group


def per_s(value: float | None) -> str:
    """An event rate: one decimal below 10/s (a few retransmits a second are worth seeing)."""
    if value is None:
        return units.NA
    return f"{value:.1f}/s" if value < 10 else f"{value:,.0f}/s"


def _pair(tx: float | None, rx: float | None) -> str:
    """ "12.00/11.60 Gb/s": tx and rx in one unit."""
    return f"{units.gbps(tx).removesuffix(' Gb/s')}/{units.gbps(rx)}"


def _range(spread: tuple[float, float] | None, text) -> str:
    if spread is None:
        return units.NA
    low, high = spread
    return text(low) if low == high else f"{text(low)}–{text(high)}"


def _packed(chunks: list[Text], width: int) -> list[Text]:
    """`chunks` two spaces apart, on as few lines of `width` cells as they fit whole; a chunk
    wider than a line is wrapped."""
    lines: list[Text] = []
    line = Text()
    for chunk in chunks:
        if line.cell_len and line.cell_len + 2 + chunk.cell_len > width:
            lines.append(line)
            line = styled(" " * INDENT)
        elif line.cell_len:
            line = line + styled("  ")
        line = line + chunk
    lines.append(line)
    return [part for line in lines for part in wrapped(line, width, INDENT)]


def _figures(e: EfaRollup, pal: Palette, worst: str) -> list[Text]:
    """ "n/m hosts", tx/rx and errors; the worst host (`worst`, as the view names it) when any has errors."""
    hosts = styled((f"{e.hosts}/{units.plural(e.members, 'host')}", pal["warn"] if e.partial else pal["dim"]))
    if not e.hosts:
        return [styled(("unavailable", pal["warn"])), hosts, styled(("gave no sysfs EFA rates", pal["dim"]))]
    out = [
        hosts,
        styled(("tx/rx ", pal["label"]), (_pair(e.tx_bytes_per_s, e.rx_bytes_per_s), pal["text"])),
        styled(("errors ", pal["label"]), (per_s(e.errors_per_s), pal["bad"] if e.errors_per_s else pal["text"])),
    ]
    if worst and e.hosts > 1:  # one host is its own worst
        out.append(styled((f"worst {worst} ({per_s(e.worst_errors_per_s)})", pal["bad"])))
    return out


def efa_summary(e: EfaRollup | None, pal: Palette, width: int, worst: str = "") -> list[Text]:
    """The group's EFA lines (none when sysfs is not sampled)."""
    if e is None:
        return []
    return _packed([styled((LABEL, pal["label"])), *_figures(e, pal, worst)], width)


def efa_spread(e: EfaRollup | None, pal: Palette, width: int) -> list[Text]:
    """Each host's own figures, lowest to highest, over the hosts in the sums (the UltraServer view)."""
    if e is None or not e.hosts:
        return []
    chunks = [
        styled((f"{LABEL} per host", pal["label"])),
        styled(("tx ", pal["label"]), (_range(e.host_tx_bytes_per_s, units.gbps), pal["text"])),
        styled(("rx ", pal["label"]), (_range(e.host_rx_bytes_per_s, units.gbps), pal["text"])),
        styled(("errors ", pal["label"]), (_range(e.host_errors_per_s, per_s), pal["text"])),
    ]
    return _packed(chunks, width)


def efa_rows(rows: list[tuple[str, EfaRollup, str]], pal: Palette, width: int, id_cols: int) -> list[Text]:
    """One line (or more, when narrow) per UltraServer (the cluster view): its label in `id_cols`
    cells, then its figures and worst host (as given)."""
    out = wrapped(styled((f"{LABEL}, per UltraServer", pal["title"])), width, INDENT)
    for label, e, worst in rows:
        out += _packed([styled((label.ljust(id_cols), pal["title"])), *_figures(e, pal, worst)], width)
    return out
