"""Palettes (rich styles the views draw with) and Textual colour themes, per theme name."""

from dataclasses import dataclass
from pathlib import Path

from rich.style import Style
from textual.theme import Theme

CSS_PATH = Path(__file__).with_name("trnwatch.tcss")

# Style roles the views use; every palette defines all of them.
ROLES = (
    "text",
    "dim",
    "label",
    "title",
    "ok",
    "warn",
    "bad",
    "cursor",
    "badge-live",
    "badge-sim",
    "badge-replay",
    "badge-paused",
    "scope",
    "hbm-full",
)


@dataclass(frozen=True)
class Palette:
    """Rich styles for one theme: `heat` has eight steps for utilisation (low -> high),
    `hbm` eight steps for HBM fill (empty -> full), `roles` the named styles in ROLES."""

    heat: tuple[Style, ...]
    hbm: tuple[Style, ...]
    roles: dict[str, Style]

    def __getitem__(self, role: str) -> Style:
        return self.roles[role]


def _ramp(colours: str) -> tuple[Style, ...]:
    return tuple(Style(color=c) for c in colours.split())


def _roles(text, dim, label, title, ok, warn, bad, live, sim, replay, scope) -> dict[str, Style]:
    return {
        "text": Style(color=text),
        "dim": Style(color=dim),
        "label": Style(color=label),
        "title": Style(color=title, bold=True),
        "ok": Style(color=ok),
        "warn": Style(color=warn, bold=True),
        "bad": Style(color=bad, bold=True),
        "cursor": Style(reverse=True, bold=True),  # a glyph turns into a block of its own colour
        "badge-live": Style(color="#000000", bgcolor=live, bold=True),
        "badge-sim": Style(color="#000000", bgcolor=sim, bold=True),
        "badge-replay": Style(color="#000000", bgcolor=replay, bold=True),
        "badge-paused": Style(color="#000000", bgcolor=warn, bold=True),
        "scope": Style(color=scope, bold=True),
        "hbm-full": Style(color=warn, bold=True),
    }


PALETTES: dict[str, Palette] = {
    "dark": Palette(
        heat=_ramp("#4c566a #3f6f5a #3f8a5e #4ea363 #67bb6a #8fd175 #b7e38a #dff5a8"),
        hbm=_ramp("#3b5a7a #42678c #4a759e #5384b0 #5f93c0 #6ea3cf #83b4dc #e0a050"),
        roles=_roles(
            "#d8dee9",
            "#7b8394",
            "#9aa5b8",
            "#eceff4",
            "#a3be8c",
            "#ebcb8b",
            "#ff6b6b",
            "#a3be8c",
            "#d7a0ff",
            "#88c0d0",
            "#88c0d0",
        ),
    ),
    "light": Palette(
        heat=_ramp("#9aa0a6 #7fa88a #5f9a6e #3f8c55 #2b7c44 #1f6b38 #165a2e #0d4a24"),
        hbm=_ramp("#9db4cc #86a3c0 #6f92b4 #5981a8 #43709c #2f5f8f #1c4f82 #b35c00"),
        roles=_roles(
            "#1f2328",
            "#6e7781",
            "#57606a",
            "#0b0d10",
            "#1a7f37",
            "#9a6700",
            "#cf222e",
            "#4ac26b",
            "#c297ff",
            "#54aeff",
            "#0550ae",
        ),
    ),
    "high-contrast": Palette(
        heat=_ramp("#808080 #a0a0a0 #c0c0c0 #e0e0e0 #ffffff #ffff80 #ffff40 #ffff00"),
        hbm=_ramp("#6080ff #7090ff #80a0ff #90b0ff #a0c0ff #b0d0ff #c0e0ff #ff8000"),
        roles=_roles(
            "#ffffff",
            "#c0c0c0",
            "#ffffff",
            "#ffffff",
            "#00ff00",
            "#ffff00",
            "#ff3030",
            "#00ff00",
            "#ff80ff",
            "#00ffff",
            "#00ffff",
        ),
    ),
    # Viridis steps for utilisation; Okabe-Ito for states (no red/green pair carries meaning).
    "colorblind": Palette(
        heat=_ramp("#46327e #3f4a8a #365c8d #2c728e #21918c #28ae80 #5ec962 #fde725"),
        hbm=_ramp("#1c3d6e #224b85 #2a5a9c #356ab1 #437ac4 #558bd4 #6b9de0 #e69f00"),
        roles=_roles(
            "#e8e8e8",
            "#8c8c8c",
            "#b0b0b0",
            "#ffffff",
            "#56b4e9",
            "#e69f00",
            "#d55e00",
            "#56b4e9",
            "#cc79a7",
            "#f0e442",
            "#56b4e9",
        ),
    ),
    # No colour at all: levels are glyphs, alarms are bold / reverse.
    "mono": Palette(
        heat=(Style(),) * 8,
        hbm=(Style(),) * 8,
        roles={
            "text": Style(),
            "dim": Style(dim=True),
            "label": Style(),
            "title": Style(bold=True),
            "ok": Style(),
            "warn": Style(bold=True),
            "bad": Style(bold=True, reverse=True),
            "cursor": Style(reverse=True),
            "badge-live": Style(reverse=True),
            "badge-sim": Style(reverse=True, bold=True),
            "badge-replay": Style(reverse=True, bold=True),
            "badge-paused": Style(reverse=True, bold=True),
            "scope": Style(bold=True, underline=True),
            "hbm-full": Style(bold=True),
        },
    ),
}

TEXTUAL_THEMES: dict[str, Theme] = {
    "dark": Theme(
        name="trnwatch-dark",
        primary="#5e81ac",
        secondary="#81a1c1",
        accent="#88c0d0",
        warning="#ebcb8b",
        error="#ff6b6b",
        success="#a3be8c",
        foreground="#d8dee9",
        background="#1e222a",
        surface="#252a33",
        panel="#2e3440",
        dark=True,
    ),
    "light": Theme(
        name="trnwatch-light",
        primary="#0550ae",
        secondary="#57606a",
        accent="#0969da",
        warning="#9a6700",
        error="#cf222e",
        success="#1a7f37",
        foreground="#1f2328",
        background="#ffffff",
        surface="#f6f8fa",
        panel="#eaeef2",
        dark=False,
    ),
    "high-contrast": Theme(
        name="trnwatch-high-contrast",
        primary="#00ffff",
        secondary="#ffffff",
        accent="#ffff00",
        warning="#ffff00",
        error="#ff3030",
        success="#00ff00",
        foreground="#ffffff",
        background="#000000",
        surface="#000000",
        panel="#202020",
        dark=True,
    ),
    "colorblind": Theme(
        name="trnwatch-colorblind",
        primary="#0072b2",
        secondary="#56b4e9",
        accent="#f0e442",
        warning="#e69f00",
        error="#d55e00",
        success="#56b4e9",
        foreground="#e8e8e8",
        background="#1a1a1a",
        surface="#222222",
        panel="#2c2c2c",
        dark=True,
    ),
    "mono": Theme(
        name="trnwatch-mono",
        primary="#c0c0c0",
        secondary="#a0a0a0",
        accent="#ffffff",
        warning="#ffffff",
        error="#ffffff",
        success="#c0c0c0",
        foreground="#e0e0e0",
        background="#000000",
        surface="#000000",
        panel="#303030",
        dark=True,
    ),
}
