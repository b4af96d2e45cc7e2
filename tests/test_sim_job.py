"""The simulated fleet's job side tells the same story as its device side: the diagnosis names
the documented fault site (host 7, chip 2 = rank 30 on trn3-gen2-us)."""

import pytest

from trnwatch.collectors.job_events import parse_job_line
from trnwatch.ledger.job import JobLedger
from trnwatch.workloads.sim.fleet import fleet_hosts
from trnwatch.workloads.sim.job import SimJobWriter, fault_rank, job_rank
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
    events = [
        parse_job_line(line) for f in sorted(tmp_path.glob("rank-*.jsonl")) for line in f.read_text().splitlines()
    ]
    job = JobLedger()
    for event in sorted(events, key=lambda e: e.ts):
        job.ingest(event, event.ts)
    return job, job.diagnose(T0 + ticks), hosts


def test_one_rank_file_per_logical_core_and_healthy_run_is_steady(tmp_path):
    job, diagnosis, _ = diagnose_after(tmp_path, "healthy", 40)
    assert len(list(tmp_path.glob("rank-*.jsonl"))) == 576 == TOPOLOGY.chips * TOPOLOGY.cores_per_chip == len(job.ranks)
    assert job.run_start.world_size == 576 and job.run_start.lnc == 2
    rank = job.ranks[fault_rank(TOPOLOGY)]
    assert (rank.rank, rank.chip, rank.core) == (120, 2, 8)  # host 7, chip 2, its first logical core
    assert {(r.host, r.chip) for r in job.ranks.values() if r.rank // 4 == 30} == {(rank.host, 2)}
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
    assert (suspect.rank, suspect.host, suspect.chip) == (
        job_rank(TOPOLOGY, host, chip, 0),
        hosts[host].instance_name,
        chip,
    )


def test_hang_is_late_then_stalled_and_names_the_fault_site_rank(tmp_path):
    # the last step ends at tick 29 (T0 + 29); heartbeats at even ticks carry the frozen regions
    _, early, hosts = diagnose_after(tmp_path / "a", "hang", 36)
    assert early.verdict == "late"  # 7 s without a step: over the 5 s floor, under the 30 s one
    assert [(s.rank, s.host, s.chip) for s in early.suspects] == [(120, hosts[7].instance_name, 2)]
    _, diagnosis, _ = diagnose_after(tmp_path / "b", "hang", 70)
    assert diagnosis.verdict == "stalled"
    assert [s.rank for s in diagnosis.suspects] == [120]
    assert diagnosis.suspects[0].region == "dataloader"


def test_host_loss_reports_that_hosts_ranks_dead(tmp_path):
    _, diagnosis, _ = diagnose_after(tmp_path, "host-loss", 60)
    assert diagnosis.verdict == "dead"
    assert sorted(s.rank for s in diagnosis.suspects) == list(range(7 * 16, 8 * 16))  # host 7's 16 ranks
