"""A rollup's two summary lines, the same on every view that shows one (UltraServer, cluster).

The figures line: HBM used / capacity, mean and minimum utilisation, idle chips, chips with ECC
events (and how many of them uncorrected). The boundary line: how many chips on how many of the
hosts are in those figures, and why the others are not (stale, lost, configured but never
reported), so a figure never reads as covering hosts it left out. Both keep every figure on
narrow screens, in shorter words where the long ones would be cut off.
"""

from rich.style import Style
from rich.text import Text

from trnwatch.ledger import Rollup, hbm_high, units
from trnwatch.themes.palettes import Palette
from trnwatch.tui.scope import styled

LEFT_OUT = "  (left out of the figures)"
LEFT_OUT_SHORT = "  (left out)"  # when the long form would not fit the width
# The figures line's wordings, longest first: the first that fits the width is drawn (a cluster's
# HBM in TiB with an uncorrected ECC count is 93 columns long); each says every figure.
FIGURES_FORMS = (
    ("util mean", True, "uncorrected"),
    ("util mean", True, "uncorr."),
    ("util", False, "uncorr."),
)


def _figures(r: Rollup, pal: Palette, util_label: str, ecc_chips_word: bool, uncorrected: str) -> Text:
    ecc = units.plural(r.chips_with_ecc, "chip") if ecc_chips_word else f"{r.chips_with_ecc}"
    return styled(
        ("HBM ", pal["label"]),
        (
            units.used_of(r.hbm_used_bytes if r.chips else None, r.hbm_capacity_bytes),
            pal["hbm-full"] if hbm_high(r.hbm_fill_pct) else pal["text"],
        ),
        (f"  {util_label} ", pal["label"]),
        (units.pct(r.util_mean_pct), pal["text"]),
        (" min ", pal["label"]),
        (units.pct(r.util_min_pct), pal["text"]),
        ("  idle ", pal["label"]),
        (f"{r.chips_idle}", pal["warn"] if r.chips_idle else pal["text"]),
        ("  ECC ", pal["label"]),
        (ecc, pal["bad"] if r.chips_with_ecc else pal["text"]),
        (
            f" ({r.chips_with_uncorrected_ecc} {uncorrected})" if r.chips_with_uncorrected_ecc else "",
            pal["bad"] + Style(reverse=True),
        ),
    )


def rollup_lines(r: Rollup, pal: Palette, width: int) -> list[Text]:
    """[figures, boundary] for rollup `r`, each in the longest wording that fits `width` columns."""
    forms = [_figures(r, pal, *form) for form in FIGURES_FORMS]
    figures = next((line for line in forms if line.cell_len <= width), forms[-1])
    boundary = styled(
        (
            f"over {units.plural(r.chips, 'chip')} on {r.hosts_fresh}/{units.plural(r.hosts_total, 'fresh host')}",
            pal["dim"],
        ),
        ("  stale ", pal["label"]),
        (f"{r.hosts_stale}", pal["warn"] if r.hosts_stale else pal["text"]),
        ("  lost ", pal["label"]),
        (f"{r.hosts_lost}", pal["bad"] if r.hosts_lost else pal["text"]),
        *((("  never reported ", pal["label"]), (f"{r.hosts_silent}", pal["warn"])) if r.hosts_silent else ()),
    )
    if r.hosts_left_out:
        fits = boundary.cell_len + len(LEFT_OUT) <= width
        boundary.append(LEFT_OUT if fits else LEFT_OUT_SHORT, pal["dim"])
    return [figures, boundary]
