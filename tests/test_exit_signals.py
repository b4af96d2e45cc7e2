"""Signals at any moment of a real `trnwatch watch --headless` process (issue 36 item 7): before
the session's handlers exist, during the final write, and a storm of them around the exit.
Each test awaits a condition (a reader on a FIFO, a file written, words on stderr), never a
sleep; signals go through a pidfd, so none reaches another process once the child is reaped."""

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.recordings import recorded_lines
from tests.test_recording_cli import sim_lines
from tests.waiting import wait_until

pytestmark = pytest.mark.slow

TRNWATCH = [sys.executable, "-m", "trnwatch"]
F_GETPIPE_SZ = 1032  # fcntl.F_GETPIPE_SZ, named in Python 3.10+ on Linux only


class Child:
    """A trnwatch process whose stderr a thread collects, signalled through a pidfd."""

    def __init__(self, args: list[str], **popen):
        self.proc = subprocess.Popen(TRNWATCH + args, stderr=subprocess.PIPE, text=True, **popen)
        self.pidfd = os.pidfd_open(self.proc.pid)
        self.said: list[str] = []
        self._reader = threading.Thread(target=lambda: self.said.extend(self.proc.stderr), daemon=True)
        self._reader.start()

    def stderr(self) -> str:
        return "".join(self.said)

    def send(self, signum: int) -> bool:
        """Signal the child; False once it has ended (the pidfd never names another process)."""
        try:
            signal.pidfd_send_signal(self.pidfd, signum)
            return True
        except ProcessLookupError:
            return False

    def finish(self) -> int:
        status = self.proc.wait(timeout=120)
        self._reader.join(60)
        return status

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.pidfd)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_or_sighup_before_the_session_started_says_so_and_exits_128_plus_its_number(tmp_path, signum):
    """The child is held while it starts: it reads its --ultraservers map from a FIFO (a pipe
    works there, docs say), so it is past its first imports and before its session. Before:
    killed silently by the default disposition (143, 129 in a shell; -N here)."""
    fifo = tmp_path / "map"
    os.mkfifo(fifo)
    receipt = tmp_path / "r.json"
    child = Child(
        ["watch", "--headless", "--stdin", "--ultraservers", str(fifo), "--receipt", str(receipt)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
    )
    writer = None
    try:
        # A non-blocking open for writing succeeds once a reader has the FIFO open: the child is
        # then in its read of the map, which blocks (nothing is written).
        writer = wait_until(lambda: _open_writer(fifo), "the child to open its map FIFO", detail=child.stderr)
        child.send(signum)
        status = child.finish()
    finally:
        if writer is not None:
            os.close(writer)
        child.close()
    name = signal.Signals(signum).name
    assert status == 128 + signum, child.stderr()
    assert f"trnwatch: stopped by {name} before a session started: no receipt (exit status {128 + signum})" in (
        child.stderr()
    )
    assert "Traceback" not in child.stderr()
    assert not receipt.exists()


def _open_writer(fifo: Path) -> int | None:
    try:
        return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:  # ENXIO: no reader yet
        return None


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_the_final_write_says_finishing_and_the_exit_is_the_normal_one(tmp_path, signum):
    """The child's stdout is a pipe the test filled: its last words ("receipt: ...") block after
    the receipt is written, so a signal then falls in the final phase for certain. Before: the
    signal was ignored without a word (SIGINT's KeyboardInterrupt if it fell in the window)."""
    receipt = tmp_path / "r.json"
    read_end, write_end = os.pipe()
    fill = fcntl.fcntl(write_end, F_GETPIPE_SZ)
    os.write(write_end, b"x" * fill)  # blocking, and exactly what fits: the pipe is now full
    child = Child(
        ["watch", "--headless", "--stdin", "--receipt", str(receipt)],
        stdin=subprocess.PIPE,
        stdout=write_end,
    )
    os.close(write_end)
    try:
        child.proc.stdin.write("\n".join(sim_lines(2)) + "\n")
        child.proc.stdin.close()  # EOF: the session ends, then writes its receipt
        wait_until(lambda: receipt.with_suffix(".md").exists(), "the receipt's Markdown", detail=child.stderr)
        child.send(signum)
        wait_until(lambda: "finishing" in child.stderr(), "the finishing words on stderr", detail=child.stderr)
        with os.fdopen(read_end, "rb") as out:  # let the child say where its receipt went
            printed = out.read()[fill:].decode()
        status = child.finish()
    finally:
        child.close()
    assert status == 0, child.stderr()
    assert printed.startswith(f"receipt: {receipt} "), printed
    assert "trnwatch: finishing: writing the receipt, please wait" in child.stderr()
    assert "Traceback" not in child.stderr() and "KeyboardInterrupt" not in child.stderr()
    assert json.loads(receipt.read_text())["exit_reason"] == "eof"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("run", range(4))
def test_a_storm_of_signals_around_the_exit_never_costs_the_receipt(tmp_path, signum, run):
    """Once the session has recorded a line, the signal is sent without a pause until the child
    has ended: the first ends the session, the rest fall on its end, its final write and its
    exit. Before: 4 of 15 SIGTERM runs and 3 of 12 Ctrl-C runs were killed (or a traceback) in
    the moment between the loop's handlers being removed and SIG_IGN being set."""
    receipt, recording = tmp_path / "r.json", tmp_path / "s.trnrec"
    child = Child(
        ["watch", "--headless", "--stdin", "--receipt", str(receipt), "--record", str(recording)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        child.proc.stdin.write("\n".join(sim_lines(2)) + "\n")
        child.proc.stdin.flush()  # and left open: only the signals end the session
        wait_until(lambda: recorded_lines(recording), "the session to record its first line", detail=child.stderr)
        sent = 0
        while child.proc.poll() is None and child.send(signum):
            sent += 1
        status = child.finish()
        out = child.proc.stdout.read()
    finally:
        child.proc.stdin.close()
        child.close()
    assert status == 0, (sent, child.stderr())
    assert "Traceback" not in child.stderr() and "KeyboardInterrupt" not in child.stderr()
    assert out.startswith(f"receipt: {receipt} ")
    reason = {signal.SIGTERM: "sigterm", signal.SIGINT: "interrupt"}[signum]
    assert json.loads(receipt.read_text())["exit_reason"] == reason
    assert receipt.with_suffix(".md").exists()


def test_leaving_quiets_only_cpythons_report_of_a_signal_caught_as_it_was_ignored():
    """The report a storm met in 2 of 12 Ctrl-C runs on a loaded machine ('OSError: Signal 2
    ignored due to race condition', with a traceback) is what leaving asks for: once the exit
    signals are ignored it is not printed; any other unraisable error still is. Both are raised
    for real (from a __del__, which CPython reports through the same hook), in a process of their
    own, since the signals stay ignored there."""
    program = """if True:
        from trnwatch.exit_signals import ignore_exit_signals

        class Raises:
            def __init__(self, error):
                self.error = error

            def __del__(self):
                raise self.error

        ignore_exit_signals()
        Raises(OSError("Signal 2 ignored due to race condition"))
        Raises(ValueError("a defect of ours"))
    """
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "race condition" not in done.stderr
    assert "ValueError: a defect of ours" in done.stderr
