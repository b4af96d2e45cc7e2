"""The Prometheus sources over real HTTP on 127.0.0.1: scraping the simulator's exporter
endpoints, failing endpoints as that source's state, and a bearer token that never lands on disk."""

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from trnwatch.collectors.backoff import Backoff
from trnwatch.collectors.prometheus import parse_prometheus_line
from trnwatch.collectors.prometheus_sources import scrape_lines
from trnwatch.ledger.ledger import Ledger
from trnwatch.session import Session, SourceSpec
from trnwatch.workloads.sim.exporter import FleetExporter, TickClock
from trnwatch.workloads.sim.fleet import SimHost
from trnwatch.workloads.sim.topology import get_topology
from tests.recordings import plain_bytes
from tests.sshd import free_port
from tests.waiting import run_until_said, until, wait_until

pytestmark = pytest.mark.slow

GEN2 = get_topology("trn3-gen2-us")


def test_scraped_hosts_flow_while_dead_endpoints_are_lost_and_retried():
    healthy = FleetExporter(
        [SimHost(GEN2, h, 0, "healthy", 0.25) for h in range(3)], TickClock(0.25, start_tick=20)
    ).start()
    # Host 7 of the host-loss scenario goes silent at tick 45: its endpoint starts answering 503,
    # 4 s after it starts (16 ticks), time enough for a loaded machine to scrape it first.
    losing = FleetExporter([SimHost(GEN2, 7, 0, "host-loss", 0.25)], TickClock(0.25, start_tick=29)).start()
    refused = f"http://127.0.0.1:{free_port()}/metrics"
    missing = f"http://127.0.0.1:{healthy.port}/hosts/99/metrics"
    urls = [healthy.url(i) for i in range(3)] + [losing.url(0), refused, missing]
    ledger = Ledger("live")
    backoff = Backoff(first_s=0.2, max_s=0.4)
    session = Session(
        ledger, [SourceSpec(u, "prometheus", lambda u=u: scrape_lines(u, 0.25, None, backoff)) for u in urls]
    )

    def link_error(url: str) -> str:
        stats = ledger.sources.get(url)
        return (stats.link_error or "") if stats else ""

    def everything_seen() -> bool:  # the session runs until then, not for a fixed time
        stats = ledger.sources
        # A starved scrape can time out and retry; what is checked is that healthy hosts flow
        # (connected with 6 reports each) while the dead endpoints are lost, all at one moment.
        healthy_up = all(u in stats for u in urls[:3]) and all(
            state == "connected" for u, state in ledger.source_states(time.time()).items() if u in urls[:3]
        )
        return (
            healthy_up
            and all(u in stats for u in urls)
            and all(stats[u].reports >= 6 for u in urls[:3])
            and stats[losing.url(0)].reports >= 1
            and "HTTP 503" in link_error(losing.url(0))
            and stats[losing.url(0)].connects >= 2
            and stats[refused].connects >= 2
            and "HTTP 404" in link_error(missing)
        )

    async def run() -> str:
        task = asyncio.create_task(session.run())
        await until(everything_seen, "6 reports per healthy host, the lost host's 503, retries of the dead ones")
        states.update(ledger.source_states(time.time()))  # at the moment everything was seen
        session.stop("quit")
        return await task

    states: dict[str, str] = {}
    try:
        assert asyncio.run(run()) == "quit"
    finally:
        healthy.close()
        losing.close()
    for url in urls[:3]:
        assert states[url] == "connected"
    assert len(ledger.hosts) == 4 and all(len(h.chips) == 4 for h in ledger.hosts.values())
    assert states[losing.url(0)] in ("lost", "reconnecting")
    assert "Connection refused" in link_error(refused)
    assert all(s.rejected == {} for s in ledger.sources.values())


def _echo(auth: str, how: str) -> bytes:
    """The Authorization header echoed in an error body: as is, JSON-escaped as many JSON
    encoders write it (`/` as `\\/`: PHP's json_encode, Go's with SetEscapeHTML), or URL-encoded."""
    if how == "json":
        return json.dumps({"status": "error", "error": f"invalid credentials: {auth}"}).replace("/", "\\/").encode()
    if how == "url":
        return f"denied: redirect_uri=/login?auth={urllib.parse.quote(auth, safe='')}".encode()
    return f"upstream refused: Authorization: {auth}".encode()


class _FakePrometheus(BaseHTTPRequestHandler):
    """Answers instant queries with one host; the first request fails (401) echoing its
    Authorization header back in the form `echo` says, as a careless proxy might."""

    seen_authorization: list[str] = []
    failed_once = False
    echo = "raw"

    def do_GET(self) -> None:  # noqa: N802
        auth = self.headers.get("Authorization", "")
        type(self).seen_authorization.append(auth)
        if not type(self).failed_once:
            type(self).failed_once = True
            body = _echo(auth, type(self).echo)
            self.send_response(401)
        else:
            rows = []
            if "neuron_hardware_info" in self.path:
                rows = [
                    {
                        "metric": {
                            "__name__": "neuron_hardware_info",
                            "instance_id": "i-tok",
                            "neuron_device_count": "1",
                            "neuroncore_per_device_count": "4",
                            "neuron_device_memory_size": "1024",
                        },
                        "value": [0, "1"],
                    }
                ]
            body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": rows}}).encode()
            self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args):  # noqa: A002
        pass


@pytest.mark.parametrize("echo", ["raw", "json", "url"])
def test_bearer_token_is_sent_but_never_written_anywhere(tmp_path, monkeypatch, echo):
    token = "tok/7c1f+2a9e5d=DO/NOT/LEAK"
    monkeypatch.setattr(_FakePrometheus, "echo", echo)
    monkeypatch.setattr(_FakePrometheus, "failed_once", False)
    monkeypatch.setattr(_FakePrometheus, "seen_authorization", [])
    token_file = tmp_path / "secrets" / "token"
    token_file.parent.mkdir()
    token_file.write_text(token + "\n")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakePrometheus)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    home = tmp_path / "home"
    env = {**os.environ, "HOME": str(home), "XDG_STATE_HOME": str(home / "state")}
    env.pop("TRNWATCH_PROMETHEUS_TOKEN", None)
    try:
        result = run_until_said(
            [
                sys.executable,
                "-m",
                "trnwatch",
                "watch",
                "--prometheus",
                f"http://127.0.0.1:{server.server_port}",
                "--prometheus-token-file",
                str(token_file),
                "--period",
                "0.3",
                "--headless",
                "--record",
                str(home / "session.trnrec"),
            ],
            ["<redacted>", "1 of 1 up"],
            cwd=tmp_path,
            env=env,
        )
    finally:
        server.shutdown()
        server.server_close()
    assert result.returncode == 0, result.stderr
    assert set(_FakePrometheus.seen_authorization) == {f"Bearer {token}"}
    assert "<redacted>" in result.stderr  # the echoed token was masked in the lost-source message
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p != token_file]
    assert any(p.suffix == ".json" for p in written) and any(p.suffix == ".md" for p in written)
    assert (home / "session.trnrec").exists()
    forms = {token, token.replace("/", "\\/"), urllib.parse.quote(token, safe=""), "7c1f", "2a9e5d"}
    for path in written:  # a recording is compressed: searched decompressed
        assert not [f for f in forms if f.encode() in plain_bytes(path)], path
    assert not [f for f in forms if f in result.stdout + result.stderr]
    receipt = json.loads(next(p for p in written if p.suffix == ".json").read_text())
    assert [h["host"] for h in receipt["hosts"]] == ["i-tok"]
    (source,) = receipt["sources"]
    assert source["kind"] == "promql" and source["gaps"] == 0


def test_cli_scrapes_urls_from_a_file(tmp_path):
    exporter = FleetExporter(
        [SimHost(GEN2, h, 1, "healthy", 0.3) for h in range(2)], TickClock(0.3, start_tick=20)
    ).start()
    urls = tmp_path / "exporters"
    urls.write_text(f"# two hosts\n{exporter.url(0)}\n{exporter.url(1)}  # second\n")
    try:
        result = run_until_said(
            [
                sys.executable,
                "-m",
                "trnwatch",
                "watch",
                "--scrape-file",
                str(urls),
                "--period",
                "0.3",
                "--headless",
                "--receipt",
                str(tmp_path / "r.json"),
            ],
            ["2 of 2 up"],
        )
    finally:
        exporter.close()
    assert result.returncode == 0, result.stderr
    assert "2 of 2 up" in result.stderr
    doc = json.loads(Path(tmp_path / "r.json").read_text())
    assert sorted(s["id"] for s in doc["sources"]) == sorted([exporter.url(0), exporter.url(1)])
    assert len(doc["chips"]) == 8 and doc["evidence"] == "simulated"


def _get(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return response.read()
    except OSError:
        return None


def test_sim_serves_the_exporter_format_until_its_host_is_lost(tmp_path):
    config = tmp_path / "monitor.json"
    config.write_text(
        json.dumps(
            {
                "period": "200ms",
                "neuron_runtimes": [{"metrics": [{"type": "neuroncore_counters"}, {"type": "memory_used"}]}],
                "system_metrics": [{"type": "memory_info"}],
            }
        )
    )
    port = free_port()
    # Host 7 is the host-loss scenario's lost host: silent from tick 45 (9 s at 200 ms, time enough
    # for a loaded machine to start the process and answer once before the host is lost).
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trnwatch",
            "sim",
            "-c",
            str(config),
            "--host",
            "7",
            "--scenario",
            "host-loss",
            "--serve-prometheus",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        body = wait_until(
            lambda: _get(f"http://127.0.0.1:{port}/metrics") or proc.poll() is not None, "a /metrics answer"
        )
        assert body is not True, f"the simulator ended before answering: {proc.stderr.read()}"
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    (report,) = parse_prometheus_line("prometheus", json.dumps({"body": body.decode(), "interval_s": 0.2}))
    assert report.trnwatch_simulator.host == 7 and report.neuron_hardware_info.neuron_device_count == 4
    assert b"process_cpu_seconds_total" in body  # the exporter process's own series, as in real scrapes
    assert out == ""  # served over HTTP, not written to stdout
    assert proc.returncode == 1 and "host 7 lost at tick 45" in err
