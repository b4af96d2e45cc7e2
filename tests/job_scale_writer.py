"""A job of N ranks written live as the emitter writes it (workloads/emitter.py's events, one
rank file each): one step per period (a collective and a step event per rank per step), a
heartbeat every HEARTBEAT_S from each rank (spread over the ranks), and, with --hang-at S, at S
seconds rank --culprit stops in `dataloader` while every other rank waits in
`collective:all_reduce` (their heartbeats go on, saying so).

    python tests/job_scale_writer.py DIR --ranks 18432 [--hang-at 50 --culprit 9217] [--duration S]

Prints "step N T" after each step is written (T: its `ts`) and "hang T" once the hang began
(T: the last step's `ts`), so a test or benchmark can wait for a condition. Used by
tests/test_monitor_lag.py and tests/benchmarks/bench_job_scale.py.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.job_story import event, run_start, step  # noqa: E402

HEARTBEAT_S = 5.0
RANKS_PER_HOST = 16  # a Trn3 host at LNC=2: 4 chips x 4 logical cores


def _append(path: str, lines: list[str]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, "".join(lines).encode())
    finally:
        os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--ranks", type=int, required=True)
    parser.add_argument("--period", type=float, default=1.0, help="seconds per step")
    parser.add_argument("--hang-at", type=float, default=None, help="seconds from the start to the hang")
    parser.add_argument("--culprit", type=int, default=0)
    parser.add_argument("--duration", type=float, default=None, help="stop writing after this many seconds")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    paths = [str(args.dir / f"rank-{r:05d}.jsonl") for r in range(args.ranks)]
    start = time.time()
    for r, path in enumerate(paths):
        host = f"trn-{r // RANKS_PER_HOST:04d}"
        fields = dict(world_size=args.ranks, host=host, chip=(r % RANKS_PER_HOST) // 4, core=r % RANKS_PER_HOST)
        fields["parallel"] = {"tp": 1, "pp": 1, "dp": args.ranks}
        _append(path, [json.dumps(run_start(start, r, **fields)) + "\n"])
    beats_per_period = max(1, round(HEARTBEAT_S / args.period))
    n, period, hang_ts = 0, 0, None  # steps written, periods passed, the hang's start
    while args.duration is None or time.time() - start < args.duration:
        period += 1
        time.sleep(max(0.0, start + period * args.period - time.time()))
        now = time.time()
        hung = args.hang_at is not None and now - start >= args.hang_at
        if hung and hang_ts is None:
            hang_ts = now
            print(f"hang {now - args.period:.3f}", flush=True)
        if not hung:
            n += 1
        for r, path in enumerate(paths):
            lines = []
            if not hung:
                collective = event(
                    "collective", now, r, op="all_reduce", bytes=1 << 24, latency_s=0.05, wait_s=0.01, step=n
                )
                lines += [json.dumps(collective) + "\n", json.dumps(step(now, n, args.period, r)) + "\n"]
            if (period + r) % beats_per_period == 0:
                region = ("dataloader" if r == args.culprit else "collective:all_reduce") if hung else "forward"
                since = hang_ts if hung and hang_ts is not None else now
                beat = event("heartbeat", now, r, step=n + 1, region=region, region_since=since)
                lines.append(json.dumps(beat) + "\n")
            if lines:
                _append(path, lines)
        if not hung:
            print(f"step {n} {now:.3f}", flush=True)


if __name__ == "__main__":
    main()
