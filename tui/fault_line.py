"""The fault line: the most severe finding, culprit first, on every view, fitted to the width.

`LATE rank 30 sim-trn3-gen2-us-07/2 dataloader · 143 ranks in collective:all_reduce  +2 more`

Nothing that names the culprit (the label, rank, host/chip, region) is ever cut: to fit a
narrow screen the other parts give way whole, in this order: the count of further findings,
the core, the story's long form (for its short form), the story; a screen too narrow even for
the culprit's names gets them on two lines (`fault_lines`). Strings from outside (host names,
regions, errors) are cleaned first.
"""

from rich.style import Style
from rich.text import Text

from trnwatch.ledger import Finding, Site
from trnwatch.themes.palettes import Palette
from trnwatch.tui.scope import styled, wrapped
from trnwatch.tui.text import clean

SEVERITY_ROLE = {"critical": "bad", "error": "bad", "warning": "warn"}
NO_FINDING = ("no findings", " · no stall, leak, uncorrected ECC, lost host or rejected input")


def _site_parts(site: Site) -> tuple[list[str], str | None, str | None]:
    """(the parts naming the culprit, kept whole; the core, which may give way; the region, kept)."""
    names = []
    if site.rank is not None:
        names.append(f"rank {site.rank}")
    if site.host:
        names.append(clean(site.host) + ("" if site.chip is None else f"/{site.chip}"))
    elif site.chip is not None:
        names.append(f"chip {site.chip}")
    elif site.source_id:
        names.append(clean(site.source_id))
    core = None if site.core is None else f"core {site.core}"
    return names, core, (clean(site.region) if site.region else None)


def fault_line(findings: tuple[Finding, ...] | list[Finding], width: int, pal: Palette) -> Text:
    """The line for `findings` (most severe first) in `width` cells."""
    if not findings:
        head, rest = NO_FINDING
        return styled((" " + head, pal["ok"]), (rest if len(head) + len(rest) + 1 <= width else "", pal["dim"]))
    top = findings[0]
    role = pal[SEVERITY_ROLE[top.severity]]
    names, core, region = _site_parts(top.site)
    more = len(findings) - 1
    # Each optional part: its forms from longest to "" (left out); they give way in this order.
    optional: dict[str, list[str]] = {
        "more": [f"  +{more} more", ""] if more else [""],
        "core": [f" {core}", ""] if core else [""],
        "what": [f" · {clean(top.what)}", *([f" · {clean(top.short)}"] if top.short else []), ""],
    }
    chosen = {name: 0 for name in optional}
    base = 1 + len(top.label) + sum(1 + len(part) for part in names) + (1 + len(region) if region else 0)

    def length() -> int:
        return base + sum(len(optional[name][chosen[name]]) for name in optional)

    for name in ("more", "core", "what"):
        while length() > width and chosen[name] < len(optional[name]) - 1:
            chosen[name] += 1
    line = styled((" " + top.label, role + Style(reverse=True) if top.severity == "critical" else role))
    for part in names:
        line.append(" " + part, pal["title"])
    line.append(optional["core"][chosen["core"]], pal["title"])
    if region:
        line.append(" " + region, pal["warn"])
    line.append(optional["what"][chosen["what"]], pal["text"])
    line.append(optional["more"][chosen["more"]], pal["dim"])
    return line


def fault_lines(findings: tuple[Finding, ...] | list[Finding], width: int, pal: Palette) -> list[Text]:
    """`fault_line`, broken at a space onto a second line when even the culprit's names do not fit."""
    return wrapped(fault_line(findings, width, pal), width, indent=2)
