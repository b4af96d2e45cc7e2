"""The reference workload: unit checks, and real torchrun + gloo runs on CPU (marked slow) whose
telemetry is followed with the real follower and folded by the real JobLedger."""

import asyncio
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch", reason="the reference workload needs torch (CPU wheel torch==2.13.0)")

from trnwatch.collectors.checkpoints import CheckpointDirWatcher  # noqa: E402
from trnwatch.collectors.job_events import parse_job_line  # noqa: E402
from trnwatch.collectors.job_files import follow_run_dir  # noqa: E402
from trnwatch.ledger.job import JobLedger  # noqa: E402
from trnwatch.ledger.rules import Rules  # noqa: E402
from trnwatch.workloads import checkpoint_files, train, train_args  # noqa: E402
from trnwatch.workloads.cpu_backend import ColumnLinear, RowLinear  # noqa: E402
from trnwatch.workloads.tiny_gpt import TinyGPT, parameter_count  # noqa: E402
from tests.torchrun import stop_torchrun as stop  # noqa: E402

LAYERS = 2
TP_ALL_REDUCES_PER_LAYER = 4  # forward: attention out + MLP down; backward: qkv input + MLP up input


# ---- unit ---------------------------------------------------------------------------------------


def test_every_workload_flag_passes_through_torchrun_untouched():
    from torch.distributed.run import get_args_parser

    flags = []
    for action in train_args.build_parser()._actions:
        if action.option_strings and action.dest != "help":
            flags += [action.option_strings[0]] + (["1"] if action.nargs != 0 else [])
    launcher = get_args_parser()
    parsed = launcher.parse_args(["--standalone", "--nproc-per-node", "2", "train.py", *flags])
    assert parsed.training_script_args == flags
    with pytest.raises(SystemExit):  # the pitfall this guards against: an ambiguous prefix aborts the launch
        launcher.parse_args(["--standalone", "train.py", "--d", "1"])


def single_rank(tp_size=1, tp_rank=0):
    parallel = SimpleNamespace(tp_size=tp_size, tp_rank=tp_rank)
    parallel.column = lambda i, o: ColumnLinear(i, o, parallel)
    parallel.row = lambda i, o: RowLinear(i, o, parallel)
    return parallel


def test_parameter_count_matches_the_unsharded_model():
    model = TinyGPT(dim=64, layers=3, heads=4, seq_len=32, parallel=single_rank())
    assert sum(p.numel() for p in model.parameters()) == parameter_count(64, 3, 32)


def test_tensor_parallel_shards_tile_the_single_rank_weights():
    weights = []
    for tp_rank in (0, 1):
        torch.manual_seed(7)
        weights.append(TinyGPT(64, 1, 4, 32, single_rank(2, tp_rank)).blocks[0].down.weight)
    torch.manual_seed(7)
    full = TinyGPT(64, 1, 4, 32, single_rank()).blocks[0].down.weight
    assert torch.equal(torch.cat(weights, dim=1), full)


def test_newest_complete_checkpoint_ignores_an_interrupted_save(tmp_path):
    for step, done in ((5, True), (10, True), (15, False)):
        tag_dir = tmp_path / checkpoint_files.checkpoint_tag(step)
        tag_dir.mkdir()
        (tag_dir / "checkpoint").write_text("")
        if done:
            (tag_dir / "done").write_text("")
    assert checkpoint_files.newest_complete_checkpoint(str(tmp_path)) == 10
    assert checkpoint_files.newest_complete_checkpoint(str(tmp_path / "missing")) is None


# ---- real runs ----------------------------------------------------------------------------------


def launch(tmp_path, nproc: int, *flags: str, log: str = "torchrun.log") -> subprocess.Popen:
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(nproc),
        train.__file__,
    ]
    command += ["--run-dir", str(tmp_path / "run"), "--heartbeat-interval", "0.5", *flags]
    with open(tmp_path / log, "w") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path, start_new_session=True)


def run_to_end(tmp_path, nproc: int, *flags: str, log: str = "torchrun.log") -> int:
    process = launch(tmp_path, nproc, *flags, log=log)
    try:
        return process.wait(timeout=120)
    finally:
        stop(process)


def follow_and_fold(telemetry_dir, ledger: JobLedger, done, timeout_s: float = 60.0) -> list:
    """Follow the run directory with the real follower, fold every line, stop when `done(ledger, events)`."""

    async def run():
        queue = asyncio.Queue()

        async def pump():
            async for line in follow_run_dir(str(telemetry_dir), poll_s=0.1):
                await queue.put(line)

        task = asyncio.create_task(pump())
        events = []
        deadline = time.monotonic() + timeout_s
        try:
            while not done(ledger, events):
                assert time.monotonic() < deadline, f"gave up after {timeout_s} s: {ledger.diagnose(time.time())}"
                try:
                    line = await asyncio.wait_for(queue.get(), timeout=0.5)
                except TimeoutError:
                    continue
                event = parse_job_line(line.text)
                events.append(event)
                ledger.ingest(event, line.received_s)
        finally:
            task.cancel()
        return events

    return asyncio.run(run())


def run_ends(count: int):
    return lambda ledger, events: sum(event.event == "run_end" for event in events) == count


def of(events, kind: str, rank: int | None = None) -> list:
    return [e for e in events if e.event == kind and (rank is None or e.rank == rank)]


@pytest.mark.slow
def test_tp2_run_reports_what_it_did(tmp_path):
    steps = 40
    assert run_to_end(tmp_path, 2, "--tp", "2", "--steps", str(steps), "--checkpoint-interval", "20") == 0
    ledger = JobLedger()
    events = follow_and_fold(tmp_path / "run" / "telemetry", ledger, run_ends(2))

    for rank in (0, 1):
        [start] = of(events, "run_start", rank)
        assert (start.world_size, start.backend, start.restart, start.parallel.tp, start.parallel.dp) == (
            2,
            "cpu",
            0,
            2,
            1,
        )
        assert [e.step for e in of(events, "step", rank)] == list(range(1, steps + 1))
        assert [(e.action, e.state, e.step) for e in of(events, "checkpoint", rank)] == [
            ("save", "begin", 20),
            ("save", "end", 20),
            ("save", "begin", 40),
            ("save", "end", 40),
        ]
        assert of(events, "run_end", rank)[0].status == "success"
        assert all(0 < e.compute_s < e.step_time_s for e in of(events, "step", rank))
    tp_collectives = of(events, "collective")
    assert {e.op for e in tp_collectives} == {"tp_all_reduce"}
    assert len(tp_collectives) == 2 * steps * LAYERS * TP_ALL_REDUCES_PER_LAYER
    assert all(e.wait_s <= e.latency_s for e in tp_collectives)

    now_s = time.time()
    summary = ledger.summary(now_s).model_dump(mode="json")
    assert summary["verdict"] == "finished" and summary["ranks"]["seen"] == 2
    # after the 3 warmup steps, leaving out the step whose interval held the blocking save at step 20
    steady = [e for e in of(events, "step", 0) if e.step > 3 and e.step != 21]
    expected = sum(e.tokens for e in steady) / sum(e.step_time_s for e in steady)
    assert summary["throughput"]["tokens_per_s"] == pytest.approx(expected)  # rank 0 alone, counted once
    t = summary["throughput"]
    assert (t["boundary"], t["warmup_steps"], t["first_step"], t["last_step"]) == ("explicit", 3, 4, steps)
    losses = [e.loss for e in of(events, "step", 0)]
    assert sum(losses[-5:]) < sum(losses[:5])  # it learns
    saves = CheckpointDirWatcher(str(tmp_path / "run" / "checkpoints"), run="run").scan()
    assert [(e.state, e.step) for e in saves] == [("begin", 20), ("end", 20), ("begin", 40), ("end", 40)]
    print(
        f"\ntp2 x 2 ranks: {len(steady) / sum(e.step_time_s for e in steady):.1f} steps/s steady, "
        f"{summary['throughput']['tokens_per_s']:.0f} tokens/s, step p50 {summary['throughput']['step_time_s']['p50'] * 1e3:.0f} ms"
    )


@pytest.mark.slow
def test_four_ranks_tp2_dp2_name_the_slow_rank_as_straggler(tmp_path):
    steps, slow_rank = 30, 2
    flags = ["--tp", "2", "--steps", str(steps), "--slow-rank", str(slow_rank), "--slow-factor", "3"]
    assert run_to_end(tmp_path, 4, *flags) == 0
    ledger = JobLedger()
    events = follow_and_fold(tmp_path / "run" / "telemetry", ledger, run_ends(4))

    assert {e.op for e in of(events, "collective")} == {"tp_all_reduce", "dp_all_reduce"}
    for n in (1, steps):
        losses = [e.loss for e in of(events, "step") if e.step == n]
        assert len(losses) == 4 and max(losses) == pytest.approx(min(losses), rel=1e-6)  # one global loss

    straggler = ledger.straggler(time.time())
    assert straggler.rank == slow_rank and straggler.slow, straggler

    # The same stream cut just before the end, as on-call would have seen it live.
    cut_ts = of(events, "step", 0)[-2].ts
    live = JobLedger()
    for event in sorted(events, key=lambda e: e.ts):
        if event.ts <= cut_ts:
            live.ingest(event, event.ts)
    diagnosis = live.diagnose(cut_ts)
    assert diagnosis.verdict == "slow" and [s.rank for s in diagnosis.suspects] == [slow_rank], diagnosis
    print(f"\nwait per step by rank: {straggler.wait_s_by_rank}")


@pytest.mark.slow
@pytest.mark.parametrize("hang_region", ["dataloader", "compute", "collective"])
def test_a_hung_rank_is_named_by_the_stall_diagnosis(tmp_path, hang_region):
    flags = ["--tp", "2", "--steps", "100000", "--hang-rank", "1", "--hang-step", "12", "--hang-region", hang_region]
    process = launch(tmp_path, 2, *flags)
    ledger = JobLedger(Rules(stall_after_s=2.0))  # shorter than the 30 s default so the test is quick
    try:
        follow_and_fold(
            tmp_path / "run" / "telemetry",
            ledger,
            lambda ledger, events: ledger.diagnose(time.time()).verdict == "stalled",
        )
        diagnosis = ledger.diagnose(time.time())
    finally:
        stop(process)
    assert ledger.ranks[0].region == "collective:tp_all_reduce" and ledger.ranks[0].heartbeat_step == 12
    assert ledger.ranks[0].last_step == 11
    if hang_region == "collective":
        # Both ranks sit in the same collective at the same step: heartbeats cannot say who is
        # at fault, and the diagnosis says so instead of guessing.
        assert diagnosis.suspects == ()
        assert "2 rank(s) in collective:tp_all_reduce at step 12" in diagnosis.reason
        return
    [suspect] = diagnosis.suspects
    assert (suspect.rank, suspect.region, suspect.step) == (1, hang_region, 12)
    assert suspect.host == os.uname().nodename


@pytest.mark.slow
def test_a_crashed_run_resumes_from_the_newest_complete_checkpoint(tmp_path):
    flags = ["--tp", "1", "--steps", "24", "--checkpoint-interval", "5"]  # dp = 2
    assert run_to_end(tmp_path, 2, *flags, "--crash-rank", "1", "--crash-step", "17", log="crash.log") != 0
    checkpoints = tmp_path / "run" / "checkpoints"
    interrupted = checkpoints / checkpoint_files.checkpoint_tag(20)  # a save that began but never finished
    interrupted.mkdir()
    (interrupted / "checkpoint").write_text("")
    assert run_to_end(tmp_path, 2, *flags, log="resume.log") == 0

    ledger = JobLedger()
    events = follow_and_fold(tmp_path / "run" / "telemetry", ledger, run_ends(4))
    crash = [e for e in of(events, "error", 1) if "InjectedCrash" in e.message]
    assert crash and crash[0].message == "InjectedCrash: injected crash at step 17"
    for rank in (0, 1):
        first_start, resumed = of(events, "run_start", rank)
        assert (first_start.restart, resumed.restart) == (0, 1)
        loads = [e for e in of(events, "checkpoint", rank) if e.action == "load"]
        assert [(e.state, e.step, e.tag) for e in loads] == [
            ("begin", 15, "step_00000015"),
            ("end", 15, "step_00000015"),
        ]
        steps = [e.step for e in of(events, "step", rank)]
        assert steps == list(range(1, 17)) + list(range(16, 25))
    # Same data and restored weights + optimizer: the redone step 16 has the loss it had before the crash.
    first_16, redone_16 = [e.loss for e in of(events, "step", 0) if e.step == 16]
    assert redone_16 == pytest.approx(first_16, rel=1e-5)

    summary = ledger.summary(time.time()).model_dump(mode="json")
    assert summary["verdict"] == "finished"
    [restart] = summary["restarts"]
    assert (restart["restart"], restart["from_step"], restart["steps_redone"]) == (1, 15, 1)
    assert restart["restart_to_first_step_s"] > restart["checkpoint_load_s"] > 0
    first = summary["failures"][0]
    assert (first["rank"], first["ts"], first["error"], first["role"]) == (1, crash[0].ts, crash[0].message, "first")
    print(
        f"\nrestart from checkpoint: {restart['restart_to_first_step_s']:.2f} s to first step, load {restart['checkpoint_load_s'] * 1e3:.0f} ms"
    )


def test_the_neuron_path_imports_cleanly_and_says_what_to_install(tmp_path):
    """No Trainium here: the Neuron backend module imports without the Neuron packages, and asking
    for it fails with a message naming what to install, not a traceback."""
    from trnwatch.workloads import neuron_backend

    assert neuron_backend.neuron_unavailable_reason() is not None
    result = subprocess.run(
        [sys.executable, "-m", "trnwatch.workloads.train", "--device", "neuron", "--run-dir", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "--device neuron:" in result.stderr and "Neuron pip repository" in result.stderr
    assert "Traceback" not in result.stderr
