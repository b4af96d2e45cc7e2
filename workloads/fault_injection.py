"""The reference workload's injected faults (--slow-rank, --hang-rank, --crash-rank): what the
monitor's diagnosis is tested against."""

import argparse
import time

from trnwatch.workloads.emitter import JobEmitter


class InjectedCrash(RuntimeError):
    """Raised by --crash-rank/--crash-step."""


class Faults:
    """The injected faults for this rank (all off unless the flags name this rank)."""

    def __init__(self, args: argparse.Namespace, rank: int):
        self.slow_factor = args.slow_factor if args.slow_rank == rank else 1.0
        self.hang_step = args.hang_step if args.hang_rank == rank else None
        self.hang_region = args.hang_region
        self.crash_step = args.crash_step if args.crash_rank == rank else None

    def before_step(self, step: int, emitter: JobEmitter, first_collective_op: str) -> None:
        if step == self.crash_step:
            raise InjectedCrash(f"injected crash at step {step}")
        if step == self.hang_step:
            region = f"collective:{first_collective_op}" if self.hang_region == "collective" else self.hang_region
            with emitter.region(region):
                while True:  # the main thread is stuck; the heartbeat thread keeps reporting it
                    time.sleep(1.0)

    def slow_down(self, compute_s: float, emitter: JobEmitter) -> None:
        if self.slow_factor > 1.0:
            with emitter.region("compute"):
                time.sleep((self.slow_factor - 1.0) * compute_s)
