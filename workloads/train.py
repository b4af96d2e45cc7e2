"""Reference training workload: a small GPT with tensor and data parallelism, launched by torchrun.

On CPU (anywhere) it runs with torch.distributed + gloo (cpu_backend.py); on Trainium
(`--device neuron`, neuron_backend.py) with torch-neuronx + neuronx-distributed.

    torchrun --standalone --nproc-per-node 2 -m trnwatch.workloads.train \\
        --run-dir /tmp/trnwatch-run --steps 200 --tp 2

It emits `trnwatch.job/1` telemetry to `<telemetry-dir>/rank-NNNNN.jsonl` (default
`<run-dir>/telemetry`), checkpoints every `--checkpoint-interval` steps in NxD's layout
(checkpoint_files.py) and resumes from the newest complete checkpoint.

This file is the entry point of each torchrun worker: flags (train_args.py), the backend the
flags ask for, signals and the exit status. The modules it uses import in one direction:
training_run -> tiny_gpt, synthetic_data, checkpoint_files, fault_injection;
neuron_backend -> cpu_backend -> checkpoint_files; none imports this file.
"""

import signal
import sys

from trnwatch.workloads.emitter import JobEmitter
from trnwatch.workloads.train_args import parse_args

TORCH_HINT = (
    "On CPU: pip install torch==2.13.0; "
    "on Trainium: torch-neuronx from AWS's Neuron repository (README, 'Running on Trainium')."
)


class Terminated(BaseException):
    """SIGTERM arrived (torchrun stopping the workers): end the run as aborted."""


def backend_class(device: str):
    """CpuBackend, or NeuronBackend when asked for (or `auto` and a Neuron device is usable)."""
    from trnwatch.workloads.cpu_backend import CpuBackend

    if device == "cpu":
        return CpuBackend
    from trnwatch.workloads import neuron_backend  # imports no Neuron package until asked to

    reason = neuron_backend.neuron_unavailable_reason()
    if reason is None:
        return neuron_backend.NeuronBackend
    if device == "neuron":
        raise SystemExit(f"--device neuron: {reason}. {neuron_backend.INSTALL_HINT}")
    return CpuBackend


def main(argv: list[str] | None = None) -> int:
    """Entry point for each torchrun worker; returns the process exit code."""
    args = parse_args(argv)  # before torch is imported: --help and flag errors need none
    try:
        import torch  # noqa: F401  (the backends and the model need it; say so, no traceback)
    except ImportError as missing:
        raise SystemExit(f"trnwatch.workloads.train needs PyTorch ({missing}). {TORCH_HINT}") from None
    from trnwatch.workloads.training_run import train

    backend_type = backend_class(args.device)
    emitter = JobEmitter(args.telemetry_dir, run=args.run_name, heartbeat_interval_s=args.heartbeat_interval)

    def on_sigterm(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM kills at once
        raise Terminated()

    signal.signal(signal.SIGTERM, on_sigterm)
    backend = backend_type(args, emitter)
    status = "failed"
    try:
        train(args, emitter, backend)
        status = "success"
    except (Terminated, KeyboardInterrupt):
        status = "aborted"
    except Exception as exc:
        emitter.error(f"{type(exc).__name__}: {exc}")
        raise
    finally:
        emitter.run_end(status)
        backend.close()
    return 0 if status == "success" else 143


if __name__ == "__main__":
    sys.exit(main())
