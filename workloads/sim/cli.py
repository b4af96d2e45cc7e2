"""A drop-in `neuron-monitor` that plays one host of a simulated fleet.

Takes neuron-monitor's own options (`-c/--config-file`, `--verbose N`) plus the simulator's, and
writes one JSON report per line to stdout, flushed per line, every period on a monotonic
schedule (so it does not drift). Exit status: 0 when --count reports are written or on
SIGTERM / SIGINT / a closed stdout (a requested stop is not a failure), 1 when the played host is
lost (host-loss scenario, after a message on stderr), 2 on bad options or config.
"""

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Callable

from trnwatch.workloads.sim.fleet import SimHost
from trnwatch.workloads.sim.monitor_config import default_config, load_config
from trnwatch.workloads.sim.scenarios import SCENARIOS
from trnwatch.workloads.sim.topology import TOPOLOGIES, get_topology

PROG = "trnwatch sim"


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, not {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the drop-in's options to `parser` (used by `trnwatch sim` and `python -m`)."""
    parser.add_argument(
        "-c",
        "--config-file",
        metavar="PATH",
        help="neuron-monitor JSON config (periods, enabled groups); default: all groups every 5 s",
    )
    parser.add_argument(
        "--verbose", type=int, choices=range(5), default=0, metavar="N", help="log detail on stderr, 0-4 (default 0)"
    )
    parser.add_argument(
        "--topology", choices=list(TOPOLOGIES), default="trn3-gen2-us", help="fleet shape (default trn3-gen2-us)"
    )
    parser.add_argument(
        "--host", type=_non_negative_int, default=0, help="which host of the topology to play (default 0)"
    )
    parser.add_argument("--seed", type=int, default=0, help="simulation seed (default 0)")
    parser.add_argument("--scenario", choices=list(SCENARIOS), default="healthy", help="default healthy")
    parser.add_argument(
        "--count",
        type=_non_negative_int,
        default=None,
        metavar="N",
        help="stop after N reports (default: run until stopped)",
    )
    parser.add_argument(
        "--no-wait",
        action="store_true",
        help="write reports back to back; virtual time still advances one period per report",
    )
    parser.add_argument(
        "--serve-prometheus",
        type=int,
        default=None,
        metavar="PORT",
        help="instead of stdout, serve the reports in neuron-monitor-prometheus.py's format on "
        "http://127.0.0.1:PORT/metrics",
    )
    parser.add_argument(
        "--lnc", type=int, choices=(1, 2), default=None, help="logical NeuronCore config (default: the topology's, 2)"
    )


class _Terminated(Exception):
    """SIGTERM arrived."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise _Terminated


def run(args: argparse.Namespace) -> int:
    """Run the drop-in with parsed `args`; returns the exit status."""

    def log(level: int, message: str) -> None:
        if args.verbose >= level:
            print(f"{PROG}: {message}", file=sys.stderr, flush=True)

    try:
        config = load_config(args.config_file) if args.config_file else default_config()
        topology = get_topology(args.topology, args.lnc)
        host = SimHost(
            topology,
            args.host,
            args.seed,
            args.scenario,
            config.period_s,
            config.group_periods_s.keys(),
            config.group_periods_s,
        )
    except ValueError as exc:  # ConfigError included
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2

    log(
        1,
        f"simulated {topology.name} host {args.host} (LNC={topology.lnc}), scenario {args.scenario}, "
        f"seed {args.seed}, period {config.period_s:g} s",
    )
    log(2, "groups: " + ", ".join(f"{g}={p:g}s" for g, p in config.group_periods_s.items()))
    for feature in config.ignored:
        log(1, f"config: {feature} is accepted but not simulated")

    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_terminated) if in_main_thread else None
    try:
        if args.serve_prometheus is not None:
            from trnwatch.workloads.sim.exporter import serve_host

            return serve_host(host, args.serve_prometheus, args.count, log)
        return _emit(host, args.count, args.no_wait, log)
    except (KeyboardInterrupt, _Terminated):
        log(1, "stopped by signal")
        return 0
    except BrokenPipeError:
        # The reader went away. Point stdout at /dev/null so the interpreter's final flush
        # does not raise again (the pattern the Python docs give for SIGPIPE).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        log(1, "stdout closed")
        return 0
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)


def _emit(host: SimHost, count: int | None, no_wait: bool, log: Callable[[int, str], None]) -> int:
    start_s = time.monotonic()
    tick = 0
    while count is None or tick < count:
        if not host.alive(tick):
            print(host.lost_message(tick), file=sys.stderr, flush=True)
            return 1
        line = host.report_line(tick)
        if not no_wait:
            # Report n is due at start + n * period: sleeping to a schedule, not for a fixed
            # interval, keeps the time spent building reports from accumulating as drift.
            delay_s = start_s + tick * host.period_s - time.monotonic()
            if delay_s > 0:
                time.sleep(delay_s)
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
        log(3, f"tick {tick}: {len(line)} bytes")
        tick += 1
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m trnwatch.workloads.sim`."""
    parser = argparse.ArgumentParser(
        prog="python -m trnwatch.workloads.sim",
        description="Simulated Trn3 fleet: a drop-in neuron-monitor for one host.",
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))
