"""A launcher and its ranks, for the rank-process tests: real processes, as torchrun makes them.

`python rank_family.py PIDS N [--tee DIR] [--job-dir DIR] [--zombie R]`: started with its
stdout on the job's log, it starts N ranks (RANK and LOCAL_RANK in their environment) whose
stdout is its own, or with --tee a file of their own in DIR (its stdout still the log), or with
--job-dir /dev/null while each holds DIR/rank-R.jsonl open (the emitter's rank file). Each rank
forks one worker carrying its environment (a DataLoader worker) and prints `step 1 ...` once.
--zombie R: rank R exits on SIGUSR1 and the launcher never reaps it. Writes {"ranks": {R: pid},
"workers": {R: pid}} to PIDS once every process runs, then sleeps until killed (the test ends its
group).
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time


def rank_main(pids: str, rank: int, job_dir: str | None, zombie: bool) -> None:
    if zombie:  # exits on SIGUSR1, and its launcher never reaps it
        signal.signal(signal.SIGUSR1, lambda *_: os._exit(0))
    held = open(os.path.join(job_dir, f"rank-{rank:05d}.jsonl"), "a") if job_dir else None  # noqa: SIM115
    worker = os.fork()
    if worker == 0:
        signal.pause()
        os._exit(0)
    print(f"step 1 loss 1.0 0.1 s/iter rank {rank}", flush=True)
    _write(f"{pids}.worker{rank}", str(worker))
    while held is None or not held.closed:  # the rank file stays open for as long as the rank runs
        signal.pause()


def _write(path: str, text: str) -> None:
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("pids")
    parser.add_argument("n", type=int)
    parser.add_argument("--tee")
    parser.add_argument("--job-dir")
    parser.add_argument("--zombie", type=int)
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)  # a rank's own process
    args = parser.parse_args()
    if args.rank is not None:
        rank_main(args.pids, args.rank, args.job_dir, args.rank == args.zombie)
        return
    ranks, workers = {}, {}
    children = []
    for rank in range(args.n):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(args.n)}
        out = None  # the launcher's own: the job's log
        if args.tee:
            out = open(os.path.join(args.tee, f"rank{rank}.log"), "w")  # noqa: SIM115
        elif args.job_dir:
            out = subprocess.DEVNULL
        command = [sys.executable, __file__, args.pids, str(args.n), "--rank", str(rank)]
        command += ["--job-dir", args.job_dir] if args.job_dir else []
        command += ["--zombie", str(args.zombie)] if args.zombie is not None else []
        children.append(subprocess.Popen(command, env=env, stdout=out))  # kept: never reaped
        ranks[rank] = children[-1].pid
        worker_file = f"{args.pids}.worker{rank}"
        while not os.path.exists(worker_file):
            time.sleep(0.01)
        with open(worker_file) as f:
            workers[rank] = int(f.read())
        if args.tee:  # the launcher copies the rank's line to its own output, as torchrun --tee does
            with open(os.path.join(args.tee, f"rank{rank}.log")) as f:
                sys.stdout.write(f"[default{rank}]:{f.read()}")
            sys.stdout.flush()
    _write(args.pids, json.dumps({"ranks": ranks, "workers": workers}))
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
