"""Snapshot export: an SVG of the screen and a JSON of every scope, side by side in one folder."""

import json
import time
from pathlib import Path

DEFAULT_SNAPSHOT_DIR = Path("snapshots")


def snapshot_paths(folder: Path, now_s: float, scope: str) -> tuple[Path, Path]:
    """Free (svg, json) paths named after the session clock and the scope shown."""
    stamp = time.strftime("%Y%m%d-%H%M%SZ", time.gmtime(now_s))
    base = f"trnwatch-{stamp}-{scope}"
    n = 1
    while True:
        name = base if n == 1 else f"{base}-{n}"
        svg, js = folder / f"{name}.svg", folder / f"{name}.json"
        if not svg.exists() and not js.exists():
            return svg, js
        n += 1


def write_snapshot(folder: Path, now_s: float, scope: str, svg: str, snapshot: dict) -> tuple[Path, Path]:
    """Write both files; return their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    svg_path, json_path = snapshot_paths(folder, now_s, scope)
    svg_path.write_text(svg, encoding="utf-8")
    json_path.write_text(json.dumps(snapshot, indent=2) + "\n", encoding="utf-8")
    return svg_path, json_path
