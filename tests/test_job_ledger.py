"""JobLedger rules: throughput without double counting, percentiles, stall / dead / straggler,
phases, restarts, bounded memory. Events go through the real line parser."""

import json

import msgspec
import pytest

from trnwatch.collectors.job_events import SCHEMA_VERSION, parse_job_line
from trnwatch.ledger.job import (
    COLLECTIVE_WINDOW,
    STEP_WINDOW,
    WAIT_WINDOW_STEPS,
    JobEventRejected,
    JobLedger,
    percentile,
)
from trnwatch.ledger.rules import Rules

T0 = 1_800_000_000.0


def ev(kind: str, rank: int, ts: float, run: str = "run", **fields):
    return parse_job_line(
        json.dumps({"v": SCHEMA_VERSION, "ts": ts, "run": run, "rank": rank, "event": kind, **fields})
    )


def start(rank: int, ts: float, world: int = 16, restart: int = 0, host: str | None = None):
    return ev(
        "run_start",
        rank,
        ts,
        world_size=world,
        host=host or f"trn3-{rank // 4:02d}",
        pid=1000 + rank,
        local_rank=rank % 4,
        backend="neuron",
        core=(rank % 4) * 2,
        chip=rank % 4,
        model={"name": "llama", "params": 8_000_000_000},
        precision="bf16",
        global_batch=64,
        micro_batch=1,
        seq_len=4096,
        parallel={"tp": min(4, world), "pp": 1, "dp": world // min(4, world)},
        versions={"neuronx-distributed": "0.17.26814"},
        restart=restart,
        lnc=2,
    )


def step(rank, ts, n, step_time_s=1.0, tokens=64 * 4096, compute_s=0.8, loss=2.0):
    return ev("step", rank, ts, step=n, step_time_s=step_time_s, compute_s=compute_s, tokens=tokens, loss=loss)


def phase(rank, ts, name, state, **fields):
    return ev("phase", rank, ts, phase=name, state=state, **fields)


def heartbeat(rank, ts, n, region, since):
    return ev("heartbeat", rank, ts, step=n, region=region, region_since=since)


def collective(rank, ts, n, wait_s, op="all_reduce", latency_s=None):
    return ev(
        "collective",
        rank,
        ts,
        op=op,
        bytes=1 << 20,
        latency_s=wait_s + 0.01 if latency_s is None else latency_s,
        wait_s=wait_s,
        step=n,
    )


def fold(ledger: JobLedger, events) -> JobLedger:
    for event in events:
        ledger.ingest(event, event.ts)
    return ledger


def running_job(ranks: int, steps: int, step_time_s: float = 1.0) -> list:
    """`ranks` ranks that started, warmed up, and completed `steps` steady steps in lockstep."""
    events = [start(r, T0, world=ranks) for r in range(ranks)]
    events += [phase(r, T0 + 1, "steady", "begin") for r in range(ranks)]
    for n in range(1, steps + 1):
        events += [step(r, T0 + 1 + n * step_time_s, n, step_time_s) for r in range(ranks)]
    return events


def test_nearest_rank_percentiles():
    values = list(range(1, 101))
    assert (percentile(values, 50), percentile(values, 90), percentile(values, 99)) == (50, 90, 99)
    assert percentile([], 50) is None
    assert percentile([7.0], 99) == 7.0


def test_throughput_counts_the_job_tokens_once_from_the_lowest_rank():
    ledger = fold(JobLedger(), running_job(ranks=4, steps=20, step_time_s=0.5))
    now_s = T0 + 12
    # Every rank reports the whole job's 64 x 4096 tokens per step; four ranks must not make 4x.
    assert ledger.throughput_tokens_per_s(now_s) == pytest.approx(64 * 4096 / 0.5)
    assert ledger.reference_rank(now_s) == 0


def test_throughput_moves_to_the_next_rank_when_the_lowest_is_dead():
    events = [start(r, T0, world=2) for r in range(2)] + [phase(r, T0, "steady", "begin") for r in range(2)]
    events += [heartbeat(0, T0 + 1, 1, "compute", T0), heartbeat(1, T0 + 1, 1, "compute", T0)]
    events += [step(0, T0 + 2, 1, step_time_s=1.0)]
    events += [step(1, T0 + 2 + n, n, step_time_s=2.0) for n in range(1, 30)]
    events += [heartbeat(1, T0 + 31, 30, "compute", T0 + 31)]
    ledger = fold(JobLedger(), events)
    assert ledger.reference_rank(T0 + 32) == 1
    assert ledger.throughput_tokens_per_s(T0 + 32) == pytest.approx(64 * 4096 / 2.0)


def test_warmup_and_checkpoint_steps_are_not_steady_state():
    events = [start(0, T0, world=1), phase(0, T0, "warmup", "begin"), step(0, T0 + 100, 1, step_time_s=99.0)]
    events += [phase(0, T0 + 100, "warmup", "end"), phase(0, T0 + 100, "steady", "begin")]
    events += [step(0, T0 + 100 + n, n, step_time_s=1.0) for n in range(2, 12)]
    events += [
        phase(0, T0 + 112, "checkpoint", "begin"),
        step(0, T0 + 140, 12, step_time_s=28.0),
        phase(0, T0 + 140, "checkpoint", "end"),
    ]
    ledger = fold(JobLedger(), events)
    summary = ledger.summary(T0 + 141).model_dump(mode="json")
    assert summary["throughput"]["step_time_s"] == {"p50": 1.0, "p90": 1.0, "p99": 1.0}
    assert summary["throughput"]["tokens_per_s"] == pytest.approx(64 * 4096)


def test_step_time_and_collective_windows_are_bounded():
    events = [start(r, T0, world=2) for r in range(2)] + [phase(r, T0, "steady", "begin") for r in range(2)]
    for n in range(1, 3001):
        for r in range(2):
            events += [collective(r, T0 + n, n, wait_s=0.001 * r), step(r, T0 + n, n, step_time_s=float(n % 100 + 1))]
    ledger = fold(JobLedger(), events)
    assert len(ledger.ranks[0].steps) == STEP_WINDOW
    assert len(ledger.collective_latency_s["all_reduce"]) == COLLECTIVE_WINDOW
    assert len(ledger.ranks[1].wait_per_step) == WAIT_WINDOW_STEPS
    assert ledger.collective_count["all_reduce"] == 6000
    summary = ledger.summary(T0 + 3001).model_dump(mode="json")
    latency = summary["collectives"]["all_reduce"]["latency_s"]
    assert latency["p50"] <= latency["p90"] <= latency["p99"]
    window = [float(n % 100 + 1) for n in range(3001 - STEP_WINDOW, 3001)]
    assert summary["throughput"]["step_time_s"]["p90"] == percentile(window, 90)


def hung_job_16_ranks(now_s: float) -> list:
    """16 ranks stepped to 40 at 1 s/step; now rank 11 sits in the dataloader at step 41 while
    the other 15 wait in the all-reduce of step 41. Heartbeats are fresh."""
    events = running_job(ranks=16, steps=40)
    last_step_s = T0 + 41
    for r in range(16):
        region = "dataloader" if r == 11 else "collective:all_reduce"
        events.append(heartbeat(r, now_s - 1, 41, region, last_step_s + 0.2))
    return events


def test_stall_names_the_rank_whose_region_differs_from_the_majority():
    now_s = T0 + 41 + 45  # 45 s without a step > max(5 x 1 s, 30 s)
    ledger = fold(JobLedger(), hung_job_16_ranks(now_s))
    utilisation = {("trn3-02", 3): 0.0}  # rank 11 = host trn3-02, chip 3
    diagnosis = ledger.diagnose(now_s, chip_util_pct=lambda host, chip: utilisation.get((host, chip), 97.0))
    assert diagnosis.verdict == "stalled"
    [suspect] = diagnosis.suspects
    assert (suspect.rank, suspect.host, suspect.chip, suspect.core) == (11, "trn3-02", 3, 6)
    assert (suspect.region, suspect.step) == ("dataloader", 41)
    assert suspect.evidence.region_age_s == pytest.approx(45 - 0.2)
    assert (suspect.evidence.chip_util_pct, suspect.evidence.peer_chip_util_median_pct) == (0.0, 97.0)
    assert "15 rank(s) in collective:all_reduce at step 41" in diagnosis.reason
    assert diagnosis.threshold_s == 30.0


def test_stall_names_a_group_of_suspects_in_the_same_wrong_place():
    """A whole host's ranks (4-7) stuck reading data while the other 12 wait in the all-reduce."""
    now_s = T0 + 41 + 45
    events = running_job(ranks=16, steps=40)
    for r in range(16):
        region = "dataloader" if 4 <= r <= 7 else "collective:all_reduce"
        events.append(heartbeat(r, now_s - 1, 41, region, T0 + 41.2))
    diagnosis = fold(JobLedger(), events).diagnose(now_s)
    assert diagnosis.verdict == "stalled"
    assert [s.rank for s in diagnosis.suspects] == [4, 5, 6, 7]
    assert {s.region for s in diagnosis.suspects} == {"dataloader"}
    assert "12 rank(s) in collective:all_reduce at step 41" in diagnosis.reason


def test_late_before_stalled_names_the_same_rank_and_steady_before_late():
    now_s = T0 + 41 + 25  # 25 s without a step: > max(3 x p99 1 s, 5 s), < 30 s
    diagnosis = fold(JobLedger(), hung_job_16_ranks(now_s)).diagnose(now_s)
    assert diagnosis.verdict == "late" and diagnosis.threshold_s == 5.0
    assert [s.rank for s in diagnosis.suspects] == [11]
    assert diagnosis.reason.startswith("rank 11 (host trn3-02 chip 3)")
    now_s = T0 + 41 + 4.5
    assert fold(JobLedger(), hung_job_16_ranks(now_s)).diagnose(now_s).verdict == "steady"


def test_late_and_stall_floors_are_configurable():
    now_s = T0 + 41 + 12
    ledger = fold(JobLedger(Rules(late_after_s=15.0, stall_after_s=10.0)), hung_job_16_ranks(now_s))
    assert ledger.diagnose(now_s).verdict == "stalled"  # stall floor 10 s < 12 s
    ledger = fold(JobLedger(Rules(late_after_s=15.0)), hung_job_16_ranks(now_s))
    assert ledger.diagnose(now_s).verdict == "steady"  # late floor 15 s > 12 s


def test_stall_threshold_scales_with_the_median_step_time():
    events = running_job(ranks=2, steps=10, step_time_s=10.0)
    last_step_s = T0 + 1 + 100
    ledger = fold(JobLedger(), events + [heartbeat(r, last_step_s + 45, 11, "compute", last_step_s) for r in range(2)])
    assert ledger.diagnose(last_step_s + 25).verdict == "steady"  # 25 s < 3 x p99 10 s
    assert ledger.diagnose(last_step_s + 45).verdict == "late"  # 30 s < 45 s < 5 x 10 s
    ledger = fold(ledger, [heartbeat(r, last_step_s + 55, 11, "compute", last_step_s) for r in range(2)])
    diagnosis = ledger.diagnose(last_step_s + 55)
    assert diagnosis.verdict == "stalled" and diagnosis.threshold_s == 50.0
    assert diagnosis.suspects == ()  # everyone in the same place: no rank to blame from heartbeats


def test_two_ranks_tie_goes_to_the_one_waiting_in_a_collective():
    events = running_job(ranks=2, steps=10)
    now_s = T0 + 11 + 40
    events += [
        heartbeat(0, now_s - 1, 11, "collective:tp_all_reduce", T0 + 11.1),
        heartbeat(1, now_s - 1, 11, "compute", T0 + 11.1),
    ]
    diagnosis = fold(JobLedger(), events).diagnose(now_s)
    assert diagnosis.verdict == "stalled" and [s.rank for s in diagnosis.suspects] == [1]


def test_a_rank_whose_heartbeats_stop_is_dead_not_stalled():
    events = running_job(ranks=4, steps=10)
    for t in range(12, 60):  # ranks 0-2 keep beating (hung, but alive); rank 3 went silent at 12 s
        events += [heartbeat(r, T0 + t, 11, "collective:all_reduce", T0 + 11.5) for r in range(3 if t > 12 else 4)]
    ledger = fold(JobLedger(), events)
    assert ledger.diagnose(T0 + 12 + 9.5).verdict == "late"  # within dead_after_s: hung, not dead
    diagnosis = ledger.diagnose(T0 + 59)
    assert diagnosis.verdict == "dead"
    assert [s.rank for s in diagnosis.suspects] == [3]
    assert diagnosis.suspects[0].host == "trn3-00"


def test_a_killed_rank_is_named_when_its_peers_end_aborted():
    events = running_job(ranks=3, steps=5)
    events += [heartbeat(r, T0 + 7, 6, "compute", T0 + 6.5) for r in range(3)]
    events += [ev("run_end", r, T0 + 8, status="aborted") for r in (0, 2)]  # rank 1 was SIGKILLed at ~7 s
    diagnosis = fold(JobLedger(), events).diagnose(T0 + 30)
    assert diagnosis.verdict == "failed"
    assert [s.rank for s in diagnosis.suspects] == [1, 0, 2]
    assert diagnosis.reason.startswith("first failure rank 1 (host trn3-00 chip 1): went silent")


def test_a_rank_killed_before_its_first_heartbeat_is_still_the_silent_first_failure():
    """CI found this: 5 steps can take less than the 2 s heartbeat interval. Rank 1 announced
    itself (run_start) and stepped, then was SIGKILLed; rank 0's collective then failed."""
    events = [start(r, T0, world=2) for r in range(2)]
    events += [step(r, T0 + 0.1 * n, n) for n in range(1, 6) for r in range(2)]
    events += [
        ev("error", 0, T0 + 0.9, message="RuntimeError: Connection closed by peer"),
        ev("run_end", 0, T0 + 0.95, status="failed"),
    ]
    ledger = fold(JobLedger(), events)
    assert ledger.dead_ranks(T0 + 1) == [1]
    diagnosis = ledger.diagnose(T0 + 1)
    assert diagnosis.verdict == "failed" and [s.rank for s in diagnosis.suspects] == [1, 0]
    assert diagnosis.reason.startswith("first failure rank 1 (host trn3-00 chip 1): went silent")
    assert ledger.rank_counts(T0 + 1).dead == 1


def test_a_rank_without_heartbeats_is_not_dead_while_a_peer_still_runs():
    events = [start(r, T0, world=3) for r in range(3)]
    events += [step(r, T0 + 0.1 * n, n) for n in range(1, 6) for r in range(3)]
    events += [ev("error", 0, T0 + 0.9, message="RuntimeError: boom")]
    events += [step(2, T0 + 1.0 + 0.1 * n, 5 + n) for n in range(1, 3)]  # rank 2 still running
    ledger = fold(JobLedger(), events)
    assert ledger.dead_ranks(T0 + 100) == []  # no heartbeats: silence alone never makes it dead


def test_ranks_seen_only_through_passive_sources_are_never_dead():
    ledger = fold(JobLedger(), [step(0, T0 + n, n) for n in range(1, 5)])
    assert ledger.diagnose(T0 + 7).verdict == "steady"
    assert ledger.diagnose(T0 + 20).verdict == "late"  # not dead: no heartbeats to judge by
    diagnosis = ledger.diagnose(T0 + 100)
    assert diagnosis.verdict == "stalled" and "no heartbeats" in diagnosis.reason


def test_the_straggler_is_the_rank_that_waits_least():
    events = running_job(ranks=4, steps=0)
    for n in range(1, 21):
        for r in range(4):
            events += [
                collective(r, T0 + 1 + n, n, wait_s=0.002 if r == 2 else 0.05),
                step(r, T0 + 1 + n, n, step_time_s=0.1),
            ]
    ledger = fold(JobLedger(), events)
    straggler = ledger.straggler(T0 + 22)
    assert straggler.rank == 2 and straggler.skew_s == pytest.approx(0.048) and straggler.slow
    diagnosis = ledger.diagnose(T0 + 22)
    assert diagnosis.verdict == "slow" and [s.rank for s in diagnosis.suspects] == [2]


def test_balanced_waits_are_not_a_straggler():
    events = running_job(ranks=4, steps=0)
    for n in range(1, 21):
        for r in range(4):
            events += [collective(r, T0 + 1 + n, n, wait_s=0.010 + 0.001 * r), step(r, T0 + 1 + n, n, step_time_s=0.1)]
    ledger = fold(JobLedger(), events)
    assert not ledger.straggler(T0 + 22).slow
    assert ledger.diagnose(T0 + 22).verdict == "steady"


def test_open_checkpoint_and_compile_are_reported_as_such_not_as_stalls():
    events = running_job(ranks=2, steps=5)
    events += [ev("checkpoint", r, T0 + 7, action="save", state="begin", step=5) for r in range(2)]
    events += [heartbeat(r, T0 + 500, 6, "checkpoint", T0 + 7) for r in range(2)]
    diagnosis = fold(JobLedger(), events).diagnose(T0 + 500)
    assert diagnosis.verdict == "checkpointing" and "493 s" in diagnosis.reason

    events = [
        start(0, T0, world=1),
        phase(0, T0 + 1, "compile", "begin", cache="miss"),
        heartbeat(0, T0 + 900, 1, "compute", T0 + 1),
    ]
    assert fold(JobLedger(), events).diagnose(T0 + 900).verdict == "compiling"


def test_compile_timeline_and_cache_hits():
    events = [start(0, T0, world=1), phase(0, T0 + 1, "init", "begin"), phase(0, T0 + 3, "init", "end")]
    events += [phase(0, T0 + 3, "compile", "begin", cache="miss"), phase(0, T0 + 3.5, "compile", "end", cache="hit")]
    events += [phase(0, T0 + 603, "compile", "end", cache="miss"), phase(0, T0 + 603, "warmup", "begin")]
    ledger = fold(JobLedger(), events)
    summary = ledger.summary(T0 + 604).model_dump(mode="json")
    assert (summary["cold_compiles"], summary["cold_compile_s"], summary["compile_cache_hits"]) == (1, 600.0, 1)
    assert [(p["phase"], p["duration_s"]) for p in summary["phases"]] == [
        ("init", 2.0),
        ("compile", 600.0),
        ("warmup", None),
    ]
    assert ledger.diagnose(T0 + 604).verdict == "starting"  # warmup open, no compile: still starting up


def test_restart_from_checkpoint_time_and_redone_steps():
    events = running_job(ranks=2, steps=16)
    events += [ev("error", 1, T0 + 17.5, message="InjectedCrash: injected crash at step 17")]
    events += [ev("run_end", 1, T0 + 17.5, status="failed"), ev("run_end", 0, T0 + 18, status="aborted")]
    ledger = fold(JobLedger(), events)
    diagnosis = ledger.diagnose(T0 + 19)
    assert diagnosis.verdict == "failed" and diagnosis.reason.startswith("first failure rank 1")
    resumed = [start(r, T0 + 30, world=2, restart=1) for r in range(2)]
    resumed += [ev("checkpoint", r, T0 + 32, action="load", state="begin", step=15) for r in range(2)]
    resumed += [ev("checkpoint", r, T0 + 34, action="load", state="end", step=15) for r in range(2)]
    resumed += [step(r, T0 + 40, 16) for r in range(2)]
    fold(ledger, resumed)
    summary = ledger.summary(T0 + 41).model_dump(mode="json")
    assert summary["restarts"] == [
        {"restart": 1, "from_step": 15, "steps_redone": 1, "checkpoint_load_s": 2.0, "restart_to_first_step_s": 10.0}
    ]
    assert summary["verdict"] == "steady"  # the restart made the failed ranks running again
    assert [f["rank"] for f in summary["failures"]] == [1, 1, 0]
    assert ("restart", 10.0) in [(p["phase"], p["duration_s"]) for p in summary["phases"]]


def test_finished_no_data_and_foreign_runs():
    assert JobLedger().diagnose(T0).verdict == "no-data"
    events = running_job(ranks=2, steps=3) + [ev("run_end", r, T0 + 5, status="success") for r in range(2)]
    ledger = fold(JobLedger(), events)
    with pytest.raises(JobEventRejected) as rejected:
        ledger.ingest(msgspec.structs.replace(step(0, T0 + 6, 99, loss=None), run="other"), T0 + 6)
    assert rejected.value.reason == "job-foreign-run"
    assert ledger.diagnose(T0 + 3600).verdict == "finished"  # ended ranks are not dead
    assert ledger.ranks[0].last_step == 3


def test_a_stall_that_ended_is_kept_for_the_receipt():
    events = running_job(ranks=2, steps=10)
    events += [
        heartbeat(r, T0 + 11 + t, 11, "collective:all_reduce" if r else "dataloader", T0 + 11.2)
        for t in range(1, 100)
        for r in range(2)
    ]
    events += [step(r, T0 + 111, 11) for r in range(2)]
    summary = fold(JobLedger(), events).summary(T0 + 112).model_dump(mode="json")
    [stall] = summary["stalls"]
    assert stall["duration_s"] == pytest.approx(100.0) and [s["rank"] for s in stall["suspects"]] == [0]


def test_summary_carries_the_run_description():
    summary = fold(JobLedger(), running_job(ranks=8, steps=3)).summary(T0 + 5).model_dump(mode="json")
    assert summary["model"] == {"name": "llama", "params": 8_000_000_000}
    assert (summary["precision"], summary["global_batch"], summary["micro_batch"], summary["seq_len"]) == (
        "bf16",
        64,
        1,
        4096,
    )
    assert summary["parallel"] == {"tp": 4, "pp": 1, "dp": 2} and summary["lnc"] == 2
    assert summary["ranks"]["seen"] == 8 and summary["ranks"]["hosts"] == 2 and summary["ranks"]["world_size"] == 8
    assert summary["versions"] == {"neuronx-distributed": "0.17.26814"}
    json.dumps(summary)  # JSON-ready for the receipt


def test_steady_begins_at_the_explicit_steady_phase_and_early_steps_are_warmup():
    """The issue's case: init, a 20 s compile, two steps with no phase open, then steady from step 3."""
    events = [
        start(0, T0, world=1),
        phase(0, T0, "init", "begin"),
        phase(0, T0 + 1, "init", "end"),
        phase(0, T0 + 1, "compile", "begin"),
        phase(0, T0 + 21, "compile", "end"),
        step(0, T0 + 21.5, 1, step_time_s=20.5),
        step(0, T0 + 22, 2, step_time_s=0.5),
        phase(0, T0 + 22, "steady", "begin"),
    ]
    events += [step(0, T0 + 22 + 0.25 * n, n, step_time_s=0.25) for n in range(3, 23)]
    t = fold(JobLedger(), events).summary(T0 + 28).throughput
    assert (t.boundary, t.warmup_steps, t.first_step, t.last_step, t.steps_in_window) == ("explicit", 2, 3, 22, 20)
    assert t.step_time_s.p99 == 0.25 and t.tokens_per_s == pytest.approx(64 * 4096 / 0.25)
    assert t.steady_s == pytest.approx(5.0) and t.begin_ts == T0 + 22.5 and t.end_ts == T0 + 27.5


def test_without_phases_the_warmup_is_inferred_from_step_times():
    events = [start(0, T0, world=1), step(0, T0 + 30, 1, step_time_s=30.0), step(0, T0 + 32, 2, step_time_s=2.0)]
    events += [step(0, T0 + 32 + 0.5 * (n - 2), n, step_time_s=0.5) for n in range(3, 13)]
    t = fold(JobLedger(), events).summary(T0 + 37).throughput
    assert (t.boundary, t.warmup_steps, t.first_step, t.steps_in_window) == ("inferred", 2, 3, 10)
    assert t.step_time_s.p99 == 0.5 and t.tokens_per_s == pytest.approx(64 * 4096 / 0.5)


def test_throughput_is_not_averaged_over_a_stall_or_a_blocking_checkpoint():
    events = running_job(ranks=1, steps=10)  # steps 1-10 at 1 s
    events += [step(0, T0 + 11 + 80, 11, step_time_s=80.0)]  # a step that held an 80 s stall
    events += [
        ev("checkpoint", 0, T0 + 91.5, action="save", state="begin", step=11),
        ev("checkpoint", 0, T0 + 95, action="save", state="end", step=11),
        step(0, T0 + 96, 12, step_time_s=4.5),
    ]  # this step's time holds the blocking save
    events += [step(0, T0 + 96 + n, 12 + n, step_time_s=1.0) for n in range(1, 4)]
    ledger = fold(JobLedger(), events)
    t = ledger.summary(T0 + 99).throughput
    assert t.steps_in_window == 13 and t.excluded_steps == 2 and t.steady_s == pytest.approx(13.0)
    assert t.tokens_per_s == pytest.approx(64 * 4096 / 1.0)
    assert [s.kind for s in ledger.ranks[0].steps][10:12] == ["late", "other"]


def test_a_background_checkpoint_masks_neither_late_nor_stalled():
    events = running_job(ranks=2, steps=10)
    events += [ev("checkpoint", r, T0 + 11.5, action="save", state="begin", step=10, blocking=False) for r in range(2)]
    events += [
        heartbeat(r, T0 + 11 + 40, 11, "collective:all_reduce" if r else "dataloader", T0 + 11.2) for r in range(2)
    ]
    ledger = fold(JobLedger(), events)
    assert ledger.diagnose(T0 + 11 + 8).verdict == "late"
    diagnosis = ledger.diagnose(T0 + 11 + 40)
    assert diagnosis.verdict == "stalled" and [s.rank for s in diagnosis.suspects] == [0]
    # the same save without blocking=false is a synchronous save: it explains the pause
    blocking = [msgspec.structs.replace(e, blocking=None) if e.event == "checkpoint" else e for e in events]
    assert fold(JobLedger(), blocking).diagnose(T0 + 11 + 40).verdict == "checkpointing"


def test_a_background_save_ending_is_not_progress():
    events = running_job(ranks=1, steps=10)
    events += [
        ev("checkpoint", 0, T0 + 11.5, action="save", state="begin", step=10, blocking=False),
        ev("checkpoint", 0, T0 + 30, action="save", state="end", step=10, blocking=False),
    ]
    ledger = fold(JobLedger(), events)
    assert ledger.last_progress_ts == T0 + 11
    assert ledger.diagnose(T0 + 31).verdict == "late"
    assert ledger.summary(T0 + 31).checkpoint_saves.background == 1


def test_rank_counts_add_up_to_the_world_size_and_dead_ranks_are_not_running():
    events = [start(r, T0, world=8) for r in range(6)]  # ranks 6 and 7 never heard from
    events += [heartbeat(r, T0 + 1, 0, "compute", T0) for r in range(6)]
    events += [heartbeat(r, T0 + 30, 0, "compute", T0) for r in range(4)]  # 4, 5 silent since 1 s
    events += [ev("run_end", 3, T0 + 30, status="success")]
    counts = fold(JobLedger(), events).rank_counts(T0 + 31)
    assert (counts.running, counts.finished, counts.failed, counts.dead, counts.unknown) == (3, 1, 0, 2, 2)
    assert counts.running + counts.finished + counts.failed + counts.dead + counts.unknown == counts.world_size


def test_failed_names_the_first_failure_in_time_and_lists_later_ones_as_consequences():
    events = running_job(ranks=3, steps=5)
    events += [heartbeat(r, T0 + 7, 6, "collective:all_reduce", T0 + 6.5) for r in range(3)]
    events += [
        ev("error", 0, T0 + 9, message="RuntimeError: [gloo] Connection closed by peer"),
        ev("error", 2, T0 + 9.5, message="NRT: execution timeout", source="runtime", failed_ts=T0 + 8),
        ev("run_end", 0, T0 + 9.1, status="failed"),
        heartbeat(1, T0 + 9.8, 6, "collective:all_reduce", T0 + 6.5),
    ]
    ledger = fold(JobLedger(), events)
    diagnosis = ledger.diagnose(T0 + 10)
    assert diagnosis.verdict == "failed" and [s.rank for s in diagnosis.suspects] == [2, 0]
    assert diagnosis.suspects[0].evidence.error == "NRT: execution timeout"
    roles = [(f.rank, f.role) for f in ledger.summary(T0 + 10).failures]
    assert roles == [(2, "first"), (0, "consequence"), (0, "consequence")]


GLOO_WAIT = (
    "RuntimeError: [../gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 3000ms for recv operation to complete"
)


def passive_job(last_steps: dict[int, int]) -> list:
    """Ranks seen only through a passive log: step lines, no heartbeats, no run_start."""
    return [step(r, T0 + n, n) for r, last in last_steps.items() for n in range(1, last + 1)]


def test_a_rank_silent_while_its_peers_time_out_waiting_is_the_first_failure():
    events = passive_job({0: 3, 1: 3, 2: 3}) + [ev("error", r, T0 + 7, message=GLOO_WAIT) for r in (0, 2)]
    ledger = fold(JobLedger(), events)
    diagnosis = ledger.diagnose(T0 + 8)
    assert diagnosis.verdict == "failed" and [s.rank for s in diagnosis.suspects] == [1, 0, 2]
    assert "ranks 0, 2 timed out in a collective, waiting; rank 1 did not: it was the one they waited for" in (
        diagnosis.reason
    )
    roles = [(f.rank, f.kind, f.role) for f in ledger.summary(T0 + 8).failures]
    assert roles == [(1, "silent", "first"), (0, "error", "consequence"), (2, "error", "consequence")]


def test_no_rank_is_named_for_silence_when_a_failure_is_not_a_wait_or_the_rank_wrote_on():
    # Rank 2 failed on its own: the timeouts are its consequence, and rank 1's silence no evidence.
    events = passive_job({0: 3, 1: 3, 2: 3}) + [
        ev("error", 0, T0 + 7, message=GLOO_WAIT),
        ev("error", 2, T0 + 6, message="RuntimeError: boom"),
    ]
    roles = [(f.rank, f.role) for f in fold(JobLedger(), events).summary(T0 + 8).failures]
    assert roles == [(2, "first"), (0, "consequence")]
    # Rank 1 stepped after the timeout: not the rank they waited for (nor anyone the log shows).
    events = passive_job({0: 3, 1: 9, 2: 3}) + [ev("error", r, T0 + 7, message=GLOO_WAIT) for r in (0, 2)]
    roles = [(f.rank, f.role) for f in fold(JobLedger(), events).summary(T0 + 10).failures]
    assert roles == [(0, "first"), (2, "consequence")]


def test_bounds_reject_ranks_beyond_the_world_size_too_many_ops_and_future_stamps():
    ledger = fold(JobLedger(max_ranks=3), [start(0, T0, world=4)])
    with pytest.raises(JobEventRejected) as rejected:
        ledger.ingest(heartbeat(4, T0, 0, "compute", T0), T0)
    assert rejected.value.reason == "job-rank-range"
    fold(ledger, [heartbeat(r, T0, 0, "compute", T0) for r in (1, 2)])
    with pytest.raises(JobEventRejected) as rejected:
        ledger.ingest(heartbeat(3, T0, 0, "compute", T0), T0)
    assert rejected.value.reason == "job-ranks-bound"
    for n in range(64):
        ledger.ingest(collective(0, T0, 1, 0.001, op=f"op{n}"), T0)
    with pytest.raises(JobEventRejected) as rejected:
        ledger.ingest(collective(0, T0, 1, 0.001, op="one-too-many"), T0)
    assert rejected.value.reason == "job-ops-bound"
    # a heartbeat stamped in milliseconds cannot keep a silent rank alive
    fold(ledger, [heartbeat(r, T0 + 1, 0, "compute", T0) for r in (0, 1, 2)])
    with pytest.raises(JobEventRejected) as rejected:
        ledger.ingest(heartbeat(1, (T0 + 2) * 1000, 0, "compute", T0), T0 + 2)
    assert rejected.value.reason == "job-ts-ahead"
    assert ledger.dead_ranks(T0 + 20) == [0, 1, 2]


def test_a_warning_is_evidence_on_a_suspect_and_never_a_failure_or_a_suspect_itself():
    now_s = T0 + 41 + 45
    warn = "Timeout waiting for RX (waited 120 sec) - retrying, [bootstrapInit, rank: 11/16/-1]"
    events = hung_job_16_ranks(now_s) + [
        ev("error", 11, now_s - 5, message=warn, source="runtime", severity="warning"),
        ev(
            "error",
            3,
            now_s - 4,
            message="NET/OFI aws-ofi-nccl initialization failed",
            source="runtime",
            severity="warning",
        ),
    ]
    ledger = fold(JobLedger(), events)
    diagnosis = ledger.diagnose(now_s)
    assert diagnosis.verdict == "stalled"
    [suspect] = diagnosis.suspects  # rank 3's warning does not make it a suspect
    assert (suspect.rank, suspect.evidence.warnings, suspect.evidence.last_warning) == (11, 1, warn)
    assert ledger.rank_counts(now_s).failed == 0 and ledger.failure_reports(now_s) == []
    warnings = ledger.summary(now_s).warnings
    assert (warnings.count, warnings.ranks, [w.rank for w in warnings.latest]) == (2, 2, [11, 3])


def test_an_error_without_severity_is_still_fatal_as_the_first_field_list_meant():
    events = running_job(ranks=2, steps=5) + [
        ev("error", 1, T0 + 6, message="boom"),
        ev("error", 0, T0 + 6.5, message="fatal", severity="fatal"),
    ]
    ledger = fold(JobLedger(), events)
    diagnosis = ledger.diagnose(T0 + 7)
    assert diagnosis.verdict == "failed" and diagnosis.suspects[0].rank == 1
    assert ledger.rank_counts(T0 + 7).failed == 2
