"""Job scope joined with device telemetry, and `watch --job-dir` as a job-only session."""

import json
import subprocess
import sys

from trnwatch.collectors.lines import Line
from trnwatch.ledger.ledger import Ledger
from trnwatch.tui.job_model import job_model
from trnwatch.workloads.sim.fleet import fleet_hosts
from trnwatch.workloads.sim.job import SimJobWriter
from trnwatch.workloads.sim.topology import get_topology
from tests.tui_fleet import SCENARIO_TICKS, now_at, scenario_ledger

T0 = 1_700_000_000.0  # a plausible job time: the ledger rejects stamps over 10 years old


def test_stall_suspect_carries_its_chips_utilisation_against_peers(tmp_path):
    topology = get_topology("trn3-gen1-us")  # 4 hosts x 16 chips; fault site host 3 chip 2
    hosts = fleet_hosts(topology, 0, "hang", 1.0)
    writer = SimJobWriter(hosts, tmp_path)
    ledger = Ledger("simulated")
    for tick in range(70):
        writer.write_tick(tick, T0 + tick)
        for h in hosts:
            ledger.ingest(Line(f"sim-host-{h.host_index:02d}", "neuron-monitor", T0 + tick, h.report_line(tick)))
    writer.close()
    for f in sorted(tmp_path.glob("rank-*.jsonl")):
        for text in f.read_text().splitlines():
            ledger.ingest(Line(f"job:{f.name}", "job", json.loads(text)["ts"], text))
    diagnosis = ledger.job_diagnosis(T0 + 69)
    assert diagnosis.verdict == "stalled"
    (suspect,) = diagnosis.suspects
    assert (suspect.rank, suspect.host, suspect.chip) == ((3 * 16 + 2) * 4, hosts[3].instance_name, 2)  # its core 0
    # hung job: the suspect's chip and its peers all idle, and the evidence says so with numbers
    assert suspect.evidence.chip_util_pct == 0.0 and suspect.evidence.peer_chip_util_median_pct == 0.0


def test_watch_job_dir_alone_gives_the_job_scope(tmp_path):
    hosts = fleet_hosts(get_topology("trn2.48xlarge"), 0, "healthy", 1.0)
    writer = SimJobWriter(hosts, tmp_path / "run")
    for tick in range(30):
        writer.write_tick(tick, T0 + tick)
    writer.close()
    receipt = tmp_path / "r.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "trnwatch",
            "watch",
            "--job-dir",
            str(tmp_path / "run"),
            "--headless",
            "--duration",
            "2",
            "--receipt",
            str(receipt),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr
    r = json.loads(receipt.read_text())
    # one rank per logical core: 16 chips x 4 at LNC=2
    assert r["job"]["ranks"]["seen"] == 64 and r["job"]["parallel"] == {"tp": 64, "pp": 1, "dp": 1}
    assert r["chips"] == [] and len(r["sources"]) == 64
    assert all(s["reports"] > 0 and s["rejected"] == 0 for s in r["sources"])


def test_the_job_is_judged_once_per_read_model_and_every_reader_gets_that_judgement():
    # The receipt's and snapshot's job section, the job view and the findings read one diagnosis
    # (ReadModel.diagnosis), not one judged again per reader: the same suspect records, not equal copies.
    ledger = scenario_ledger("hang")
    read = ledger.read(now_at(SCENARIO_TICKS["hang"]))
    diagnosis, summary = read.diagnosis, read.job_summary
    assert diagnosis is not None and summary is not None and diagnosis.suspects
    assert all(a is b for a, b in zip(summary.suspects, diagnosis.suspects, strict=True))
    assert (summary.verdict, summary.reason) == (diagnosis.verdict, diagnosis.reason)
    assert job_model(ledger.job, read).diagnosis is diagnosis
    assert ledger.job_diagnosis(read.now_s) is diagnosis  # the same "now": the same read model
