"""Any user's plain training script under torchrun (no framework, no trnwatch import): each rank
all-reduces over gloo once per step and prints `step N loss L T s/iter`, for STEPS steps (argv[1]),
after writing its PID to PID_DIR/rank-R.pid (argv[2]) for the test to find."""

import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

STEP_S = 0.05


def main() -> None:
    steps, pid_dir = int(sys.argv[1]), sys.argv[2]
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    with open(os.path.join(pid_dir, f"rank-{rank}.pid"), "w") as f:
        f.write(str(os.getpid()))
    value = torch.ones(1)
    for step in range(1, steps + 1):
        started = time.monotonic()
        dist.all_reduce(value)
        time.sleep(STEP_S)
        loss = 4.0 / (step + 1)
        print(f"step {step} loss {loss:.4f} {time.monotonic() - started:.3f} s/iter", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
