"""Snapshot export: an SVG of the screen and a JSON of every scope, side by side in one folder.

The SVG is Rich's export made to read the same with no network and any monospace font
(`offline_svg`): Rich draws each run of one style as one `<text>` stretched to its cells and
names a web font on a CDN; a viewer offline (most training clusters) falls back to another font,
and renderers drop the spaces a run starts or ends with, so the words of neighbouring runs ran
together (`util mean 0.0%min 0.0%idle 144`). Here every word is a `<text>` of its own at its own
cell, so the gaps between words are positions, not glyphs, and the CDN links are gone (a
`local()` Fira Code is still used where installed, else the viewer's monospace).
"""

import html
import os
import re
import time
from pathlib import Path

from rich.cells import cell_len

from trnwatch.ledger import Snapshot, snapshot_json
from trnwatch.output import write_new

DEFAULT_SNAPSHOT_DIR = Path("snapshots")


def snapshot_paths(folder: Path, now_s: float, scope: str) -> tuple[Path, Path]:
    """Free (svg, json) paths named after the session clock and the scope shown."""
    stamp = time.strftime("%Y%m%d-%H%M%SZ", time.gmtime(now_s))
    base = f"trnwatch-{stamp}-{scope}"
    n = 1
    while True:
        name = base if n == 1 else f"{base}-{n}"
        svg, js = folder / f"{name}.svg", folder / f"{name}.json"
        if not os.path.lexists(svg) and not os.path.lexists(js):
            return svg, js
        n += 1


def write_snapshot(folder: Path, now_s: float, scope: str, svg: str, snapshot: Snapshot) -> tuple[Path, Path]:
    """Write both files (trnwatch/output.py's rule); return their paths. Raises `OutputError`."""
    svg_path, json_path = snapshot_paths(folder, now_s, scope)
    write_new(svg_path, svg)
    write_new(json_path, snapshot_json(snapshot))
    return svg_path, json_path


# Rich's text runs: `<text class=C x=X y=Y textLength=L clip-path=P>escaped text</text>`.
TEXT_RUN = re.compile(
    r'<text class="(?P<cls>[^"]*)" x="(?P<x>[\d.]+)" y="(?P<y>[\d.]+)" textLength="(?P<len>[\d.]+)" '
    r'clip-path="(?P<clip>[^"]*)">(?P<text>[^<]*)</text>'
)
WEB_FONT = re.compile(r',\s*url\("https?://[^"]*"\)\s*format\("[^"]*"\)')
WORD = re.compile(r"[^ \u00a0]+")


def _words(run: re.Match) -> str:
    """One `<text>` per word of a run, each at its own cell (Rich's cell width: its textLength
    over its characters)."""
    text = html.unescape(run["text"])
    if not text:
        return ""
    cell_w = float(run["len"]) / len(text)
    x0 = float(run["x"])
    out = []
    for word in WORD.finditer(text):
        x = x0 + cell_len(text[: word.start()]) * cell_w
        length = cell_len(word.group()) * cell_w
        out.append(
            f'<text class="{run["cls"]}" x="{x:.5g}" y="{run["y"]}" textLength="{length:.5g}" '
            f'clip-path="{run["clip"]}">{html.escape(word.group(), quote=False)}</text>'
        )
    return "".join(out)


def offline_svg(svg: str) -> str:
    """Rich's SVG export with each word placed at its cell and no web font to fetch."""
    return TEXT_RUN.sub(_words, WEB_FONT.sub("", svg))
