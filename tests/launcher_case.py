"""A worker for a launcher other than torchrun (mpirun, or one process per rank for the Slurm
label test): prints `step N` for 40 steps; the rank RANK at step STEP does CASE and writes its truth
to TRUTH_DIR/truth.json first. Run as `launcher_case.py CASE RANK STEP TRUTH_DIR`; its rank is
$OMPI_COMM_WORLD_RANK (Open MPI), else $SLURM_PROCID. Cases: raise (RuntimeError), kill (SIGKILL to
itself). No trnwatch import: any user's script."""

import json
import os
import signal
import sys
import time


def main() -> None:
    case, fail_rank, fail_step, truth_dir = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("SLURM_PROCID", "0")))
    for step in range(1, 41):
        if rank == fail_rank and step == fail_step:
            message = f"injected failure on rank {rank} at step {step}"
            truth = {"case": case, "rank": rank, "step": step, "ts": time.time(), "pid": os.getpid()}
            truth["message"] = f"RuntimeError: {message}" if case == "raise" else None
            with open(os.path.join(truth_dir, "truth.json"), "w") as out:
                json.dump(truth, out)
            if case == "raise":
                raise RuntimeError(message)
            os.kill(os.getpid(), signal.SIGKILL)
        print(f"step {step}", flush=True)
        time.sleep(0.05)


if __name__ == "__main__":
    main()
