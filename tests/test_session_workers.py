"""Every worker ends with the session (issue 9.6): a scrape target that answers one byte at a
time, or an ssh that ignores its stdin, must not keep the process alive after the receipt, and
Ctrl-C then must not print a traceback."""

import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

TRNWATCH = [sys.executable, "-m", "trnwatch"]


class SlowDrip(BaseHTTPRequestHandler):
    """Answers 200, then one byte of a never-ending body every 50 ms until the client leaves."""

    def do_GET(self):
        self.server.requests.set()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        try:
            while not self.server.closing.wait(0.05):
                self.wfile.write(b"#")
                self.wfile.flush()
        except OSError:
            pass  # the client went away

    def log_message(self, *args):
        pass


@pytest.fixture
def slow_drip():
    server = ThreadingHTTPServer(("127.0.0.1", 0), SlowDrip)
    server.requests, server.closing = threading.Event(), threading.Event()
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.closing.set()
    server.shutdown()
    server.server_close()


def test_a_slow_drip_scrape_target_does_not_hold_the_exit_and_ctrl_c_prints_no_traceback(slow_drip, tmp_path):
    url = f"http://127.0.0.1:{slow_drip.server_address[1]}/metrics"
    proc = subprocess.Popen(
        TRNWATCH + ["watch", "--scrape", url, "--headless", "--receipt", str(tmp_path / "r.json")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert slow_drip.requests.wait(120), "the scrape worker never reached the slow-drip target"
        proc.send_signal(signal.SIGTERM)  # the session ends while the worker is stuck in its read
        receipt_line = proc.stdout.readline()  # printed once the session is over
        assert receipt_line.startswith("receipt: "), proc.stderr.read()
        proc.send_signal(signal.SIGINT)  # what a user does when a finished monitor does not exit
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert proc.returncode == 5  # its one source never delivered a line: nothing was measured (README)
    assert (tmp_path / "r.json").exists()


def test_ctrl_c_before_the_session_handlers_is_a_quiet_exit_130(monkeypatch, capsys):
    from trnwatch import cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_dispatch", interrupted)
    assert cli.main(["schema", "receipt"]) == 130
    assert capsys.readouterr().err == "trnwatch: interrupted\n"
