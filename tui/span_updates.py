"""Textual's partial screen update, sending each dirty span from its own first cell.

A widget can mark part of a line dirty (`Widget.refresh(Region(x, y, width, 1))`), and
Textual 8.2.8 keeps that span's start, but `ChopsUpdate.render_segments`, which writes the
update to the terminal, crops each piece of the line only at the span's end: it re-sends the
piece from its widget's left edge. On the UltraServer grid that is most of the bytes (a chip
whose bar moved, at the end of a line, re-sends the whole line with a style change per cell).
`send_dirty_spans_only()` replaces that method with the same one cropped at both ends: the
terminal ends up with the same characters in the same styles, since the cells left out are
the ones already there.

The replacement is Textual 8.2.8's method with the crop's start added, so it is installed
only under the versions it was checked against (`CHECKED_VERSIONS`); under any other the
screen works as before and costs what it did.
"""

import textual
from rich.console import Console
from rich.control import Control
from textual._compositor import ChopsUpdate

CHECKED_VERSIONS = ("8.2.8",)


def render_dirty_spans(update: ChopsUpdate, console: Console) -> str:
    """`ChopsUpdate.render_segments`, each line piece cropped to the dirty span at both ends."""
    sequences: list[str] = []
    append = sequences.append
    move_to = Control.move_to
    last_y = update.spans[-1][0]
    for y, x1, x2 in update.spans:
        line = update.chops[y]
        ends = update.chop_ends[y]
        for end, (x, strip) in zip(ends, line.items(), strict=False):
            if strip is None or x > x2 or end <= x1:
                continue
            start = max(x, x1)
            if start != x or end > x2:
                strip = strip.crop(start - x, min(end, x2) - x)
            append(move_to(start, y).segment.text)
            append(strip.render(console))
        if y != last_y:
            append("\n")
    return "".join(sequences)


def send_dirty_spans_only() -> bool:
    """Make every partial update in this process send only its dirty spans (see the module's
    docstring); True if installed, False under a Textual version it was not checked against."""
    if textual.__version__ not in CHECKED_VERSIONS:
        return False
    ChopsUpdate.render_segments = render_dirty_spans  # type: ignore[method-assign,assignment]
    return True
