"""Screen themes: Textual colour themes plus the palettes the views draw levels with.

Every level on screen has a glyph first (bar height for utilisation, shade for HBM fill, a mark
for ECC / stale / lost) and a colour second, so the monochrome theme (and `NO_COLOR`, which
selects it) loses no information. Colour is kept for alarms: utilisation levels are one hue
getting brighter, never red, so red (or, in the colour-blind theme, vermillion/orange) always
means "look here".

The colour-blind-safe theme uses a viridis-like ramp for utilisation and the Okabe-Ito
colours for states; both stay distinguishable under the common colour-vision deficiencies.
"""

import os
from collections.abc import Mapping

# The order `t` cycles through; `--theme` takes these names.
THEME_NAMES = ("dark", "light", "high-contrast", "colorblind", "mono")


def default_theme(requested: str | None, environ: Mapping[str, str] = os.environ) -> str:
    """The theme to start with: the one asked for, else mono under NO_COLOR, else dark.
    Raises ValueError for an unknown name, listing the known ones."""
    if requested is not None:
        if requested not in THEME_NAMES:
            raise ValueError(f"unknown theme {requested!r}; known: {', '.join(THEME_NAMES)}")
        return requested
    return "mono" if environ.get("NO_COLOR") else "dark"  # set and not empty (no-color.org)


def next_theme(name: str) -> str:
    return THEME_NAMES[(THEME_NAMES.index(name) + 1) % len(THEME_NAMES)]
