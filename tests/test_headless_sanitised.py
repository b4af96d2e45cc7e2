"""Headless stderr carries no terminal escape from outside (issue 9.7): ssh's own stderr and an
HTTP error body are printed as data, control characters dropped."""

import os
import stat
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.waiting import run_until_said

TRNWATCH = [sys.executable, "-m", "trnwatch"]
ESCAPES = "\x1b]52;c;aGVsbG8=\x07\x1b[2J\u009b31m\u202e"
RAW = ("\x1b", "\x07", "\u009b", "\u202e")


def test_ssh_stderr_with_escapes_reaches_headless_stderr_clean(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "ssh"  # found on PATH by `--hosts`, as the system ssh would be
    fake.write_text(
        f"#!{sys.executable}\nimport sys\nsys.stderr.write({('Permission denied ' + ESCAPES + 'x')!r} + '\\n')\n"
        "sys.exit(255)\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    result = run_until_said(
        TRNWATCH + ["watch", "--hosts", "h1", "--headless", "--receipt", str(tmp_path / "r.json")],
        ["h1 lost: "],
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
    )
    assert "h1 lost: Permission denied ]52;c;aGVsbG8=[2J31mx" in result.stderr, result.stderr
    assert not any(ch in result.stderr + result.stdout for ch in RAW)
    receipt = (tmp_path / "r.json").read_text() + (tmp_path / "r.md").read_text()
    assert not any(ch in receipt for ch in RAW)


class HostileError(BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("oops " + ESCAPES + "\n").encode()
        self.send_response(500)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_an_http_error_body_with_escapes_reaches_headless_stderr_clean(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), HostileError)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        result = run_until_said(
            TRNWATCH + ["watch", "--scrape", url, "--headless", "--receipt", str(tmp_path / "r.json")], ["HTTP 500"]
        )
    finally:
        server.shutdown()
        server.server_close()
    assert "HTTP 500" in result.stderr and "oops ]52;c;aGVsbG8=[2J31m" in result.stderr, result.stderr
    assert not any(ch in result.stderr + result.stdout for ch in RAW)
