"""The `trnwatch` command line: watch, replay, demo, sim, schema."""

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

from trnwatch import __version__

EPILOG = """\
examples:
  trnwatch demo                                   whole simulated Trn3 UltraServer (36 hosts, 144 chips)
  trnwatch demo --headless --duration 30          the same without a screen; prints the receipt path
  neuron-monitor | trnwatch watch --stdin         one host's stream from a pipe
  trnwatch watch --record run.trnrec              run the local neuron-monitor, keep a recording
  trnwatch replay run.trnrec --headless           the recorded session again, to the same receipt
  trnwatch sim --scenario straggler --no-wait --count 60 | trnwatch watch --stdin --headless

Every session ends with a receipt (JSON + Markdown) saying what was measured, at which
boundary, from which source; without --receipt it goes to ~/.local/state/trnwatch/receipts/.
"""


def _positive(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if not number > 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0: {value!r}")
    return number


def _non_negative(value: str) -> float:
    number = _positive(value) if value not in ("0", "0.0") else 0.0
    return number


def _session_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("session")
    g.add_argument("--headless", action="store_true", help="no screen: collect, then write the receipt and print its path")
    g.add_argument("--duration", type=_positive, metavar="SECONDS", help="stop after this many seconds (default: until EOF or Ctrl-C)")
    g.add_argument("--receipt", type=Path, metavar="PATH", help="where to write the receipt JSON (Markdown goes beside it as .md)")
    g.add_argument("--record", type=Path, metavar="PATH", help="record every raw line ingested, for `trnwatch replay`")
    g.add_argument("--ultraservers", type=Path, metavar="FILE",
                   help="map hosts to UltraServers: lines of '<host id or stream label> <ultraserver id>'")
    g.add_argument("--refresh", type=_positive, default=1.0, metavar="SECONDS", help="screen refresh interval (default 1)")
    g.add_argument("--theme", default=None, help="screen theme: dark, light, high-contrast, colorblind, mono")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trnwatch",
        description="Live monitor for training runs on AWS Trainium3 UltraServers: per-chip HBM and NeuronCore "
        "utilisation from neuron-monitor, split by scope (chip, host, UltraServer), with receipts and recordings.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"trnwatch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    watch = sub.add_parser("watch", help="watch neuron-monitor streams (local child process or stdin)",
                           description="Watch a live neuron-monitor stream. With no source option, runs the local "
                           "neuron-monitor (PATH or /opt/aws/neuron/bin) with a generated config.")
    src = watch.add_mutually_exclusive_group()
    src.add_argument("--stdin", action="store_true", help="read one neuron-monitor stream (one JSON report per line) from stdin until EOF")
    src.add_argument("--neuron-monitor", metavar="PATH", help="run this executable instead of neuron-monitor, with the same arguments")
    watch.add_argument("--period", type=_positive, default=1.0, metavar="SECONDS", help="neuron-monitor report period (default 1)")
    watch.add_argument("--label", default=None, help="stream label used as host id when a report has no instance id "
                       "(default: 'stdin' or 'local')")
    _session_options(watch)

    replay = sub.add_parser("replay", help="replay a recording to the same figures and receipt",
                            description="Replay a recording made with --record. Figures and receipt match the recorded "
                            "session; the receipt's evidence is 'replayed'.")
    replay.add_argument("recording", type=Path, metavar="RECORDING")
    replay.add_argument("--speed", type=_non_negative, default=None, metavar="X",
                        help="replay rate: 1 = real time, 0 = as fast as possible (default: 1 with the screen, 0 with --headless)")
    _session_options(replay)

    demo = sub.add_parser("demo", help="the whole simulated Trn3 UltraServer through the live parsing path",
                          description="Simulated Trn3 Gen2 UltraServer: 36 hosts x 4 chips, each host's reports rendered "
                          "to JSON text and parsed exactly like a live stream. Everything it shows is labelled SIMULATED.")
    from trnwatch.workloads.sim.scenarios import SCENARIOS
    from trnwatch.workloads.sim.topology import TOPOLOGIES
    demo.add_argument("--scenario", default="healthy", choices=sorted(SCENARIOS), help="fault scenario (default healthy)")
    demo.add_argument("--topology", default="trn3-gen2-us", choices=sorted(TOPOLOGIES), help="fleet shape (default trn3-gen2-us)")
    demo.add_argument("--seed", type=int, default=0, help="simulator seed (default 0)")
    demo.add_argument("--period", type=_positive, default=1.0, metavar="SECONDS", help="report period per host (default 1)")
    _session_options(demo)

    sim = sub.add_parser("sim", help="the simulator as a drop-in neuron-monitor (reports on stdout)",
                         description="A drop-in neuron-monitor for one simulated host: accepts -c CONFIG and --verbose "
                         "like the real one, writes one JSON report per line.")
    from trnwatch.workloads.sim import cli as sim_cli
    sim_cli.add_arguments(sim)

    schema = sub.add_parser("schema", help="print the JSON Schema of a contract",
                            description="Print the JSON Schema exported from the model of a versioned contract.")
    schema.add_argument("contract", choices=["receipt", "job"], help="receipt: trnwatch.receipt/1; job: trnwatch.job/1")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "sim":
        from trnwatch.workloads.sim import cli as sim_cli
        return sim_cli.run(args)
    if args.command == "schema":
        return _print_schema(args.contract)
    try:
        return _run_session(args)
    except UsageError as exc:
        print(f"trnwatch: {exc}", file=sys.stderr)
        return 2


class UsageError(Exception):
    """Something the user asked for cannot be done; the message says what and what to do."""


def _print_schema(contract: str) -> int:
    if contract == "receipt":
        from trnwatch.ledger.receipt import receipt_json_schema
        schema = receipt_json_schema()
    else:
        from trnwatch.collectors.job_events import job_event_json_schema
        schema = job_event_json_schema()
    print(json.dumps(schema, indent=2))
    return 0


def _load_ultraservers(path: Path | None) -> dict[str, str]:
    from trnwatch.collectors.ultraserver_map import UltraServerMapError, load_ultraserver_map
    if path is None:
        return {}
    try:
        return load_ultraserver_map(path)
    except UltraServerMapError as exc:
        raise UsageError(str(exc)) from None


def _run_session(args) -> int:
    session, progress = _make_session(args)
    if args.headless:
        reason, path = asyncio.run(_headless(session, progress))
    else:
        from trnwatch.tui.app import run_app
        reason, path = run_app(session, refresh_s=args.refresh, theme=args.theme, receipt_path=args.receipt)
    if path is not None:
        _say(f"receipt: {path} (and {path.with_suffix('.md').name})")
    lost = [s.source_id for s in session.ledger.sources.values() if s.end_error]
    return 1 if lost and reason == "eof" else 0


def _say(text: str) -> None:
    """Print to stdout, tolerating a terminal that has gone away (SIGHUP, closed pipe)."""
    try:
        print(text, flush=True)
    except (BrokenPipeError, OSError):
        pass


async def _headless(session, progress_every_s: float):
    from trnwatch.session import progress_lines
    session.install_signal_handlers()
    reporter = asyncio.create_task(progress_lines(session, progress_every_s))
    try:
        reason = await session.run()
    finally:
        reporter.cancel()
    return reason, session.write_receipt(session.receipt_path)


def _make_session(args):
    """Sources, ledger and recorder for the chosen command; raises UsageError for bad input."""
    from trnwatch.collectors import streams
    from trnwatch.collectors.recording import Recorder, RecordingError, RecordingReader, replay_lines
    from trnwatch.ledger.ledger import Ledger
    from trnwatch.session import Session, SourceSpec

    ultraservers = _load_ultraservers(args.ultraservers)
    recorded_evidence = None
    progress_every_s = 10.0
    if args.command == "watch":
        mode = "live"
        if args.stdin:
            label = args.label or "stdin"
            sources = [SourceSpec(label, "neuron-monitor", lambda: streams.stdin_lines(label))]
        else:
            executable = args.neuron_monitor or streams.find_neuron_monitor()
            if executable is None:
                raise UsageError("neuron-monitor not found on PATH or in /opt/aws/neuron/bin. Install aws-neuronx-tools, "
                                 "pass --neuron-monitor PATH, pipe a stream with --stdin, or try `trnwatch demo`.")
            label = args.label or "local"
            sources = [SourceSpec(label, "neuron-monitor",
                                  lambda: streams.neuron_monitor_lines(executable, args.period, label))]
    elif args.command == "replay":
        mode = "replayed"
        try:
            reader = RecordingReader(args.recording)
        except (RecordingError, OSError) as exc:
            raise UsageError(str(exc)) from None
        recorded_evidence = reader.header.evidence
        ultraservers = {**reader.header.ultraservers, **ultraservers}
        speed = args.speed if args.speed is not None else (0.0 if args.headless else 1.0)
        sources = [SourceSpec("replay", "neuron-monitor", lambda: replay_lines(reader, speed), relay=True)]
        progress_every_s = 2.0
    else:  # demo
        from trnwatch.collectors.simulated import host_source_id, sim_host_lines
        from trnwatch.workloads.sim.fleet import fleet_hosts
        from trnwatch.workloads.sim.topology import get_topology
        mode = "simulated"
        hosts = fleet_hosts(get_topology(args.topology), args.seed, args.scenario, args.period)
        start = time.monotonic()
        sources = [
            SourceSpec(host_source_id(h), "neuron-monitor",
                       lambda h=h: sim_host_lines(h, args.period, start, args.period * i / len(hosts)))
            for i, h in enumerate(hosts)
        ]
    recorder = Recorder(args.record, mode, ultraservers) if args.record else None
    session = Session(Ledger(mode, ultraservers), sources, recorder, args.duration, recorded_evidence)
    session.receipt_path = args.receipt
    return session, progress_every_s
