"""--serve-metrics under a loopback slowloris (issue 36 item 8): a real `trnwatch watch` child under a
128-descriptor limit, its job-dir follower reading 256 rank files (32 held open, the rest opened at
every poll), and 300 half-open connections kept open against its endpoint (each sends half a
request line and never ends it; one the server closes is opened again). Before, the connections
took every descriptor: the rank files met EMFILE and were reported down, the appended lines were
not read while the attack went on. Now the server serves at most 8 at once, the oldest half-open
one closed first, and counts what it closed; the follower goes on reading and GETs are answered."""

import json
import os
import resource
import signal
import socket
import subprocess
import sys
import threading

from trnwatch.workloads.sim.fleet import fleet_hosts
from trnwatch.workloads.sim.job import SimJobWriter
from trnwatch.workloads.sim.topology import get_topology
from tests.waiting import wait_until

T0 = 1_764_700_000.0
SIM = fleet_hosts(get_topology("trn3-gen1-us"), 0, "healthy", 1.0)  # 4 hosts x 64 ranks: 256 rank files
LIMIT = 128
HALF_OPEN = 300


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(port: int) -> str | None:
    """The body of GET /metrics, or None when the connection was refused, closed or timed out."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
    except OSError:
        return None
    head, _, body = data.partition(b"\r\n\r\n")
    return body.decode() if head.startswith(b"HTTP/1.0 200") else None


def _value(body: str, series: str) -> float | None:
    for line in body.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return None


class Slowloris:
    """HALF_OPEN connections to the port, each with half a request line; a closed one is opened again."""

    def __init__(self, port: int):
        self.port = port
        self.sockets: list[socket.socket] = []
        self.tried = 0  # connections tried (before, past the descriptor limit, most could not be opened)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _open(self) -> socket.socket | None:
        self.tried += 1
        try:
            s = socket.create_connection(("127.0.0.1", self.port), timeout=0.2)
            s.sendall(b"GET /metr")
            s.setblocking(False)
            return s
        except OSError:
            return None

    @staticmethod
    def _closed(s: socket.socket) -> bool:
        try:
            return s.recv(1) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True

    def _run(self) -> None:
        while not self.stop.is_set():
            kept = []
            for s in self.sockets:
                if self._closed(s):
                    s.close()
                else:
                    kept.append(s)
            while len(kept) < HALF_OPEN and not self.stop.is_set():
                if (s := self._open()) is not None:
                    kept.append(s)
            self.sockets = kept
            self.stop.wait(0.2)
        for s in self.sockets:
            s.close()


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))


def test_a_loopback_slowloris_neither_starves_the_job_source_nor_the_scrapes(tmp_path):
    run_dir = tmp_path / "run"
    writer = SimJobWriter(SIM, run_dir)
    for tick in range(2):
        writer.write_tick(tick, T0 + tick)
    port = _free_port()
    receipt = tmp_path / "receipt.json"
    child = subprocess.Popen(
        [sys.executable, "-m", "trnwatch", "watch", "--stdin", "--job-dir", str(run_dir), "--headless"]
        + ["--serve-metrics", f"127.0.0.1:{port}", "--receipt", str(receipt)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_limit,
    )
    attack = Slowloris(port)
    try:

        def lines_on_disk() -> int:
            return sum(len(p.read_bytes().splitlines()) for p in run_dir.glob("rank-*.jsonl"))

        def folded() -> float | None:
            body = _get(port)
            return None if body is None else _value(body, "trnwatch_reports_total")

        wait_until(lambda: folded() == lines_on_disk(), "the first ticks folded and served")
        attack.thread.start()
        wait_until(lambda: attack.tried >= HALF_OPEN, "the half-open connections tried")
        for tick in range(2, 5):  # written while the attack goes on: read, folded and served
            writer.write_tick(tick, T0 + tick)
        total = lines_on_disk()
        wait_until(
            lambda: folded() == total,
            "the lines appended during the attack folded, and a GET answered",
            detail=lambda: f"folded {folded()} of {total}",
        )
        body = wait_until(lambda: _get(port), "a GET answered during the attack")
        assert _value(body, 'trnwatch_metrics_connections_closed_total{reason="cap"}') > 0
        # The reserve held: a quarter of the limit is free while the attack goes on.
        assert len(os.listdir(f"/proc/{child.pid}/fd")) <= LIMIT - LIMIT // 4
        assert attack.thread.is_alive()
    finally:
        attack.stop.set()
        attack.thread.join()
        writer.close()
        child.send_signal(signal.SIGTERM)
        _, stderr = child.communicate(timeout=120)
    assert child.returncode == 143 or child.returncode == 0, stderr
    assert "--serve-metrics: more connections than it serves (8 at once" in stderr
    assert "Too many open files" not in stderr and "Traceback" not in stderr
    r = json.loads(receipt.read_text())
    assert not [s["id"] for s in r["sources"] if s["state"] == "lost" or (s["failed"] and s["id"] != "stdin")]
    ranks = [s for s in r["sources"] if s["id"].startswith("job:")]
    assert len(ranks) == 256 and sum(s["reports"] for s in ranks) == total


def test_a_job_dir_follower_short_of_descriptors_reads_again_and_says_so_instead_of_losing_ranks(tmp_path):
    """The follower itself under EMFILE: a child at its 64-descriptor limit with every free
    descriptor taken reads nothing, says the folder's source is reading again (never a rank down),
    and reads every line once descriptors are free."""
    ranks = 100
    for rank in range(ranks):
        (tmp_path / f"rank-{rank:05d}.jsonl").write_text(f'{{"rank":{rank}}}\n')
    child = f"""
import asyncio, os, resource, sys
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
from trnwatch.collectors.job_files import follow_run_dir
from trnwatch.collectors.lines import Line

async def main():
    hog = []
    while True:
        try:
            hog.append(os.open("/dev/null", os.O_RDONLY))
        except OSError:
            break
    follower = follow_run_dir(sys.argv[1], poll_s=0.01, max_held_open=0)
    lines = 0
    async for item in follower:
        if isinstance(item, Line):
            lines += 1
            if lines == {ranks}:
                print("read", lines)
                return
            continue
        print("event", item.source_id, item.event, item.error, flush=True)
        if item.event == "down":  # before: the folder's source down, every poll the same
            return
        if item.event == "connecting" and hog:
            for fd in hog:
                os.close(fd)
            hog = []
asyncio.run(main())
"""
    result = subprocess.run([sys.executable, "-c", child, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    *events, last = result.stdout.splitlines()
    assert last == f"read {ranks}", result.stdout
    assert events and all(
        e.startswith(f"event job-dir:{tmp_path} connecting out of file descriptors (EMFILE") for e in events
    )
    assert "reading again in" in events[0]
