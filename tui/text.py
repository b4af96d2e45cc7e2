"""Strings from reports, made safe to put on a screen.

Runtime tags, instance names, model names, error strings and source ids come from outside: a
neuron-monitor on a shared host, a job's own log. They are shown as data: never as markup (the
views build `rich.text.Text` from plain strings, so `[bold]` stays `[bold]`), and with every
control character removed, so an ESC, BEL or an OSC 52 clipboard write in a tag cannot reach the
terminal. Characters are dropped one by one rather than whole escape sequences: what remains
(`]52;c;aGVsbG8=`) shows that someone put something odd in the tag.
"""

from rich.cells import cell_len, set_cell_size

from trnwatch.outside import clean  # the one sanitiser of every output

ELLIPSIS = "…"


def clip(value: object, width: int) -> str:
    """`clean(value)` cut to at most `width` terminal cells, with an ellipsis when cut."""
    text = clean(value)
    if width <= 0:
        return ""
    if cell_len(text) <= width:
        return text
    return set_cell_size(text, width - 1) + ELLIPSIS
