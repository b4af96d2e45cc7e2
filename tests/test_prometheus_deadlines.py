"""A slow-drip scrape target (issue 9.6): a peer that sends one byte per second never times out a
per-read socket timeout, so every request has a total deadline and ends with the session; the
process exits after its receipt, and Ctrl-C leaves no traceback. A real HTTP peer on 127.0.0.1."""

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading

import pytest

from trnwatch.collectors.prometheus_http import FetchError, fetch_async

pytestmark = pytest.mark.slow

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100000\r\n\r\n" + b"#" * 100000


class DripServer:
    """Answers every connection one byte per second, from the status line on, until stopped."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/metrics"
        self.stop = threading.Event()
        self.requested = threading.Event()  # a request has been read
        self.closed_by_peer = threading.Event()  # the client hung up mid-drip
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn: socket.socket) -> None:
        with conn:
            conn.recv(4096)
            self.requested.set()
            for i in range(len(ANSWER)):
                if self.stop.wait(1.0):
                    return
                try:
                    conn.sendall(ANSWER[i : i + 1])
                except OSError:
                    self.closed_by_peer.set()
                    return

    def close(self) -> None:
        self.stop.set()
        self.listener.close()


@pytest.fixture
def drip():
    server = DripServer()
    yield server
    server.close()


def test_a_dripping_answer_ends_at_the_total_deadline_and_its_thread_with_it(drip):
    before = set(threading.enumerate())

    async def go():
        with pytest.raises(FetchError, match="did not finish answering within 1.5 s"):
            await fetch_async(drip.url, None, 1.5, 10**6)

    asyncio.run(go())
    assert drip.closed_by_peer.wait(30)  # the request's socket was shut, not left to drip
    for thread in set(threading.enumerate()) - before:
        thread.join(30)
        assert not thread.is_alive(), thread.name


def test_a_cancelled_request_ends_its_thread(drip):
    before = set(threading.enumerate())

    async def go():
        task = asyncio.create_task(fetch_async(drip.url, None, 60.0, 10**6))
        await asyncio.to_thread(drip.requested.wait, 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert drip.closed_by_peer.wait(30)
    for thread in set(threading.enumerate()) - before:
        thread.join(30)
        assert not thread.is_alive(), thread.name


def _watch(drip: DripServer, tmp_path, duration: str | None) -> subprocess.Popen:
    argv = [
        sys.executable,
        "-m",
        "trnwatch",
        "watch",
        "--scrape",
        drip.url,
        "--period",
        "1",
        "--headless",
        "--receipt",
        str(tmp_path / "r.json"),
    ]
    if duration is not None:
        argv += ["--duration", duration]
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def test_a_dripping_scrape_target_does_not_keep_the_process_alive_after_its_receipt(drip, tmp_path):
    proc = _watch(drip, tmp_path, "2")
    try:
        # --duration 2, and the request's deadline is http_timeout_s(1 s) = 2 s: the drip goes
        # on for 100,000 s, so only the deadline and the session's end can stop the process.
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 5, err  # the drip never completed a response: nothing was measured
    assert "Traceback" not in err
    receipt = json.loads((tmp_path / "r.json").read_text())
    assert receipt["exit_reason"] == "duration"


def test_ctrl_c_during_a_dripping_scrape_leaves_a_receipt_and_no_traceback(drip, tmp_path):
    proc = _watch(drip, tmp_path, None)
    try:
        assert drip.requested.wait(30), "no request reached the drip server"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert json.loads((tmp_path / "r.json").read_text())["exit_reason"] == "interrupt"
