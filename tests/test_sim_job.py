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


def simulated_receipt(scenario: str, ticks: int) -> dict:
    """The receipt of `ticks` reports of every host of trn2.48xlarge and its job's rank files, folded
    as the demo folds them (one line per report and per job event, received when written)."""
    import json

    from trnwatch.collectors.lines import Line
    from trnwatch.ledger.ledger import Ledger
    from trnwatch.ledger.receipt import build_receipt
    from trnwatch.workloads.sim.job import rank_events
    from trnwatch.workloads.sim.source import host_source_id

    topology = get_topology("trn2.48xlarge")
    ledger = Ledger("simulated")
    for tick in range(ticks):
        for host in fleet_hosts(topology, 0, scenario, 1.0):
            ledger.ingest(Line(host_source_id(host), "neuron-monitor", T0 + tick, host.report_line(tick)))
            for chip in range(topology.chips_per_host):
                for core in range(topology.cores_per_chip):
                    for e in rank_events(host, chip, core, tick, T0 + tick):
                        ledger.ingest(Line(f"job:rank-{e['rank']:05d}.jsonl", "job", T0 + tick, json.dumps(e)))
    return json.loads(build_receipt(ledger, "eof", written_at_s=0.0).to_json())


def test_a_straggler_slows_every_ranks_step_so_compare_sees_fewer_tokens_per_s():
    from trnwatch.ledger.compare import compare

    healthy, straggler = simulated_receipt("healthy", 90), simulated_receipt("straggler", 90)
    result = compare(healthy, straggler)
    assert not result.refused, result.mismatched
    tokens = next(f for f in result.figures if f.name == "steady tokens/s")
    # Steady from tick 20; from tick 30 a step takes 1.6 ticks: the window's mean falls, beyond noise.
    assert tokens.candidate < tokens.baseline and tokens.exceeds_noise
    assert tokens.change_pct is not None and tokens.change_pct < -20
    step_time = next(f for f in result.figures if f.name == "step time p50")
    assert step_time.candidate == pytest.approx(1.6) and step_time.baseline == pytest.approx(1.0)


def test_runtime_tags_and_pids_name_the_jobs_ranks_on_their_chip(tmp_path):
    job, _, hosts = diagnose_after(tmp_path, "healthy", 1)
    for host in hosts:
        for entry in host.report(0)["neuron_runtime_data"]:
            tagged = int(entry["neuron_runtime_tag"].removeprefix("llama3-pretrain-rank"))
            rank = job.ranks[tagged]
            assert rank.core is not None and rank.core % TOPOLOGY.cores_per_chip == 0  # the chip's first rank
            assert (rank.host, rank.pid) == (host.instance_name, entry["pid"])
            on_chip = [r for r in job.ranks.values() if r.host == host.instance_name and r.chip == rank.chip]
            assert {r.pid for r in on_chip} == {entry["pid"]} and len(on_chip) == TOPOLOGY.cores_per_chip
    fault_host, fault_chip = fault_site(TOPOLOGY)
    tags = [e["neuron_runtime_tag"] for e in hosts[fault_host].report(0)["neuron_runtime_data"]]
    assert tags[fault_chip] == f"llama3-pretrain-rank{fault_rank(TOPOLOGY)}" == "llama3-pretrain-rank120"
