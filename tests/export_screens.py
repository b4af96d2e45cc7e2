"""Export the screens docs/tui.md shows: each demo scenario's UltraServer view at 80x24 at the
tick its fault must be named by (tests/tui_fleet.py SCENARIO_TICKS), as the app's own SVG export
(the `e` key's `export_screenshot`).

    python tests/export_screens.py [OUT_DIR]     (default docs/screens)
"""

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.tui_fleet import SCENARIO_TICKS, make_scenario_app  # noqa: E402


async def export(scenario: str, out: Path, size: tuple[int, int]) -> Path:
    app = make_scenario_app(scenario)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        path = out / f"{scenario}-{size[0]}x{size[1]}.svg"
        path.write_text(app.export_screenshot(title=f"trnwatch demo --scenario {scenario}"))
    return path


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "docs" / "screens"
    out.mkdir(parents=True, exist_ok=True)
    for scenario in SCENARIO_TICKS:
        print(asyncio.run(export(scenario, out, (80, 24))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
