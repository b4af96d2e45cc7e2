"""A worker for a launcher other than torchrun (mpirun, or one process per rank for the Slurm
label test): prints `step N` for 40 steps; the rank RANK at step STEP does CASE and writes its truth
to TRUTH_DIR/truth.json first. Run as `launcher_case.py CASE RANK STEP TRUTH_DIR`; its rank is
$OMPI_COMM_WORLD_RANK (Open MPI), else $SLURM_PROCID. Cases: raise (RuntimeError), kill (SIGKILL to
itself), hang (every rank all-reduces over gloo once per step, MASTER_PORT from the environment, a
3 s timeout; the rank sleeps forever outside the collective, so its peers time out waiting for it).
No trnwatch import: any user's script."""

import json
import os
import signal
import sys
import time


def main() -> None:
    case, fail_rank, fail_step, truth_dir = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("SLURM_PROCID", "0")))
    all_reduce = collective(rank) if case == "hang" else lambda: None
    for step in range(1, 41):
        if rank == fail_rank and step == fail_step:
            message = f"injected failure on rank {rank} at step {step}"
            truth = {"case": case, "rank": rank, "step": step, "ts": time.time(), "pid": os.getpid()}
            truth["message"] = f"RuntimeError: {message}" if case == "raise" else None
            with open(os.path.join(truth_dir, "truth.json"), "w") as out:
                json.dump(truth, out)
            if case == "raise":
                raise RuntimeError(message)
            if case == "hang":
                while True:
                    time.sleep(1.0)
            os.kill(os.getpid(), signal.SIGKILL)
        all_reduce()
        print(f"step {step}", flush=True)
        time.sleep(0.05)


def collective(rank: int):
    """A gloo process group over Open MPI's ranks; returns one all-reduce."""
    import datetime

    import torch
    import torch.distributed as dist

    world = int(os.environ["OMPI_COMM_WORLD_SIZE"])
    store = dist.TCPStore("127.0.0.1", int(os.environ["MASTER_PORT"]), world, is_master=rank == 0)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=3))
    value = torch.ones(1)
    return lambda: dist.all_reduce(value)


if __name__ == "__main__":
    main()
