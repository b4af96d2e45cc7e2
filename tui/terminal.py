"""The terminal under the screen: finding one, taking keys from it, surviving its loss.

- `keys_from_terminal()` is how `neuron-monitor | trnwatch watch --stdin` gets a screen, as `less`
  does: the pipe moves to a new file descriptor (the stdin source reads that), and the terminal
  (/dev/tty) takes its place as fd 0, where Textual reads keys.
- `TrnwatchDriver` is Textual's Linux driver with one change: when the terminal goes away (SSH
  dropped, pty closed: reads give EOF or EIO, writes EIO) it tells the app instead of dying in
  its input thread or blocking forever on a full output queue, so the session still ends
  cleanly and writes its receipt.
"""

import os
import selectors
from codecs import getincrementaldecoder

from textual._xterm_parser import XTermParser
from textual.drivers.linux_driver import LinuxDriver


class NoTerminal(Exception):
    """The screen was asked for where there is no terminal; the message says what to do."""


def require_terminal() -> None:
    """Raise NoTerminal unless keys (fd 0) and the screen (stderr, where Textual draws) are a
    terminal that can draw one (not TERM=dumb: no cursor movement, as in an editor's shell)."""
    if not os.isatty(0) or not os.isatty(2):
        raise NoTerminal("the screen needs a terminal on stdin and stderr; use --headless to run without one")
    if os.environ.get("TERM") == "dumb":
        raise NoTerminal(
            "TERM=dumb: this terminal cannot draw the screen; use --headless (a progress line on stderr), "
            "or run it from a terminal that can"
        )


def no_color(environ=os.environ) -> bool:
    """NO_COLOR is set and not empty (no-color.org): the screen then sends no colour at all."""
    return bool(environ.get("NO_COLOR"))


def keys_from_terminal() -> int:
    """Move a piped stdin to a new fd and put the terminal on fd 0; return the pipe's new fd.

    The terminal is /dev/tty (the controlling terminal), or failing that the terminal stderr is
    on. Raises NoTerminal when there is none.
    """
    if os.isatty(0):
        raise NoTerminal(
            "--stdin reads reports from a pipe, but stdin is the terminal: "
            "pipe them in, e.g. `neuron-monitor | trnwatch watch --stdin`"
        )
    tty_fd = None
    try:
        tty_fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    except OSError:
        if os.isatty(2):
            tty_fd = os.open(os.ttyname(2), os.O_RDWR | os.O_NOCTTY)
    if tty_fd is None:
        raise NoTerminal(
            "--stdin with the screen needs a terminal for keys (no /dev/tty); use --headless, or run it from a terminal"
        )
    data_fd = os.dup(0)
    os.dup2(tty_fd, 0)
    os.close(tty_fd)
    return data_fd


class TerminalOutput:
    """The stream Textual draws on, made safe for a terminal that has gone away: the first
    failed write reports the loss once, and later output is dropped instead of raised."""

    def __init__(self, stream, on_lost) -> None:
        self._stream = stream
        self._on_lost = on_lost
        self.lost = False

    def _lose(self) -> None:
        if not self.lost:
            self.lost = True
            self._on_lost()

    def write(self, text: str) -> int:
        if not self.lost:
            try:
                self._stream.write(text)
            except (OSError, ValueError):
                self._lose()
        return len(text)

    def flush(self) -> None:
        if not self.lost:
            try:
                self._stream.flush()
            except (OSError, ValueError):
                self._lose()

    def fileno(self) -> int:
        return self._stream.fileno()


class TrnwatchDriver(LinuxDriver):
    """Textual's Linux driver that reports a lost terminal to the app (`App.terminal_lost`)."""

    def __init__(self, app, **kwargs) -> None:
        super().__init__(app, **kwargs)
        self._lost_reported = False
        # Textual's private stream, wrapped (TerminalOutput has the write/flush/fileno it uses).
        self._file = TerminalOutput(self._file, self._report_lost)  # type: ignore[assignment]

    def _report_lost(self) -> None:
        # Called from the input or output thread: hand over to the app's event loop.
        if not self._lost_reported:
            self._lost_reported = True
            # The driver runs only under TrnwatchApp, which Textual's types do not know.
            self._loop.call_soon_threadsafe(self._app.terminal_lost)  # type: ignore[attr-defined]

    def run_input_thread(self) -> None:
        """Textual's input loop, except that EOF or an error on the terminal means it is gone
        (Textual's own loop spins on EOF and panics on EIO)."""
        selector = selectors.SelectSelector()
        selector.register(self.fileno, selectors.EVENT_READ)
        parser = XTermParser(self._debug)
        decode = getincrementaldecoder("utf-8")().decode
        try:
            while not self.exit_event.is_set():
                for _key, mask in selector.select(0.1):
                    if not mask & selectors.EVENT_READ:
                        continue
                    try:
                        data = os.read(self.fileno, 4096)
                    except OSError:
                        data = b""
                    if not data:
                        self._report_lost()
                        return
                    for event in parser.feed(decode(data)):
                        self.process_message(event)
                for event in parser.tick():
                    self.process_message(event)
        finally:
            selector.close()
