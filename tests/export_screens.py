"""Make every picture in docs/ again, from the code as it is (docs/development.md, "Pictures"):

- docs/screens/SCENARIO-80x24.svg: each demo scenario's UltraServer view at 80x24 at the tick its
  fault must be named by (tests/tui_fleet.py SCENARIO_TICKS: the demo's own reports and rank
  files folded at fixed times), as the `e` key exports it (`offline_svg`: no web font to fetch);
- docs/screenshot-ultraserver.svg: the hang's, the README's picture;
- with --receipts, docs/receipt-demo{,-hang}.{md,svg,png}: the receipts of
  `trnwatch demo --headless --duration 75` (healthy and hang, run side by side: 75 s), each
  timeline converted to PNG with librsvg's `rsvg-convert`.

    python tests/export_screens.py [--receipts] [DOCS_DIR]     (default docs/)
"""

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trnwatch.tui.export import offline_svg  # noqa: E402
from tests.tui_fleet import SCENARIO_TICKS, make_scenario_app  # noqa: E402

RECEIPTS = {"receipt-demo": "healthy", "receipt-demo-hang": "hang"}
RECEIPT_DURATION_S = 75


async def export(scenario: str, path: Path, size: tuple[int, int]) -> Path:
    app = make_scenario_app(scenario)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        path.write_text(offline_svg(app.export_screenshot(title=f"trnwatch demo --scenario {scenario}")))
    return path


def receipts(docs: Path) -> None:
    """The demo's receipts, healthy and hang, written beside each other and copied into docs/."""
    with tempfile.TemporaryDirectory() as tmp:
        runs = {
            name: subprocess.Popen(
                [sys.executable, "-m", "trnwatch", "demo", "--headless", "--scenario", scenario]
                + ["--duration", str(RECEIPT_DURATION_S), "--receipt", f"{tmp}/{name}.json"],
                stdout=subprocess.DEVNULL,
            )
            for name, scenario in RECEIPTS.items()
        }
        for name, run in runs.items():
            if run.wait() != 0:
                raise SystemExit(f"trnwatch demo for {name} exited {run.returncode}")
            for suffix in (".md", ".svg"):
                shutil.copyfile(f"{tmp}/{name}{suffix}", docs / f"{name}{suffix}")
            subprocess.run(["rsvg-convert", str(docs / f"{name}.svg"), "-o", str(docs / f"{name}.png")], check=True)
            print(docs / f"{name}.md", docs / f"{name}.svg", docs / f"{name}.png")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Make every picture in docs/ again, from the code as it is.")
    parser.add_argument("docs", nargs="?", type=Path, default=ROOT / "docs", help="where to write (default docs/)")
    parser.add_argument("--receipts", action="store_true", help="also the demo's receipts (75 s, healthy and hang)")
    args = parser.parse_args(argv)
    docs = args.docs
    (docs / "screens").mkdir(parents=True, exist_ok=True)
    for scenario in SCENARIO_TICKS:
        print(asyncio.run(export(scenario, docs / "screens" / f"{scenario}-80x24.svg", (80, 24))))
    print(asyncio.run(export("hang", docs / "screenshot-ultraserver.svg", (80, 24))))
    if args.receipts:
        receipts(docs)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
