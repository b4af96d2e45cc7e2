"""The floor for the screen benchmark: a Textual app that updates one Static per second.

    python tests/benchmarks/minimal_textual_app.py SECONDS

Run by bench_tui.py in a pseudo-terminal beside trnwatch: what any Textual screen that changes
once a second costs on the wire and in CPU, measured the same way in the same run.
"""

import sys
import time

from textual.app import App, ComposeResult
from textual.widgets import Static


class Minimal(App[None]):
    def __init__(self, duration_s: float) -> None:
        super().__init__()
        self.duration_s = duration_s

    def compose(self) -> ComposeResult:
        yield Static(id="clock")

    def on_mount(self) -> None:
        self.set_interval(1.0, self.tick)
        self.set_timer(self.duration_s, self.exit)

    def tick(self) -> None:
        self.query_one("#clock", Static).update(time.strftime("%H:%M:%S UTC", time.gmtime()))


if __name__ == "__main__":
    Minimal(float(sys.argv[1])).run()
