"""The simulated fleet's job side tells the same story as its device side: the diagnosis names
the documented fault site (host 7, chip 2 = rank 30 on trn3-gen2-us)."""

import pytest

from trnwatch.collectors.job_events import parse_job_line
from trnwatch.ledger.job import JobLedger
from trnwatch.workloads.sim.fleet import fleet_hosts
from trnwatch.workloads.sim.job import SimJobWriter
from trnwatch.workloads.sim.scenarios import fault_site
from trnwatch.workloads.sim.topology import get_topology

TOPOLOGY = get_topology("trn3-gen2-us")
T0 = 1_000_000.0


def diagnose_after(tmp_path, scenario, ticks):
    hosts = fleet_hosts(TOPOLOGY, 0, scenario, 1.0)
    writer = SimJobWriter(hosts, tmp_path)
    for tick in range(ticks):
        writer.write_tick(tick, T0 + tick)
    writer.close()
    events = [parse_job_line(line) for f in sorted(tmp_path.glob("rank-*.jsonl")) for line in f.read_text().splitlines()]
    job = JobLedger()
    for event in sorted(events, key=lambda e: e.ts):
        job.ingest(event, event.ts)
    return job, job.diagnose(T0 + ticks), hosts


def test_one_rank_file_per_chip_and_healthy_run_is_steady(tmp_path):
    job, diagnosis, _ = diagnose_after(tmp_path, "healthy", 40)
    assert len(list(tmp_path.glob("rank-*.jsonl"))) == TOPOLOGY.chips == len(job.ranks)
    assert diagnosis.verdict == "steady"
    assert job.throughput_tokens_per_s(T0 + 40) == pytest.approx(1024 * 4096)


def test_compile_phase_reads_as_compiling(tmp_path):
    _, diagnosis, _ = diagnose_after(tmp_path, "healthy", 5)
    assert diagnosis.verdict == "compiling"


def test_straggler_is_the_fault_site_rank(tmp_path):
    _, diagnosis, hosts = diagnose_after(tmp_path, "straggler", 50)
    host, chip = fault_site(TOPOLOGY)
    assert diagnosis.verdict == "slow"
    (suspect,) = diagnosis.suspects
    assert (suspect.rank, suspect.host, suspect.chip) == (host * 4 + chip, hosts[host].instance_name, chip)


def test_hang_is_declared_after_the_stall_threshold_and_names_the_fault_site_rank(tmp_path):
    _, early, _ = diagnose_after(tmp_path / "a", "hang", 45)
    assert early.verdict != "stalled"  # 15 s without a step: under the 30 s floor
    _, diagnosis, _ = diagnose_after(tmp_path / "b", "hang", 70)
    assert diagnosis.verdict == "stalled"
    assert [s.rank for s in diagnosis.suspects] == [30]
    assert diagnosis.suspects[0].region == "dataloader"


def test_host_loss_reports_that_hosts_ranks_dead(tmp_path):
    _, diagnosis, _ = diagnose_after(tmp_path, "host-loss", 60)
    assert diagnosis.verdict == "dead"
    assert sorted(s.rank for s in diagnosis.suspects) == [28, 29, 30, 31]
