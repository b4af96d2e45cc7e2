"""Modal screens: the key map (`?`) and the jump prompt (`/`)."""

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from trnwatch.tui.scope import SCOPES

# The key map: shown by the help screen, the footer (where `footer` is set) and docs/tui.md.
# (keys, action, footer label, what it does)
KEYMAP: tuple[tuple[str, str, str, str], ...] = (
    ("q,f10", "quit", "Quit", "quit; the receipt is written first (ctrl+c too)"),
    ("question_mark,f1", "help", "Help", "this key map"),
    *((s.key, f"scope('{s.name}')", s.label, s.keymap_help) for s in SCOPES),
    ("enter", "drill", "", "open the selected UltraServer (cluster row) or chip (grid cell, chip line)"),
    ("escape,backspace", "up", "", "back up one scope: chip -> host -> UltraServer -> cluster"),
    ("up,down,left,right", "", "", "move the selection; scroll where there is none"),
    ("left_square_bracket,right_square_bracket", "", "", "previous / next UltraServer, host, chip or suspect"),
    ("g", "fault", "Fault", "go to the site of the fault line's finding (its chip, host or the job)"),
    ("k", "stack(False)", "", "job view: take the selected suspect's Python stack (py-spy dump on its host)"),
    ("K", "stack(True)", "", "the same with native frames (py-spy dump --native)"),
    ("slash", "jump", "Jump", "jump to a host or chip: 7, 7/2, id, instance name, stream"),
    ("s", "sort", "Sort", "sort: host number (UltraServer id), lowest util, fullest HBM, most ECC"),
    ("f", "filter", "Filter", "filter the UltraServer grid: all, idle, ECC, HBM >= 90%, stale or lost hosts"),
    ("p", "pause", "Pause", "pause / resume the refresh (collection goes on)"),
    ("t", "theme", "Theme", "theme: dark, light, high-contrast, colorblind, mono (the new one is named)"),
    ("e", "export", "Export", "export an SVG of the screen and a JSON of every scope"),
    ("pageup,pagedown", "", "", "scroll the view's detail a page up / down"),
    ("home,end", "", "", "scroll the view's detail to its top / end"),
    ("ctrl+p", "command_palette", "", "command palette: every action by name"),
)
# The scope keys share one footer label (80 columns hold every key's label no other way).
SCOPE_KEYS = tuple(s.key for s in SCOPES)

KEY_NAMES = {
    "left_square_bracket,right_square_bracket": "[ ]",
    "slash": "/",
    "question_mark,f1": "? F1",
    "q,f10": "q F10",
    "pageup,pagedown": "PgUp PgDn",
    "home,end": "Home End",
    "escape,backspace": "esc bksp",
    "up,down,left,right": "arrows",
}


def key_label(keys: str) -> str:
    return KEY_NAMES.get(keys, keys)


class HelpScreen(ModalScreen[None]):
    """The key map; any of escape, q or ? closes it."""

    BINDINGS = [Binding("escape,q,question_mark,f1", "dismiss", "Close")]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 80; max-width: 100%; height: auto; max-height: 100%;
                                  border: round $primary; background: $surface; padding: 0 1; }
    """

    def compose(self) -> ComposeResult:
        # What closes it first: the first page must say so on any screen (80x24 shows ~20 lines).
        text = Text("trnwatch keys", style="bold")
        text.append("  (esc, q or ? closes this; q on the screen quits)", style="dim")
        for keys, _action, _label, what in KEYMAP:
            text.append(f"\n{key_label(keys):>9}  ", style="bold")
            text.append(what)
        with VerticalScroll():
            yield Static(text)


class JumpScreen(ModalScreen[str | None]):
    """Asks for a host or chip to jump to; dismisses with the text, or None when cancelled."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]
    DEFAULT_CSS = """
    JumpScreen { align: center top; }
    JumpScreen > Vertical { width: 72; max-width: 100%; height: auto; border: round $primary;
                            background: $surface; margin-top: 3; padding: 0 1; }
    """

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(
                Text("Jump to a host or chip: 7, 7/2, i-0abc…, an instance name or stream label, optionally /chip")
            )
            yield Input(placeholder="host[/chip]", id="jump-input")

    answered = False

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self._answer(event.value.strip() or None)

    def action_cancel(self) -> None:
        self._answer(None)

    def _answer(self, text: str | None) -> None:
        """Dismiss once: a second Enter or Escape in the same read (a paste, a fast typist on a slow
        link) reaches this screen after its first dismissal, when a second one would pop the main
        screen (ScreenStackError)."""
        if not self.answered:
            self.answered = True
            self.dismiss(text)
