"""Benchmark: seconds from hang onset to LATE and to STALLED, in the demo and with the real
torchrun workload, at the default rules (late after max(3 x p99, 5 s), stalled after
max(5 x median, 30 s)).

    python tests/benchmarks/bench_hang.py [--skip-demo] [--skip-torchrun]

Each run starts the real job (`trnwatch demo --headless --scenario hang`, or torchrun with
`workloads/train.py --hang-rank 1 --hang-step 10 --hang-region dataloader`), follows its rank
files with the real follower (`follow_run_dir`, 0.25 s polls), folds every line into a
`JobLedger` and judges it every 0.1 s by the wall clock, as the screen does each refresh. Onset
is the `ts` of the job's last step (the job's own clock); the figures are wall time from it to
the first judgement that says LATE (and names the hung rank), and to STALLED. "over rule" is
the delay beyond the rule's threshold at that moment: what the follower and the heartbeat
interval add. Measured on a shared 2-core machine: read the figures relative to the thresholds.
"""

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # for tests.* helpers when run as a script

from trnwatch.collectors.job_events import parse_job_line
from trnwatch.collectors.job_files import follow_run_dir
from trnwatch.ledger.job import JobLedger
from trnwatch.workloads import train
from trnwatch.workloads.sim.job import fault_rank
from trnwatch.workloads.sim.topology import get_topology
from tests.torchrun import stop_torchrun

JUDGE_EVERY_S = 0.1


async def _watch(run_dir: Path, timeout_s: float) -> dict:
    """Fold the run directory until STALLED; return the moments of LATE and STALLED."""
    ledger = JobLedger()
    seen: dict[str, tuple[float, float, tuple[int, ...]]] = {}
    queue: asyncio.Queue = asyncio.Queue()

    async def pump():
        async for line in follow_run_dir(str(run_dir), poll_s=0.25):
            await queue.put(line)

    task = asyncio.create_task(pump())
    deadline = time.monotonic() + timeout_s
    try:
        while "stalled" not in seen:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no STALLED within {timeout_s} s: {ledger.diagnose(time.time())}")
            until = time.monotonic() + JUDGE_EVERY_S
            while time.monotonic() < until:
                try:
                    line = await asyncio.wait_for(queue.get(), timeout=max(0.001, until - time.monotonic()))
                except TimeoutError:
                    break
                ledger.ingest(parse_job_line(line.text), line.received_s)
            now_s = time.time()
            diagnosis = ledger.diagnose(now_s)
            if diagnosis.verdict in ("late", "stalled") and diagnosis.verdict not in seen:
                seen[diagnosis.verdict] = (now_s, diagnosis.threshold_s, tuple(s.rank for s in diagnosis.suspects))
    finally:
        task.cancel()
    onset_s = max(rank.last_step_ts for rank in ledger.ranks.values() if rank.last_step_ts is not None)
    return {verdict: (at - onset_s, threshold_s, suspects) for verdict, (at, threshold_s, suspects) in seen.items()}


def _measure(command: list[str], run_dir: Path, cwd: Path) -> dict:
    with open(cwd / "job.log", "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=cwd, start_new_session=True)
    try:
        return asyncio.run(_watch(run_dir, timeout_s=180))
    finally:
        stop_torchrun(process)


def _report(name: str, expected_rank: int, figures: dict) -> None:
    for verdict in ("late", "stalled"):
        if verdict not in figures:
            print(f"{name:<22} {verdict.upper():<8} not seen (the job went straight to STALLED)")
            continue
        delay_s, threshold_s, suspects = figures[verdict]
        named = "names" if suspects[:1] == (expected_rank,) else f"names {list(suspects[:3])}, not"
        print(
            f"{name:<22} {verdict.upper():<8} {delay_s:6.2f} s after the last step (rule {threshold_s:5.1f} s, "
            f"over rule {delay_s - threshold_s:5.2f} s); {named} rank {expected_rank}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-demo", action="store_true")
    parser.add_argument("--skip-torchrun", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-hang-") as tmp:
        tmp = Path(tmp)
        if not args.skip_demo:
            run_dir = tmp / "demo-job"
            command = [
                sys.executable,
                "-m",
                "trnwatch",
                "demo",
                "--headless",
                "--scenario",
                "hang",
                "--job-dir",
                str(run_dir),
                "--duration",
                "120",
                "--receipt",
                str(tmp / "demo.json"),
            ]
            _report("demo (576 ranks)", fault_rank(get_topology("trn3-gen2-us")), _measure(command, run_dir, tmp))
        if not args.skip_torchrun:
            command = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nproc-per-node",
                "2",
                train.__file__,
                "--run-dir",
                str(tmp / "run"),
                "--tp",
                "2",
                "--steps",
                "100000",
                "--hang-rank",
                "1",
                "--hang-step",
                "10",
                "--hang-region",
                "dataloader",
            ]
            _report("torchrun (2 ranks)", 1, _measure(command, tmp / "run" / "telemetry", tmp))


if __name__ == "__main__":
    main()
