"""`trnwatch watch --headless --job-dir` following the real reference workload (torchrun + gloo on
CPU, real processes): what the receipt's job section says, healthy and with an injected hang."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("torch", reason="the reference workload needs torch (CPU wheel torch==2.13.0)")

from trnwatch.workloads import train  # noqa: E402
from tests.torchrun import stop_torchrun as end  # noqa: E402
from tests.waiting import wait_until  # noqa: E402

pytestmark = pytest.mark.slow


def torchrun(tmp_path, *flags):
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        train.__file__,
        "--run-dir",
        str(tmp_path / "run"),
        *flags,
    ]
    log = open(tmp_path / "torchrun.log", "w")
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path, start_new_session=True)


def watch(tmp_path, *flags):
    """The monitor, started before the job (as on-call would leave it running), no screen."""
    command = [
        sys.executable,
        "-m",
        "trnwatch",
        "watch",
        "--headless",
        "--job-dir",
        str(tmp_path / "run" / "telemetry"),
        "--receipt",
        str(tmp_path / "receipt.json"),
        *flags,
    ]
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PATH": "/usr/bin:/bin"}
    )  # no neuron-monitor: job scope only


def stop_monitor(monitor):
    """End the watch as a user would. No wait for the follower's next poll: on SIGTERM it reads
    what the rank files hold before the receipt is written (tests/test_exit_reads.py)."""
    monitor.send_signal(signal.SIGTERM)
    monitor.communicate(timeout=60)


def test_watching_a_two_rank_run_gives_real_step_times_throughput_and_all_reduce_latency(tmp_path):
    monitor = watch(tmp_path)
    job = torchrun(tmp_path, "--tp", "2", "--steps", "40")
    try:
        assert job.wait(timeout=180) == 0, (tmp_path / "torchrun.log").read_text()[-2000:]
        stop_monitor(monitor)
    finally:
        end(job)
        monitor.kill()
    assert monitor.returncode == 0
    r = json.loads((tmp_path / "receipt.json").read_text())
    j = r["job"]
    assert r["exit_reason"] == "sigterm" and j["verdict"] == "finished"
    assert j["ranks"]["seen"] == 2 and j["parallel"] == {"tp": 2, "pp": 1, "dp": 1} and j["backend"] == "cpu"
    t = j["throughput"]
    assert t["tokens_per_s"] > 0 and t["from_rank"] == 0 and t["steps_in_window"] > 10
    assert 0 < t["step_time_s"]["p50"] <= t["step_time_s"]["p99"]  # how long a CPU step takes is no test figure
    latency = j["collectives"]["tp_all_reduce"]["latency_s"]
    assert j["collectives"]["tp_all_reduce"]["count"] > 40 and 0 < latency["p50"] <= latency["p99"]
    assert all(s["rejected"] == 0 for s in r["sources"])


def rank_events(tmp_path, rank: int) -> list[dict]:
    """The whole lines of one rank file so far."""
    path = tmp_path / "run" / "telemetry" / f"rank-{rank:05d}.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line) for line in lines if line.endswith("}")]


def test_an_injected_hang_is_named_once_the_stall_rule_has_passed(tmp_path):
    """Default rules (stall after max(5 x median step, 30 s)): once rank 1 heartbeats from inside
    its hang and 35 s have passed since the job's last step, the watch is ended; the receipt must
    name rank 1 in a stall that began at that step. How soon after onset it is named is a figure
    of tests/benchmarks/bench_hang.py, not a threshold here."""
    monitor = watch(tmp_path)
    job = torchrun(
        tmp_path, "--tp", "2", "--steps", "400", "--hang-rank", "1", "--hang-step", "10", "--hang-region", "dataloader"
    )
    try:
        wait_until(
            lambda: any(
                e["event"] == "heartbeat" and e["step"] == 10 and e["region"] == "dataloader"
                for e in rank_events(tmp_path, 1)
            ),
            "rank 1 to heartbeat from its hang",
            detail=lambda: (tmp_path / "torchrun.log").read_text()[-2000:],
        )
        onset_ts = max(e["ts"] for rank in (0, 1) for e in rank_events(tmp_path, rank) if e["event"] == "step")
        wait_until(lambda: time.time() > onset_ts + 35, "35 s past the last step", timeout_s=60)
        assert max(e["ts"] for rank in (0, 1) for e in rank_events(tmp_path, rank) if e["event"] == "step") == onset_ts
        stop_monitor(monitor)
    finally:
        end(job)
        monitor.kill()
    assert monitor.returncode == 0
    j = json.loads((tmp_path / "receipt.json").read_text())["job"]
    assert j["verdict"] == "stalled", j["reason"]
    (stall,) = [s for s in j["stalls"] if s["end_ts"] is None]
    assert [s["rank"] for s in stall["suspects"]] == [1] and j["suspects"][0]["rank"] == 1
    assert stall["begin_ts"] == pytest.approx(onset_ts, abs=1e-3) and stall["duration_s"] >= stall["threshold_s"] >= 30


def test_kill_9_of_rank_1_of_2_blames_rank_1_and_the_counts_add_up(tmp_path):
    """SIGKILL leaves rank 1 no word to say; torchrun then stops rank 0 (or rank 0 fails in its
    collective). The receipt must blame rank 1, the silent one, and list rank 0 as a consequence."""
    monitor = watch(tmp_path)
    job = torchrun(tmp_path, "--tp", "2", "--steps", "100000")
    rank_file = tmp_path / "run" / "telemetry" / "rank-00001.jsonl"
    try:

        def rank_1_pid_after_5_steps() -> int | None:
            lines = rank_file.read_text().splitlines() if rank_file.exists() else []
            events = [json.loads(line) for line in lines if line.endswith("}")]
            pid = next((e["pid"] for e in events if e["event"] == "run_start"), None)
            return pid if sum(e["event"] == "step" for e in events) >= 5 else None

        pid = wait_until(
            rank_1_pid_after_5_steps,
            "rank 1's pid and 5 of its steps",
            detail=lambda: (tmp_path / "torchrun.log").read_text()[-2000:],
        )
        os.kill(pid, signal.SIGKILL)
        assert job.wait(timeout=120) != 0
        stop_monitor(monitor)
    finally:
        end(job)
        monitor.kill()
    j = json.loads((tmp_path / "receipt.json").read_text())["job"]
    assert j["verdict"] == "failed", j["reason"]
    assert j["suspects"][0]["rank"] == 1 and j["suspects"][0]["host"] == os.uname().nodename
    assert j["reason"].startswith("first failure rank 1 ")
    first = [f for f in j["failures"] if f["role"] == "first"]
    assert [(f["rank"], f["kind"]) for f in first] == [(1, "silent")]
    assert {f["rank"] for f in j["failures"] if f["role"] == "consequence"} == {0}
    r = j["ranks"]
    assert (r["running"], r["dead"], r["failed"]) == (0, 1, 1)
    assert r["running"] + r["finished"] + r["failed"] + r["dead"] + r["unknown"] == r["world_size"] == 2


def test_a_rank_that_never_joins_init_process_group_stalls_the_start_up_naming_it_first(tmp_path):
    """Rank 1 hangs in its data loader before init_process_group (--hang-step 0, the truth); rank 0
    waits for it in collective:init. Once rank 0 has heartbeated from there for longer than
    --stall-after 3, the watch is ended: STALLED, not compiling, rank 1 first, then rank 0 in init."""
    monitor = watch(tmp_path, "--stall-after", "3")
    job = torchrun(tmp_path, "--steps", "5", "--heartbeat-interval", "0.5", "--hang-rank", "1", "--hang-step", "0")
    try:

        def beats(rank: int, region: str) -> list[dict]:
            return [e for e in rank_events(tmp_path, rank) if e["event"] == "heartbeat" and e["region"] == region]

        wait_until(
            lambda: (
                beats(1, "dataloader")
                and (init := beats(0, "collective:init"))
                and init[-1]["ts"] > init[-1]["region_since"] + 4
            ),
            "rank 0 to heartbeat from collective:init for 4 s while rank 1 is in its data loader",
            detail=lambda: (tmp_path / "torchrun.log").read_text()[-2000:],
        )
        since_ts = beats(0, "collective:init")[-1]["region_since"]
        stop_monitor(monitor)
    finally:
        end(job)
        monitor.kill()
    assert monitor.returncode == 0
    assert not [e for rank in (0, 1) for e in rank_events(tmp_path, rank) if e["event"] in ("run_start", "step")]
    j = json.loads((tmp_path / "receipt.json").read_text())["job"]
    assert j["verdict"] == "stalled", j["reason"]
    assert [(s["rank"], s["region"]) for s in j["suspects"]] == [(1, "dataloader"), (0, "collective:init")]
    assert "1 rank(s) still in collective:init for" in j["reason"] and "1 not in it" in j["reason"]
    (stall,) = [s for s in j["stalls"] if s["end_ts"] is None]
    assert stall["cause"] == "bootstrap" and stall["threshold_s"] == 3
    assert stall["begin_ts"] == pytest.approx(since_ts, abs=1e-3) and stall["duration_s"] > 3
