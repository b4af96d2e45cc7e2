"""Server mode against a real Prometheus (tests/prometheus_server.py) scraping the simulator's
exporter endpoints: the per-chip figures must equal those read from the same hosts' own streams."""

import asyncio
import json
import signal
import subprocess
import sys
import threading

import pytest

from trnwatch.collectors.lines import Line
from trnwatch.collectors.prometheus_sources import promql_lines
from trnwatch.ledger.ledger import Ledger
from trnwatch.session import Session, SourceSpec
from trnwatch.workloads.sim.exporter import FleetExporter, TickClock
from trnwatch.workloads.sim.fleet import SimHost
from trnwatch.workloads.sim.topology import get_topology
from tests.prometheus_server import MISSING, LocalPrometheus
from tests.recordings import recorded_lines
from tests.waiting import until, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.skipif(MISSING is not None, reason=MISSING or "")]

# Hosts 5-8 of one simulated UltraServer in the ECC scenario, frozen at tick 52: steady training,
# and host 7's chip 2 has corrected memory ECC events (2 in that period).
TICK = 52
HOSTS = [SimHost(get_topology("trn3-gen2-us"), h, 0, "ecc", 1.0) for h in (5, 6, 7, 8)]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    exporter = FleetExporter(HOSTS, TickClock(1.0, frozen_tick=TICK)).start()
    server = LocalPrometheus.start(
        tmp_path_factory.mktemp("prometheus"),
        f"127.0.0.1:{exporter.port}",
        [exporter.path(i) for i in range(len(HOSTS))],
        interval_s=1.0,
    )
    try:
        server.wait_for("count(neuroncore_utilization_ratio)", 4 * 16, 120)
        server.wait_for("count(neuron_hardware_info)", 4, 120)
        yield server
    finally:
        server.stop()
        exporter.close()


def _direct_ledger() -> Ledger:
    """The same hosts read from their own neuron-monitor streams at the same tick."""
    ledger = Ledger("live")
    for host in HOSTS:
        ledger.ingest(Line(f"host-{host.host_index}", "neuron-monitor", 1000.0, host.report_line(TICK)))
    return ledger


def test_server_mode_reports_the_same_chip_figures_as_the_hosts_own_streams(prometheus):
    direct = _direct_ledger()
    ultraservers = {host_id: "us-sim" for host_id in direct.hosts}
    ledger = Ledger("live", ultraservers)
    session = Session(ledger, [SourceSpec(prometheus.url, "promql", lambda: promql_lines(prometheus.url, 0.5))])

    async def two_answers_per_host() -> str:  # not a --duration: a loaded machine answers later
        task = asyncio.create_task(session.run())
        await until(
            lambda: len(ledger.hosts) == 4 and all(h.reports >= 2 for h in ledger.hosts.values()),
            "two answers for each of the 4 hosts",
        )
        session.stop("quit")
        return await task

    assert asyncio.run(two_answers_per_host()) == "quit"
    assert sorted(ledger.hosts) == sorted(direct.hosts)
    for host_id, want in direct.hosts.items():
        got = ledger.hosts[host_id]
        assert got.source_id == prometheus.url and got.reports >= 2 and got.simulated
        assert len(got.chips) == len(want.chips) == 4
        for g, w in zip(got.chips, want.chips, strict=True):
            assert g.hbm_bytes == w.hbm_bytes and g.hbm_capacity_bytes == w.hbm_capacity_bytes
            assert g.util_pct == pytest.approx(w.util_pct, rel=1e-12, abs=1e-9)
            for event in ("mem_ecc_corrected", "mem_ecc_uncorrected"):
                assert g.ecc.series[event].last == w.ecc.series[event].last
        assert got.memory_used_bytes == want.memory_used_bytes
    assert any(c.ecc.series["mem_ecc_corrected"].last == 2 for h in ledger.hosts.values() for c in h.chips)
    (row,) = ledger.read(ledger.last_s).cluster.ultraservers
    want_hbm = sum(c.hbm_bytes for h in direct.hosts.values() for c in h.chips)
    assert (row.ultraserver, row.hosts_total, row.hosts_fresh, row.chips) == ("us-sim", 4, 4, 16)
    assert row.hbm_used_bytes == want_hbm
    stats = ledger.sources[prometheus.url]
    assert stats.rejected == {} and stats.link == "up" and stats.gaps == 0


def test_cli_server_mode_receipt_and_replay(prometheus, tmp_path):
    receipt, recording = tmp_path / "r.json", tmp_path / "s.trnrec"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trnwatch",
            "watch",
            "--prometheus",
            prometheus.url,
            "--period",
            "0.5",
            "--headless",
            "--receipt",
            str(receipt),
            "--record",
            str(recording),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stderr: list[str] = []
    threading.Thread(target=lambda: stderr.extend(proc.stderr), daemon=True).start()
    try:  # ended by Ctrl-C once it said so and recorded every host twice (not by a --duration)
        wait_until(
            lambda: "trnwatch: 1 of 1 up\n" in stderr and len(recorded_lines(recording)) >= 2 * len(HOSTS),
            "1 of 1 up and two answers per host recorded",
            detail=lambda: "".join(stderr),
        )
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, "".join(stderr)
    doc = json.loads(receipt.read_text())
    assert doc["evidence"] == "simulated"  # the simulator's marker series travels through Prometheus
    direct = _direct_ledger()
    want = {(h.host_id, c.index): c.hbm_bytes for h in direct.hosts.values() for c in h.chips}
    assert {(c["host"], c["device"]): c["hbm_peak_bytes"] for c in doc["chips"]} == want
    replayed = tmp_path / "replayed.json"
    again = subprocess.run(
        [sys.executable, "-m", "trnwatch", "replay", str(recording), "--headless", "--receipt", str(replayed)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 0, again.stderr
    assert json.loads(replayed.read_text())["chips"] == doc["chips"]
