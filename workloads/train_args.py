"""The reference workload's flags; imports no torch, so `--help` and flag errors need none.

Flag names avoid prefixes of torchrun's own options: torchrun's argparse matches abbreviations
across the whole command line, so e.g. `--d` would abort the launch as ambiguous.
"""

import argparse
import os

HANG_REGIONS = ("dataloader", "compute", "collective")


def build_parser() -> argparse.ArgumentParser:
    """The workload's flags (names checked against torchrun's in the tests)."""
    parser = argparse.ArgumentParser(
        description="Reference training workload: a small GPT with tensor and data parallelism, launched by torchrun."
    )
    parser.add_argument("--run-dir", required=True, help="directory of this run's outputs")
    parser.add_argument("--run-name", help="run id in telemetry (default: the run directory's name)")
    parser.add_argument("--telemetry-dir", help="where rank-NNNNN.jsonl go (default: <run-dir>/telemetry)")
    parser.add_argument("--checkpoint-dir", help="default: <run-dir>/checkpoints")
    parser.add_argument("--checkpoint-interval", type=int, default=0, help="save every N steps (0: never)")
    parser.add_argument("--steps", type=int, default=100, help="train up to this step number")
    parser.add_argument("--warmup-steps", type=int, default=3, help="steps reported as the warmup phase")
    parser.add_argument("--model-dim", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--micro-batch", type=int, default=8, help="sequences per data-parallel replica per step")
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel degree; dp = world size / tp")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--device", choices=("auto", "cpu", "neuron"), default="auto")
    parser.add_argument("--heartbeat-interval", type=float, default=2.0, help="seconds between heartbeats")
    parser.add_argument("--probe-interval", type=int, default=100, help="Neuron only: steps between collective probes")
    parser.add_argument("--slow-rank", type=int, help="make this rank's compute slower")
    parser.add_argument("--slow-factor", type=float, default=3.0, help="compute time multiplier for --slow-rank")
    parser.add_argument("--hang-rank", type=int, help="make this rank hang forever ...")
    parser.add_argument("--hang-step", type=int, help="... at this step (0: before it joins the process group) ...")
    parser.add_argument("--hang-region", choices=HANG_REGIONS, default="dataloader", help="... in this region")
    parser.add_argument("--crash-rank", type=int, help="make this rank raise ...")
    parser.add_argument("--crash-step", type=int, help="... at this step")
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and complete the workload's flags."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.telemetry_dir = args.telemetry_dir or os.path.join(args.run_dir, "telemetry")
    args.checkpoint_dir = args.checkpoint_dir or os.path.join(args.run_dir, "checkpoints")
    args.run_name = args.run_name or os.path.basename(os.path.abspath(args.run_dir))
    if args.model_dim % args.heads or args.heads % args.tp:
        parser.error("--model-dim must divide by --heads, and --heads by --tp")
    return args
