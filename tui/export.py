"""Snapshot export: an SVG of the screen and a JSON of every scope, side by side in one folder."""

import os
import time
from pathlib import Path

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
