"""A torchrun worker that makes one failure case happen for real and records its own truth.

Run as `torchrun ... tests/torchrun_case.py CASE RANK STEP TRUTH_DIR [ATTEMPTS [STEPS]]`: every
rank all-reduces over gloo once per step (printing `step N` after each) for STEPS (40) steps; the rank RANK,
at step STEP, in the first ATTEMPTS attempts of torchrun (TORCHELASTIC_RESTART_COUNT, default: every
attempt) does CASE:

- raise: raises RuntimeError("injected failure on rank R at step S");
- record: the same, from a main wrapped in torch.distributed.elastic's `@record`, so the agent
  gets an error file and its summary shows the traceback;
- exit: `sys.exit(3)`;
- hang: sleeps forever outside any collective, so its peers time out in the next all-reduce
  (the process group's timeout is HANG_TIMEOUT_S in this case, TIMEOUT_S in the others);
- wait: sleeps forever, for the test to kill it (SIGKILL) or the agent (SIGTERM) from outside.
- none: nothing (the truth is still written: the test may stop the agent then).

Before acting it writes `truth-<attempt>.json` to TRUTH_DIR (rank, step, case, unix time, pid,
message), so the test compares what trnwatch says with what happened. No trnwatch import: this is
any user's script.
"""

import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

STEP_S = 0.05
TIMEOUT_S = 60.0
HANG_TIMEOUT_S = 3.0


def main() -> None:
    case, fail_rank, fail_step, truth_dir = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    attempts = int(sys.argv[5]) if len(sys.argv) > 5 and sys.argv[5] != "all" else None
    steps = int(sys.argv[6]) if len(sys.argv) > 6 else 40
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    rank = int(os.environ["RANK"])
    timeout_s = HANG_TIMEOUT_S if case == "hang" else TIMEOUT_S
    # Each attempt's process group keys apart: torch 2.13's gloo otherwise reads the previous
    # attempt's addresses from the agent's store after a restart and fails to connect.
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False)
    store = dist.PrefixStore(f"attempt-{attempt}", store)
    world = int(os.environ["WORLD_SIZE"])
    dist.init_process_group(
        "gloo", store=store, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=timeout_s)
    )
    acting = rank == fail_rank and (attempts is None or attempt < attempts)
    value = torch.ones(1)
    for step in range(1, steps + 1):
        if acting and step == fail_step:
            act(case, rank, step, attempt, truth_dir)
        dist.all_reduce(value)
        print(f"step {step}", flush=True)
        time.sleep(STEP_S)
    dist.destroy_process_group()


def act(case: str, rank: int, step: int, attempt: int, truth_dir: str) -> None:
    message = f"injected failure on rank {rank} at step {step}"
    truth = {"case": case, "rank": rank, "step": step, "attempt": attempt, "ts": time.time(), "pid": os.getpid()}
    truth["message"] = f"RuntimeError: {message}" if case in ("raise", "record") else None
    path = os.path.join(truth_dir, f"truth-{attempt}.json")
    with open(path + ".tmp", "w") as out:
        json.dump(truth, out)
    os.replace(path + ".tmp", path)
    if case in ("raise", "record"):
        raise RuntimeError(message)
    if case == "exit":
        sys.exit(3)
    if case in ("hang", "wait"):
        while True:
            time.sleep(1.0)


if __name__ == "__main__":
    if sys.argv[1] == "record":
        record(main)()
    else:
        main()
