"""The real screen in a pseudo-terminal: signals, a closed terminal, keys, and what reaches the wire.

Each test starts `trnwatch` as a child process on a pty, waits until the screen is drawn, then
does what a person or an SSH connection would do, and checks the receipt and the bytes written.
"""

import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import threading
import time

import pytest

from trnwatch.workloads.sim.fleet import SimHost
from trnwatch.workloads.sim.topology import get_topology
from tests.terminal_screen import screen_lines

pytestmark = pytest.mark.slow

TRNWATCH = [sys.executable, "-m", "trnwatch"]


class PtyApp:
    """`trnwatch args` on the slave side of a new pty (not its controlling terminal unless
    `controlling`); everything it writes is collected from the master side."""

    def __init__(self, args, size=(80, 24), stdin=None, controlling=False, env=None):
        self.master, slave = pty.openpty()
        cols, rows = size
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        env = {
            **{k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLORTERM")},
            "TERM": "xterm-256color",
            **(env or {}),
        }

        def make_controlling():  # in the child: a new session whose controlling terminal is the pty
            os.setsid()
            fcntl.ioctl(slave, termios.TIOCSCTTY, 0)

        self.proc = subprocess.Popen(
            TRNWATCH + args,
            stdin=slave if stdin is None else stdin,
            stdout=slave,
            stderr=slave,
            env=env,
            preexec_fn=make_controlling if controlling else None,
            start_new_session=not controlling,
        )
        os.close(slave)
        self.output = bytearray()
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        while True:
            try:
                ready, _, _ = select.select([self.master], [], [], 0.2)
                if not ready:
                    if self.proc.poll() is not None:
                        return
                    continue
                data = os.read(self.master, 65536)
            except (OSError, ValueError):  # EIO once the child is gone, or the master closed by the test
                return
            if not data:
                return
            with self._lock:
                self.output += data

    def text(self) -> str:
        with self._lock:
            return self.output.decode("utf-8", "replace")

    def wait_for(self, needle: str, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while needle not in self.text():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise AssertionError(f"{needle!r} never appeared; output tail: {self.text()[-500:]!r}")
            time.sleep(0.1)

    def wait_for_screen(self, chips: str = "144 chips") -> None:
        """The screen is drawn and every host has reported: the header counts `chips` (read on
        the screen the bytes leave: an update sends only the changed cells of a line)."""
        self.wait_for("ULTRASERVER")
        deadline = time.monotonic() + 120.0
        while not any(chips in line for line in screen_lines(self.text())):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise AssertionError(f"{chips!r} never appeared on screen: {screen_lines(self.text())[:3]!r}")
            time.sleep(0.1)

    def send(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def wait_exit(self, timeout_s: float = 30.0) -> int:
        return self.proc.wait(timeout=timeout_s)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        try:
            os.close(self.master)
        except OSError:
            pass


@pytest.fixture
def screen(request):
    apps = []

    def start(*args, **kwargs):
        app = PtyApp(*args, **kwargs)
        apps.append(app)
        return app

    yield start
    for app in apps:
        app.close()


def receipt_of(path) -> dict:
    return json.loads(path.read_text())


@pytest.mark.parametrize("signum, reason", [(signal.SIGHUP, "sighup"), (signal.SIGTERM, "sigterm")])
def test_signal_ends_the_screen_and_leaves_the_receipt(screen, tmp_path, signum, reason):
    receipt = tmp_path / "r.json"
    app = screen(["demo", "--receipt", str(receipt), "--duration", "120"])
    app.wait_for_screen()
    app.proc.send_signal(signum)
    assert app.wait_exit() == 0
    r = receipt_of(receipt)
    assert r["exit_reason"] == reason and r["evidence"] == "simulated" and len(r["chips"]) == 144
    assert receipt.with_suffix(".md").exists()


def test_closed_terminal_still_leaves_the_receipt(screen, tmp_path):
    receipt = tmp_path / "r.json"
    app = screen(["demo", "--receipt", str(receipt), "--duration", "120"])
    app.wait_for_screen()
    os.close(app.master)  # the terminal goes away: reads give EOF/EIO, writes EIO
    app.wait_exit()
    assert receipt_of(receipt)["exit_reason"] == "terminal-lost"


def test_hangup_of_the_controlling_terminal_leaves_the_receipt(screen, tmp_path):
    # As when an SSH connection drops: the pty master closes and the kernel hangs up the session.
    receipt = tmp_path / "r.json"
    app = screen(["demo", "--receipt", str(receipt), "--duration", "120"], controlling=True)
    app.wait_for_screen()
    os.close(app.master)
    app.wait_exit()
    assert receipt_of(receipt)["exit_reason"] in ("sighup", "terminal-lost")


@pytest.mark.parametrize("key, reason", [(b"q", "quit"), (b"\x03", "interrupt")], ids=["q", "ctrl-c"])
def test_quit_keys_end_the_screen_and_print_the_receipt_path(screen, tmp_path, key, reason):
    receipt = tmp_path / "r.json"
    app = screen(["demo", "--receipt", str(receipt), "--duration", "120"])
    app.wait_for_screen()
    app.send(key)  # the screen reads ctrl-c as a key (the terminal's ISIG is off), not as SIGINT
    assert app.wait_exit() == 0
    app.wait_for(f"receipt: {receipt}")
    assert receipt_of(receipt)["exit_reason"] == reason


@pytest.mark.parametrize("keys", [b"/7\r\r", b"/7\r\x1b"], ids=["enter-enter", "enter-escape"])
def test_fast_keys_in_one_read_never_end_the_session(screen, tmp_path, keys):
    """`/`, `7`, then Enter and Enter (or Escape), written in one go as a paste or a fast typist
    over a slow link delivers them: the prompt is answered once, closes, and the session goes on
    (it ended with exit 1, reason `error`, ScreenStackError)."""
    receipt = tmp_path / "r.json"
    app = screen(["demo", "--receipt", str(receipt), "--duration", "120"])
    app.wait_for_screen()
    app.send(keys)
    app.wait_for("Jump to a host or chip")
    deadline = time.monotonic() + 120.0
    while any("Jump to a host or chip" in line for line in screen_lines(app.text())):
        assert time.monotonic() < deadline and app.proc.poll() is None, app.text()[-2000:]
        time.sleep(0.1)
    app.send(b"q")
    assert app.wait_exit() == 0, app.text()[-2000:]
    assert receipt_of(receipt)["exit_reason"] == "quit"


def test_outside_strings_reach_the_terminal_as_plain_text(screen, tmp_path):
    """A runtime tag and an instance name carrying markup and escape sequences (an OSC 52 clipboard
    write, a colour change, a bell), piped in with `watch --stdin`: the screen shows them as text,
    and none of their control bytes is written to the terminal."""
    host = SimHost(get_topology("trn3-gen2-us"), 0, 0, "healthy")
    report = host.report(25)
    evil = "[bold red]x[/]\x1b]52;c;aGVsbG8=\x07\x1b[31mred"
    report["neuron_runtime_data"][0]["neuron_runtime_tag"] = evil
    report["instance_info"]["instance_name"] = "n\x1b]0;t\x07[link=file:///e]y[/link]"
    read_end, write_end = os.pipe()
    os.write(write_end, (json.dumps(report) + "\n").encode())
    receipt = tmp_path / "r.json"
    app = screen(["watch", "--stdin", "--receipt", str(receipt)], size=(120, 30), stdin=read_end)
    os.close(read_end)
    app.wait_for_screen("4 chips")
    app.send(b"h")  # the host view lists the runtime tags
    app.wait_for("llama3-pretrain-rank4")  # chip 1's runtime (chip 0's tag is the hostile one)
    app.wait_for("]52;c;aGVsbG8=")
    app.send(b"q")
    app.wait_exit()
    os.close(write_end)
    out = bytes(app.output)
    assert b"[bold red]x[/]]52;c;aGVsbG8=[31mred" in out  # the tag, as text
    assert b"n]0;t[link=file:///e]y[/link]" in out  # the instance name, as text
    # The only OSC sequence on the wire is Textual's own pointer shape (OSC 22); nothing from the
    # data: no clipboard write (OSC 52), no title (OSC 0), no hyperlink (OSC 8), no stray bell.
    rest = re.sub(rb"\x1b\]22;[a-z-]*\x07", b"", out)
    assert b"\x1b]" not in rest and b"\x07" not in rest
    assert receipt_of(receipt)["runtimes"][0]["tag"] == evil  # the receipt keeps the data as received


def test_without_a_terminal_the_screen_says_to_use_headless(tmp_path):
    no_tty = subprocess.run(
        TRNWATCH + ["demo", "--duration", "1", "--receipt", str(tmp_path / "r.json")],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        start_new_session=True,
    )
    assert no_tty.returncode == 2 and "the screen needs a terminal" in no_tty.stderr and "--headless" in no_tty.stderr
    piped = subprocess.run(
        TRNWATCH + ["watch", "--stdin"], input="", capture_output=True, text=True, timeout=60, start_new_session=True
    )  # no controlling terminal, stderr a pipe: nowhere to take keys from
    assert piped.returncode == 2 and "--stdin with the screen needs a terminal for keys" in piped.stderr


def test_no_color_sends_no_colour_at_all(screen, tmp_path):
    """NO_COLOR (no-color.org): the screen keeps its glyphs, reverse and bold, but sends no
    foreground or background colour (no 16, 256 or 24-bit colour codes): the terminal's own."""
    app = screen(["demo", "--receipt", str(tmp_path / "r.json")], env={"NO_COLOR": "1"})
    app.wait_for_screen()
    app.send(b"q")
    assert app.wait_exit() == 0
    colours = re.findall(r"\x1b\[[0-9;]*m", app.text())
    assert colours  # styles were sent ...
    params = [p for code in colours for p in code[2:-1].split(";")]
    # ... and none sets a colour: 30-37/40-47/90-97/100-107 (16 colours), 38/48 (256 and 24-bit).
    assert not [p for p in params if p in ("38", "48") or (p.isdigit() and int(p) in COLOUR_SGR)], set(colours)


COLOUR_SGR = {*range(30, 38), *range(40, 48), *range(90, 98), *range(100, 108)}


def test_a_dumb_terminal_is_refused_with_the_reason(screen, tmp_path):
    app = screen(["demo", "--receipt", str(tmp_path / "r.json")], env={"TERM": "dumb"})
    assert app.wait_exit() == 2
    app.wait_for("TERM=dumb: this terminal cannot draw the screen; use --headless")
    assert "\x1b[" not in app.text() and not (tmp_path / "r.json").exists()
