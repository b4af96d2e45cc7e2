"""What a terminal shows after the bytes an app wrote to it: a minimal model of the sequences
Textual writes (cursor moves, colour sequences, text; every other control sequence is read and
ignored). The screen sends only the changed cells of a line, so a test that looks for text on
screen reads it here, not in the byte stream."""

import re

from rich.cells import cell_len

_SEQUENCES = re.compile(
    r"\x1b\[(\d*);?(\d*)H"  # cursor position (1-based row; column)
    r"|\x1b\[([0-9;]*)m"  # colours and attributes
    r"|\x1b\[[0-9;?<>=]*[A-Za-z@`~]"  # any other CSI sequence
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC (title, clipboard, ...)
    r"|\x1b[^\[\]]"  # a two-byte escape
    r"|(\r)|(\n)|([^\x1b\r\n])",
    re.DOTALL,
)


def terminal_cells(output: str, cells: dict | None = None) -> dict[tuple[int, int], tuple[str, str]]:
    """(y, x) -> (character, the SGR parameters in force) after `output`, painted over `cells`."""
    cells = {} if cells is None else cells
    y = x = 0
    sgr = ""
    for match in _SEQUENCES.finditer(output):
        row, col, params, cr, newline, ch = match.groups()
        if match.group(0).endswith("H") and match.group(0).startswith("\x1b["):
            y, x = int(row or 1) - 1, int(col or 1) - 1
        elif params is not None:
            sgr = "" if params in ("", "0") else sgr + ";" + params
        elif cr:
            x = 0
        elif newline:
            y += 1
        elif ch:
            cells[(y, x)] = (ch, sgr)
            x += cell_len(ch)
    return cells


def screen_lines(output: str) -> list[str]:
    """The text of each row of the screen after `output` (cells never written are spaces)."""
    cells = terminal_cells(output)
    rows = max((y for y, _ in cells), default=-1) + 1
    lines = []
    for y in range(rows):
        xs = [x for yy, x in cells if yy == y]
        line = [" "] * (max(xs, default=-1) + 1)
        for x in xs:
            line[x] = cells[(y, x)][0]
        lines.append("".join(line).rstrip())
    return lines
