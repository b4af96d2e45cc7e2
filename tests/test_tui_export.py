"""The `e` key's SVG, as someone offline sees it: converted to PNG with no network (librsvg's
rsvg-convert, which fetches nothing and never loads a web font), the gaps between words are
measured in the pixels. Before `tui/export.offline_svg`, Rich's export rendered this way ran the
words of neighbouring style runs together (`util mean 0.0%min 0.0%idle 144ECC 0 chips`).
"""

import re
import shutil
import subprocess

import pytest

from tests.test_tui_app import drive, screen_text, wait_until
from tests.tui_fleet import make_scenario_app

RSVG = shutil.which("rsvg-convert")
needs_rsvg = pytest.mark.skipif(
    RSVG is None, reason="rsvg-convert not installed (apt librsvg2-bin; .ci/run installs it)"
)

# Lines of the demo hang's UltraServer view drawn in several style runs on the screen's own
# background (no reverse video): the status line and the summary the issue saw run together.
MEASURED = (" 612 sources:", " UltraServer ", " HBM ", " over ")


def export_twice(tmp_path):
    """The UltraServer view of the demo hang at 80x24, exported with `e`, then `e` again while
    the first export's toast is still shown; (screen text, first SVG, second SVG)."""
    exported, screens = [], []

    async def export(app, pilot):
        # The screen drawn first (on a busy machine the first repaint can come after the first key).
        await wait_until(pilot, lambda: " 612 sources:" in screen_text(app), "the first repaint")
        screens.append(screen_text(app))
        await pilot.press("e")
        await wait_until(pilot, lambda: "Snapshot written" in screen_text(app), "the first export's toast")
        exported.append(app.last_export[0])
        await pilot.press("e")
        await wait_until(pilot, lambda: app.last_export[0] != exported[0], "the second export")
        exported.append(app.last_export[0])

    drive(make_scenario_app("hang", snapshot_dir=tmp_path), check=export)
    return screens[0], exported[0].read_text(), exported[1].read_text()


def inked_cells(png, svg: str, row: int, columns: int) -> list[bool]:
    """For each cell of a screen row in the PNG of `svg`: whether any pixel inside it (a margin
    left out, so a neighbour's glyph edge does not count) differs from the row's background."""
    tx, ty = map(float, re.findall(r'transform="translate\(([\d.]+), ([\d.]+)\)"', svg)[-1])
    first = re.search(r'textLength="([\d.]+)"[^>]*>([^<]+)</text>', svg)
    cell_w = float(first[1]) / len(first[2].replace("&#160;", " "))
    rects = re.findall(r'<clipPath id="[\w-]+-line-\d+">\s*<rect x="0" y="([\d.]+)"', svg)
    line_h = float(rects[1]) - float(rects[0])
    top, bottom = round(ty + row * line_h + 4), round(ty + (row + 1) * line_h - 3)
    background = png.getpixel((round(tx + (columns - 0.5) * cell_w), top))  # the row's last cell: blank
    inked = []
    for col in range(columns):
        left, right = round(tx + col * cell_w + 2), round(tx + (col + 1) * cell_w - 2)
        inked.append(any(png.getpixel((x, y)) != background for x in range(left, right) for y in range(top, bottom)))
    return inked


@needs_rsvg
def test_an_export_converted_offline_keeps_the_space_between_every_word(tmp_path):
    screen, svg, _ = export_twice(tmp_path)
    assert 'url("http' not in svg  # nothing to fetch: no web font on a CDN
    svg_path = tmp_path / "export.svg"
    svg_path.write_text(svg)
    png_path = tmp_path / "export.png"
    subprocess.run([RSVG, "--zoom", "1", str(svg_path), "-o", str(png_path)], check=True, timeout=60)
    image = pytest.importorskip("PIL.Image", reason="Pillow not installed (the test extra installs it)")
    png = image.open(png_path).convert("RGB")
    rows = screen.splitlines()
    measured = [(i, line) for i, line in enumerate(rows) if line.startswith(MEASURED)]
    assert len(measured) == len(MEASURED), rows[:8]
    for row, line in measured:
        inked = inked_cells(png, svg, row, 80)
        drawn = "".join("x" if ink else " " for ink in inked).rstrip()
        text = "".join(" " if ch == " " else "x" for ch in line[:80]).rstrip()
        # Every word drawn where the screen has it, every gap between words blank in the pixels.
        assert drawn == text, f"row {row}: {line!r}\n pixels: {drawn!r}\n text:   {text!r}"
        assert len(line.split()) >= 6


def test_an_export_taken_while_the_last_exports_toast_shows_leaves_the_toast_out(tmp_path):
    screen, first, second = export_twice(tmp_path)
    assert "Snapshot" not in first  # no toast before the first press
    assert "Snapshot" not in second and "written" not in second
    assert "ULTRASERVER" in second.replace("&#160;", " ")
