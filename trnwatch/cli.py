"""The `trnwatch` command line: watch, record, replay, demo, sim, snapshot, schema."""

import argparse
import os
import sys
import time
from pathlib import Path

from trnwatch import __version__
from trnwatch.exit_signals import Stopped, hold_exit_signals, ignore_exit_signals, install_start_handlers
from trnwatch.themes import THEME_NAMES

EPILOG = """\
examples:
  trnwatch demo                                   whole simulated Trn3 UltraServer (36 hosts, 144 chips)
  trnwatch demo --headless --duration 30          the same without a screen; prints the receipt path
  neuron-monitor | trnwatch watch --stdin         one host's stream from a pipe
  trnwatch watch --record run.trnrec              run the local neuron-monitor, keep a recording
  trnwatch replay run.trnrec --headless           the recorded session again, to the same receipt
  trnwatch replay run.trnrec --from -60 --headless   only its last minute (seconds or ISO-8601 times)
  trnwatch record /var/lib/trnwatch --rotate 1G --retain 48   headless recorder for long runs
  trnwatch sim --scenario straggler --no-wait --count 60 | trnwatch watch --stdin --headless
  trnwatch compare base.json new.json --fail-if-slower 2    refuses (exit 3) unless the boundaries match

Every session ends with a receipt (JSON + Markdown) saying what was measured, at which
boundary, from which source; without --receipt it goes to ~/.local/state/trnwatch/receipts/.
"""


SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
AGE_UNITS = {"s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def _rotate_arg(value: str) -> tuple[str, float]:
    """`--rotate`: ("bytes", N) for a size (K/M/G/T, optionally with B or iB) or ("s", N) for an age."""
    number = value.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    unit = value[len(number) :]
    try:
        amount = float(number)
    except ValueError:
        amount = -1.0
    size_unit = unit[:-2] if unit.endswith("iB") else unit[:-1] if unit.endswith("B") else unit
    if amount > 0 and unit in AGE_UNITS:
        return "s", amount * AGE_UNITS[unit]
    if amount > 0 and size_unit in SIZE_UNITS and (unit or number.isdigit()):
        return "bytes", amount * SIZE_UNITS[size_unit]
    raise argparse.ArgumentTypeError(f"not a size (e.g. 512M, 1G) or an age (e.g. 30m, 6h, 1d): {value!r}")


def _retain_arg(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of files, at least 1: {value!r}")
    return int(value)


def _session_options(p: argparse.ArgumentParser, ultraserver_map: bool = True) -> None:
    """The options every session command has; `ultraserver_map`: `--ultraservers FILE` (the demo's
    `--ultraservers N` counts its simulated UltraServers instead, which place themselves)."""
    from trnwatch.option_types import positive

    p.set_defaults(default_receipt=True)
    g = p.add_argument_group("session")
    g.add_argument(
        "--headless", action="store_true", help="no screen: collect, then write the receipt and print its path"
    )
    g.add_argument(
        "--duration",
        type=positive,
        metavar="SECONDS",
        help="stop after this many seconds (default: until EOF or Ctrl-C)",
    )
    g.add_argument(
        "--receipt", type=Path, metavar="PATH", help="where to write the receipt JSON (Markdown goes beside it as .md)"
    )
    g.add_argument(
        "--record",
        type=Path,
        metavar="PATH",
        help="record every raw line ingested (trnwatch.recording/2, index in PATH.idx), for `trnwatch replay`",
    )
    if ultraserver_map:
        g.add_argument(
            "--ultraservers",
            type=Path,
            metavar="FILE",
            help="map hosts to UltraServers: lines of '<host id or stream label> <ultraserver id>'",
        )
    else:
        p.set_defaults(ultraservers=None)
    g.add_argument(
        "--refresh", type=positive, default=1.0, metavar="SECONDS", help="screen refresh interval (default 1)"
    )
    g.add_argument(
        "--theme", default=None, choices=THEME_NAMES, help="screen theme (default dark; mono under NO_COLOR)"
    )
    g.add_argument(
        "--snapshot-dir",
        type=Path,
        metavar="DIR",
        help="where the screen's export key (e) writes SVG + JSON snapshots (default ./snapshots)",
    )
    _alert_options(p)


EXIT_ON_STATUS = 4  # `--exit-on` ended the session (distinct from 0, 1, 2, 3 and 130)
NOTHING_MEASURED_STATUS = 5  # a session that ended otherwise normally in which no source delivered a line
EXIT_ON_WORDS = ("slow", "late", "stalled", "hung", "dead", "failed", "critical", "error", "warning")


def _exit_on_arg(value: str) -> frozenset[str]:
    words = frozenset(w.strip().lower() for w in value.split(",") if w.strip())
    unknown = sorted(words - set(EXIT_ON_WORDS))
    if not words or unknown:
        raise argparse.ArgumentTypeError(
            f"unknown verdict or severity {', '.join(unknown) or value!r}; choose from {', '.join(EXIT_ON_WORDS)}"
        )
    return words


def _alert_options(p: argparse.ArgumentParser) -> None:
    from trnwatch.alerts import HOLD_DOWN_S
    from trnwatch.option_types import positive

    g = p.add_argument_group("alerts (README: Alerts)")
    g.add_argument(
        "--alert-cmd",
        metavar="CMD",
        help="run CMD with /bin/sh -c for each incident that opens, escalates or clears: the incident as "
        "JSON on stdin, TRNWATCH_KIND, _SEVERITY, _LABEL, _SITE, _CHANGE, _EVIDENCE in the environment",
    )
    g.add_argument(
        "--alert-webhook",
        metavar="URL|env:NAME|file:PATH",
        help="POST the same JSON (with a `text` line for Slack or Teams) to this URL; a URL holding a "
        "secret (Slack's) is read from env:NAME or file:PATH",
    )
    g.add_argument(
        "--alert-webhook-auth",
        metavar="env:NAME|file:PATH",
        help="the webhook's Authorization header value, from the environment or a file",
    )
    g.add_argument(
        "--alert-hold-down",
        type=positive,
        default=HOLD_DOWN_S,
        metavar="SECONDS",
        help=f"page at most once per site, change and label in this interval (default {HOLD_DOWN_S:g})",
    )
    g.add_argument(
        "--exit-on",
        type=_exit_on_arg,
        default=frozenset(),
        metavar="VERDICT[,...]",
        help=f"end the session (receipt written, exit status {EXIT_ON_STATUS}) when an incident opens or "
        "escalates with one of these verdicts or severities: " + ", ".join(EXIT_ON_WORDS),
    )
    g.add_argument(
        "--serve-metrics",
        metavar="[HOST:]PORT",
        help="serve OpenMetrics at http://HOST:PORT/metrics (default host 127.0.0.1)",
    )


def _record_options(record: argparse.ArgumentParser) -> None:
    from trnwatch import sources
    from trnwatch.option_types import positive
    from trnwatch.stacks import add_stack_options

    record.add_argument("folder", type=Path, metavar="DIR", help="where the recording files go (created 0700)")
    sources.add_options(record, "record")
    add_stack_options(record)
    rec = record.add_argument_group("recording")
    rec.add_argument(
        "--rotate",
        type=_rotate_arg,
        action="append",
        default=[],
        metavar="SIZE|AGE",
        help="start the next file after SIZE bytes (K, M, G, T: powers of 1024, e.g. 1G) or AGE "
        "(s, m, h, d, e.g. 6h); repeat to give both",
    )
    rec.add_argument(
        "--retain", type=_retain_arg, metavar="N", help="keep at most N recording files in DIR (oldest deleted)"
    )
    rec.add_argument("--duration", type=positive, metavar="SECONDS", help="stop after this many seconds")
    rec.add_argument("--receipt", type=Path, metavar="PATH", help="also write a receipt at the end")
    rec.add_argument("--ultraservers", type=Path, metavar="FILE", help="host -> UltraServer map, as for `watch`")
    _alert_options(record)
    record.set_defaults(headless=True, record=None, default_receipt=False, snapshot_dir=None)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line. With `command` ("" for none), only that command's options are built (the
    others keep their name and help, which `trnwatch --help` lists), so a command that draws no
    screen imports only what it uses: `--version`, `compare` and `schema` start without the
    sources, the ledger or the screen. None builds every command's."""
    from trnwatch.option_types import non_negative, positive

    def built(name: str) -> bool:
        return command is None or command == name

    parser = argparse.ArgumentParser(
        prog="trnwatch",
        description="Live monitor for training runs on AWS Trainium3 UltraServers: per-chip HBM and NeuronCore "
        "utilisation from neuron-monitor, split by scope (chip, host, UltraServer), with receipts and recordings.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-V", "--version", action="version", version=f"trnwatch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    watch = sub.add_parser(
        "watch",
        help="watch neuron-monitor streams (local child process or stdin)",
        description="Watch a live neuron-monitor stream. With no source option, runs the local "
        "neuron-monitor (PATH or /opt/aws/neuron/bin) with a generated config.",
    )
    if built("watch"):
        from trnwatch import sources
        from trnwatch.stacks import add_stack_options

        sources.add_options(watch, "watch")
        add_stack_options(watch)
        _session_options(watch)

    record = sub.add_parser(
        "record",
        help="headless recorder for long runs: every source of `watch`, no screen",
        description="Record every line the sources of `watch` deliver into a folder of "
        "trnwatch.recording/2 files, rotated by size or age, until SIGTERM, SIGHUP, Ctrl-C or "
        "--duration. No screen, and no receipt unless --receipt is given. `trnwatch replay DIR` "
        "replays the folder as one recording.",
    )
    if built("record"):
        _record_options(record)

    replay = sub.add_parser(
        "replay",
        help="replay a recording to the same figures and receipt",
        description="Replay a recording made with --record. Figures and receipt match the recorded "
        "session; the receipt's evidence is 'replayed'.",
    )
    if built("replay"):
        from trnwatch import sources

        sources.add_options(replay, "replay")
        _session_options(replay)

    demo = sub.add_parser(
        "demo",
        help="the whole simulated Trn3 UltraServer through the live parsing path",
        description="Simulated Trn3 Gen2 UltraServer: 36 hosts x 4 chips, each host's reports rendered "
        "to JSON text and parsed exactly like a live stream. Everything it shows is labelled SIMULATED.",
    )
    if built("demo"):
        from trnwatch import sources

        sources.add_options(demo, "demo")
        _session_options(demo, ultraserver_map=False)

    sim = sub.add_parser(
        "sim",
        help="the simulator as a drop-in neuron-monitor (reports on stdout)",
        description="A drop-in neuron-monitor for one simulated host: accepts -c CONFIG and --verbose "
        "like the real one, writes one JSON report per line.",
    )
    if built("sim"):
        from trnwatch.workloads.sim import cli as sim_cli

        sim_cli.add_arguments(sim)

    snap = sub.add_parser(
        "snapshot",
        help="collect briefly, then print every scope as text or JSON (for scripts, tickets)",
        description="Collect from a source for --duration (default: three report periods; a recording: "
        "to its end), then print a plain-text summary of every scope, or with --json the full "
        "snapshot (trnwatch.snapshot/1), the same one the screen's export key writes.",
    )
    if built("snapshot"):
        from trnwatch import sources

        sources.add_options(snap, "snapshot")
        snap.add_argument("--duration", type=positive, metavar="SECONDS", help="how long to collect before printing")
        snap.add_argument("--ultraservers", type=Path, metavar="FILE", help="host -> UltraServer map, as for `watch`")
        snap.add_argument("--receipt", type=Path, metavar="PATH", help="also write the session's receipt here")
        snap.add_argument("--json", action="store_true", help="print the JSON snapshot instead of the text summary")
        snap.set_defaults(headless=True, record=None, default_receipt=False, snapshot_dir=None)

    compare = sub.add_parser(
        "compare",
        help="compare two receipts, refusing mismatched boundaries",
        description="Compare two receipts figure by figure. The boundary (scope, chips, hosts, "
        "UltraServers, ranks, fabric, instance and device type, LNC, versions, model, precision, "
        "batch, sequence length, parallelism, evidence) is checked first: any difference refuses "
        "the comparison (exit 3). Exit 1 with --fail-if-slower when steady tokens/s fell by more "
        "than PCT beyond noise; 0 otherwise.",
    )
    compare.add_argument("baseline", type=Path, metavar="BASELINE", help="receipt JSON of the reference run")
    compare.add_argument("candidate", type=Path, metavar="CANDIDATE", help="receipt JSON of the run being judged")
    compare.add_argument("--json", action="store_true", help="print the comparison as JSON instead of Markdown")
    compare.add_argument(
        "--allow-mismatch",
        default="",
        metavar="FIELD[,FIELD]",
        help="boundary fields allowed to differ; the output is labelled 'not like for like'",
    )
    compare.add_argument(
        "--fail-if-slower",
        type=non_negative,
        metavar="PCT",
        help="exit 1 when steady tokens/s fell by more than PCT percent beyond noise",
    )

    export = sub.add_parser(
        "export", help="a recording's time series as CSV, JSON lines, Parquet, OpenMetrics or a Perfetto trace"
    )
    if built("export"):
        from trnwatch import export_cmd

        export_cmd.add_options(export)
    runs = sub.add_parser("runs", help="past runs: the receipts in a folder as a table, newest first")
    if built("runs"):
        from trnwatch import runs_cmd

        runs_cmd.add_options(runs)

    schema = sub.add_parser(
        "schema",
        help="print the JSON Schema of a contract",
        description="Print the JSON Schema exported from the model of a versioned contract.",
    )
    schema.add_argument(
        "contract",
        choices=["receipt", "snapshot", "job", "neuron-monitor"],
        help="receipt: trnwatch.receipt/1; snapshot: trnwatch.snapshot/1; job: trnwatch.job/1; "
        "neuron-monitor: a report as trnwatch reads it",
    )
    # Every command: -V / --version, and no option abbreviations (`demo --headles` ran a headless
    # demo with no end; now it is refused with "did you mean --headless?", `_unrecognized`).
    parser.allow_abbrev = False
    for command_parser in sub.choices.values():
        command_parser.allow_abbrev = False
        command_parser.add_argument("-V", "--version", action="version", version=f"trnwatch {__version__}")
    return parser


def main(argv: list[str] | None = None) -> int:
    """The command line. Called as the program (`argv` None), the process also ends without
    waiting on any worker thread still blocked in a read (see `_leave`)."""
    as_process = argv is None
    if as_process:  # before the commands' imports: a SIGTERM or SIGHUP from here on is said
        install_start_handlers()
    try:
        parser = build_parser(_command_named(sys.argv[1:] if argv is None else argv))
        args, unknown = parser.parse_known_args(argv)
        if unknown:
            _unrecognized(parser, args.command, unknown)  # exits 2 with the command's usage
        args.as_process = as_process
        status = _dispatch(args)
    except KeyboardInterrupt:  # Ctrl-C before a session's own handlers were installed
        _warn("interrupted")
        status = 130
    except Stopped as stopped:  # SIGTERM or SIGHUP before them (trnwatch/exit_signals.py)
        _warn(f"stopped by {stopped.name} before a session started: no receipt (exit status {stopped.status})")
        status = stopped.status
    if as_process:
        ignore_exit_signals()
        _leave(status)
    return status


def _command_named(argv: list[str]) -> str:
    """The command `argv` names: its first word that is not an option ("" for none, as in
    `trnwatch --version`); trnwatch's own options take no value."""
    return next((arg for arg in argv if not arg.startswith("-")), "")


def _unrecognized(parser: argparse.ArgumentParser, command: str, unknown: list[str]) -> None:
    """Refuse arguments the command does not take with that command's usage (not the top-level
    one), suggesting the closest option for a misspelt one (`--scenerio`: `--scenario`)."""
    import difflib

    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    options = [o for action in sub._actions for o in action.option_strings if o.startswith("--")]
    hints = []
    for arg in unknown:
        if arg.startswith("--"):
            close = difflib.get_close_matches(arg.split("=", 1)[0], options, n=1, cutoff=0.7)
            if close:
                hints.append(f"{arg.split('=', 1)[0]}: did you mean {close[0]}?")
    sub.error(f"unrecognized arguments: {' '.join(unknown)}" + "".join(f"\n  {hint}" for hint in hints))


def _dispatch(args) -> int:
    if args.command == "sim":
        from trnwatch.workloads.sim import cli as sim_cli

        return sim_cli.run(args)
    if args.command == "schema":
        return _print_schema(args.contract)
    if args.command == "compare":
        return _run_compare(args)
    if args.command == "export":
        from trnwatch import export_cmd

        return export_cmd.run(args)
    if args.command == "runs":
        from trnwatch import runs_cmd

        return runs_cmd.run(args)
    try:
        if args.command == "snapshot":
            return _run_snapshot(args)
        if args.command == "replay" and args.info:
            return _print_recording_info(args.recording)
        if args.command == "record":
            return _run_record(args)
        return _run_session(args)
    except UsageError as exc:
        _warn(str(exc))
        return 2


def _leave(status: int) -> None:
    """End the process now if a worker thread is still alive (an HTTP read on a slow-drip target,
    a blocked executor job): the session is over, its receipt written and its children stopped,
    and the interpreter would otherwise join that thread at exit, for as long as the read lasts
    (and print a KeyboardInterrupt traceback from threading._shutdown on Ctrl-C)."""
    import threading

    if not any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


class UsageError(Exception):
    """Something the user asked for cannot be done; the message says what and what to do."""


def _print_schema(contract: str) -> int:
    import json

    if contract == "receipt":
        from trnwatch.ledger.receipt import receipt_json_schema

        schema = receipt_json_schema()
    elif contract == "snapshot":
        from trnwatch.ledger.snapshot import snapshot_json_schema

        schema = snapshot_json_schema()
    elif contract == "job":
        from trnwatch.collectors.job_events import job_event_json_schema

        schema = job_event_json_schema()
    else:
        from trnwatch.collectors.neuron_monitor import report_json_schema

        schema = report_json_schema()
    error = _emit(json.dumps(schema, indent=2))
    return 0 if error in (None, "the reader closed the pipe") else 1  # `| head` is a normal end


def _run_compare(args) -> int:
    """`trnwatch compare`: read two receipt files, print the comparison (ledger/compare.py decides)."""
    import json

    from trnwatch.ledger import compare

    receipts = []
    for path in (args.baseline, args.candidate):
        try:
            with open(path, "rb") as f:
                data = f.read(compare.MAX_RECEIPT_BYTES + 1)
            if len(data) > compare.MAX_RECEIPT_BYTES:
                _warn(f"{path} is over {compare.MAX_RECEIPT_BYTES >> 20} MiB: larger than any receipt trnwatch writes")
                return 2
            text = data.decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            _warn(f"cannot read receipt {path}: {exc}")
            return 2
        try:
            receipts.append(json.loads(text))
        except RecursionError:
            _warn(f"{path} is not a receipt: its JSON is nested deeper than the reader goes")
            return 2
        except ValueError:
            beside = path.with_suffix(".json")
            hint = f"; its receipt is {beside}" if beside != path and beside.exists() else ""
            _warn(f"{path} is not a receipt: not JSON (compare takes the receipts' .json files{hint})")
            return 2
    try:
        allow = {name for name in args.allow_mismatch.split(",") if name.strip()}
        baseline, candidate = receipts
        result = compare.compare(baseline, candidate, allow=allow)
    except compare.CompareError as exc:
        print(f"trnwatch: {exc}", file=sys.stderr)
        return 2
    if result.refused:
        if args.json:
            _say(json.dumps(result.to_json(), indent=2))
        print(compare.refusal_message(result), file=sys.stderr)
        return 3
    _say(
        json.dumps(result.to_json(), indent=2)
        if args.json
        else compare.render_markdown(result, str(args.baseline), str(args.candidate)).rstrip("\n")
    )
    if args.fail_if_slower is not None and compare.slower_beyond(result, args.fail_if_slower):
        print(f"trnwatch: steady tokens/s fell by more than {args.fail_if_slower:g}% beyond noise", file=sys.stderr)
        return 1
    return 0


def _load_ultraservers(path: Path | None) -> dict[str, str]:
    from trnwatch.collectors.ultraserver_map import UltraServerMapError, load_ultraserver_map

    if path is None:
        return {}
    try:
        return load_ultraserver_map(path)
    except UltraServerMapError as exc:
        raise UsageError(f"--ultraservers: {exc}") from None


def _run_session(args) -> int:
    import asyncio

    session, progress = _make_session(args)
    if args.headless:
        reason = asyncio.run(_headless(session, progress, args.as_process))
        path = _write_receipt(session, session.receipt_path)
    else:
        from trnwatch.tui.app import run_app
        from trnwatch.tui.terminal import NoTerminal

        try:
            reason, path = run_app(
                session,
                refresh_s=args.refresh,
                theme=args.theme,
                receipt_path=args.receipt,
                snapshot_dir=args.snapshot_dir,
                hold_signals=args.as_process,
            )
        except NoTerminal as exc:
            raise UsageError(str(exc)) from None
    _report_receipt(session, path)
    _say_log_hints(session)
    _end_alerts(session)
    if reason == "exit-on":
        return _exit_on_status(session)
    if _ended_badly(session, reason) or path is None:
        return 1
    return _nothing_measured_status(session)


def _ended_badly(session, reason: str) -> bool:
    """Whether the session's end is a failure (exit 1): an error, a source lost that ended it
    (each said on stderr when it ended), or lines that arrived with not one valid (said here)."""
    nothing_valid = _say_if_nothing_valid(session)
    lost = any(s.end_error for s in session.ledger.sources.values())
    return reason == "error" or (lost and reason == "eof") or nothing_valid


def _say_log_hints(session) -> None:
    """Once on stderr: what to do about each job log no profile could read (its note)."""
    job = session.ledger.job
    if job is None:
        return
    for source, (_lines, _unparsed, note) in sorted(job.log_lines.items()):
        if note and job.log_profiles.get(source) is None:
            _warn(f"{source}: {note}")


def _nothing_measured_status(session) -> int:
    """0, or NOTHING_MEASURED_STATUS (said on stderr) when no source ever delivered a line: a
    script can tell "ran and saw nothing" from "fine"."""
    if not session.ledger.nothing_delivered():
        return 0
    _warn(f"nothing was measured: no source delivered a line (exit status {NOTHING_MEASURED_STATUS})")
    return NOTHING_MEASURED_STATUS


def _exit_on_status(session) -> int:
    from trnwatch.ledger.incidents import incident_words

    incident = session.exit_on_incident
    if incident is not None:
        _warn(f"--exit-on: {incident.label} {incident_words(incident)}")
    return EXIT_ON_STATUS


def _write_receipt(session, path: Path | None) -> Path | None:
    """The session's receipt, or None when no place took it (the notes say why)."""
    from trnwatch.output import OutputError

    try:
        return session.write_receipt(path)
    except OutputError:
        return None


def _report_receipt(session, path: Path | None) -> None:
    """Say where the receipt went (stdout) and what failed on the way (stderr)."""
    for note in session.receipt_notes:
        _warn(note)
    if path is None:
        return
    markdown = session.receipt_markdown
    _say(f"receipt: {path} " + (f"(and {markdown.name})" if markdown else "(its Markdown was not written: see above)"))


def _say_if_nothing_valid(session) -> bool:
    """When lines arrived and not one was valid, say how many were rejected and why (the exit
    status is then 1: an empty receipt is not a normal end)."""
    from collections import Counter

    sources = session.ledger.sources.values()
    rejected: Counter[str] = sum((s.rejected for s in sources), Counter())
    if not rejected or any(s.reports for s in sources):
        return False
    reasons = ", ".join(f"{n} {reason}" for reason, n in rejected.most_common())
    _warn(f"no valid line: {sum(rejected.values())} line(s) rejected ({reasons})")
    for s in sources:
        if s.last_rejection:
            _warn(f"{s.source_id}: last rejected line: {s.last_rejection}")
    return True


def _run_record(args) -> int:
    """`trnwatch record`: the sources of `watch` into a rotated recording, headless, until a
    signal or --duration; a receipt only when asked."""
    import asyncio

    session, _ = _make_session(args)
    reason = asyncio.run(_headless(session, RECORD_PROGRESS_EVERY_S, args.as_process))
    rec = session.recorder
    _say(
        f"recorded {rec.frames} frames, {rec.bytes_written} bytes in {len(rec.files)} file(s) in {args.folder}"
        + (f"; stopped: {rec.error}" if rec.error else "")
    )
    path = _write_receipt(session, args.receipt) if args.receipt is not None else None
    _report_receipt(session, path)
    _say_log_hints(session)
    _end_alerts(session)
    if reason == "exit-on":
        return _exit_on_status(session)
    if _ended_badly(session, reason) or rec.error or (args.receipt is not None and path is None):
        return 1
    return _nothing_measured_status(session)


RECORD_PROGRESS_EVERY_S = 300.0  # a recorder runs for days: a progress line every 5 minutes


def _print_recording_info(path: Path) -> int:
    from collections import Counter

    from trnwatch.collectors.recording import RecordingError
    from trnwatch.collectors.recording_reader import Recording, describe

    try:
        recording = Recording(path)
        info = describe(recording)
    except (RecordingError, OSError) as exc:
        raise UsageError(str(exc)) from None
    recording.close()
    for warning in recording.warnings:
        _warn(warning)
    from trnwatch.outside import clean

    def iso(t: float) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"

    def names(items, limit: int = 8) -> str:
        items = [clean(x) for x in items]
        return ", ".join(items[:limit]) + (f", ... ({len(items) - limit} more)" if len(items) > limit else "")

    kinds = Counter(info.sources.values())
    span = f"{iso(info.span[0])} .. {iso(info.span[1])} ({info.span[1] - info.span[0]:.1f} s)" if info.span else "empty"
    ratio = f"{info.raw_bytes / info.size_bytes:.1f}x" if info.size_bytes else "-"
    lines = [
        f"recording:   {clean(str(path))} ({info.schema}, {info.files} file{'s' if info.files != 1 else ''})",
        f"evidence:    {info.evidence}"
        + (f" ({len(info.simulated_sources)} source(s) marked by the simulator)" if info.simulated_sources else ""),
        f"span:        {span}",
        f"sources:     {len(info.sources)} ("
        + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
        + ")"
        + (f": {names(info.sources)}" if info.sources else ""),
        "hosts:       "
        + (
            "not recorded by /1 (replay it to see them)"
            if info.hosts is None
            else f"{len(info.hosts)}" + (f": {names(info.hosts)}" if info.hosts else "")
        ),
        f"frames:      {info.frames}"
        + (", skipped: " + ", ".join(f"{n} {r}" for r, n in sorted(info.skipped.items())) if info.skipped else ""),
        f"size:        {info.size_bytes:,} bytes on disk, {info.raw_bytes:,} bytes of entries, compression {ratio}",
    ]
    _say("\n".join(lines))
    return 0


SNAPSHOT_PERIODS = 3  # default collection time of `trnwatch snapshot`, in report periods


def _run_snapshot(args) -> int:
    """`trnwatch snapshot`: collect headless from the chosen source, then print every scope."""
    import asyncio

    from trnwatch.ledger.snapshot import build_snapshot, render_text, session_now_s, snapshot_json

    if args.duration is None and args.recording is None:  # a recording is read to its end
        args = argparse.Namespace(**{**vars(args), "duration": SNAPSHOT_PERIODS * args.period})
    session, _ = _make_session(args)

    async def collect():
        restore = session.install_signal_handlers()
        try:
            return await session.run()
        finally:
            if args.as_process:
                hold_exit_signals()
            else:
                restore()

    asyncio.run(collect())
    job = session.ledger.job
    wall_s = time.time()
    now_s = session_now_s(session.ledger, wall_s, job)
    session.observe(now_s)
    snapshot = build_snapshot(
        session.ledger,
        now_s,
        session.ledger.job_summary(now_s),
        session.recorded_evidence,
        written_at_s=wall_s,
        incidents=session.incidents.open_incidents(),
    )
    error = _emit(snapshot_json(snapshot).rstrip("\n") if args.json else render_text(snapshot).rstrip("\n"))
    if error is not None:
        _warn(f"snapshot not written to stdout: {error}")
        session.output_failed("snapshot", "<stdout>", error)
    path = None
    if args.receipt:
        path = _write_receipt(session, args.receipt)
        for note in session.receipt_notes:
            _warn(note)
        if path is not None and path != args.receipt:
            _warn(f"receipt: {path}")
    return 1 if error is not None or (args.receipt and path is None) else 0


def _emit(text: str) -> str | None:
    """Print `text` to stdout; return why it could not be (None when it was). A reader that
    closed the pipe (`| head`) is no error of ours: stdout is then pointed at /dev/null so the
    interpreter's own flush at exit stays quiet."""
    try:
        print(text, flush=True)
        return None
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return "the reader closed the pipe"
    except OSError as exc:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return exc.strerror or str(exc)


def _say(text: str) -> None:
    """Print to stdout, tolerating a terminal that has gone away (SIGHUP, closed pipe)."""
    _emit(text)


def _warn(text: str) -> None:
    """One line on stderr, `trnwatch: ` first; outside strings in it are cleaned."""
    from trnwatch.outside import clean

    try:
        print(f"trnwatch: {clean(text)}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass  # stderr has gone away too


async def _headless(session, progress_every_s: float, as_process: bool):
    import asyncio

    from trnwatch.session import link_progress_lines, progress_lines

    restore = session.install_signal_handlers()
    reporter = asyncio.create_task(progress_lines(session, progress_every_s))
    links = asyncio.create_task(link_progress_lines(session)) if session.remote_sources else None
    try:
        return await session.run()
    finally:
        # The program: "finishing" replaces the session's handlers, one call per signal, to its
        # end. Inside another program (a test): the handlers it had come back.
        if as_process:
            hold_exit_signals()
        else:
            restore()
        reporter.cancel()
        if links is not None:
            links.cancel()


def _keys_from_terminal() -> int:
    from trnwatch.tui.terminal import NoTerminal, keys_from_terminal

    try:
        return keys_from_terminal()
    except NoTerminal as exc:
        raise UsageError(str(exc)) from None


def _check_outputs(args) -> None:
    """Before collecting: every output the user named must be writable (else a usage error); when
    the default receipt folder is not, say at once that the receipt will go to the current
    directory instead (and fail if that is not writable either)."""
    from trnwatch.output import OutputError, check_writable, default_receipt_dir

    named = [("--receipt", args.receipt), ("--record", args.record)]
    if args.command == "record":
        named.append(("DIR", args.folder / "trnwatch-probe.trnrec"))
    if args.snapshot_dir is not None:
        named.append(("--snapshot-dir", args.snapshot_dir / "snapshot.json"))
    for option, path in named:
        if path is None:
            continue
        try:
            check_writable(path)
            if option == "--receipt":
                check_writable(path.with_suffix(".md"))
                check_writable(path.with_suffix(".svg"))
            if option == "--record":
                check_writable(path.with_name(path.name + ".idx"))
        except OutputError as exc:
            raise UsageError(f"{option}: {exc}") from None
    if args.receipt is not None or not args.default_receipt:
        return  # `trnwatch snapshot` writes a receipt only when asked
    try:
        check_writable(default_receipt_dir() / "receipt.json")
    except OutputError as exc:
        try:
            check_writable(Path.cwd() / "receipt.json")
        except (OutputError, OSError) as cwd_exc:
            raise UsageError(
                f"no place for the receipt: {exc}; and the current directory: {cwd_exc}. "
                "Pass --receipt PATH in a writable folder."
            ) from None
        _warn(f"the default receipt folder cannot be written ({exc}); the receipt will go to the current directory")


def _make_session(args):
    """Sources (trnwatch/sources.py), ledger and recorder for the chosen command; raises
    UsageError for bad input."""
    from dataclasses import asdict

    from trnwatch import sources
    from trnwatch.collectors.recording import Recorder, Rotation
    from trnwatch.ledger.ledger import Ledger
    from trnwatch.session import Session

    _check_outputs(args)
    stacks = _stack_options(args)
    try:
        chosen = sources.build(args, _keys_from_terminal)
    except sources.OptionError as exc:
        raise UsageError(str(exc)) from None
    for note in chosen.built.notes:
        _warn(note)
    # An --ultraservers file has the last word over a hosts file's or a recording's map.
    ultraservers = {**chosen.built.ultraservers, **_load_ultraservers(args.ultraservers)}
    # The scheduler job: a replay's is the recorded session's, never the replaying shell's.
    scheduler = chosen.built.scheduler if chosen.built.replay is not None else _scheduler_job(args)
    ledger = Ledger(chosen.mode, ultraservers, sources.rules_of(args, chosen.built.rules), scheduler)
    recorder = None
    if args.command == "record":
        rotation = Rotation(
            max_bytes=next((int(n) for unit, n in args.rotate if unit == "bytes"), None),
            max_age_s=next((n for unit, n in args.rotate if unit == "s"), None),
            retain=args.retain,
        )
        recorder = Recorder.to_folder(
            args.folder,
            chosen.mode,
            ultraservers,
            rotation=rotation,
            known_hosts=lambda: ledger.hosts.keys(),
            simulated_sources=ledger.simulated_source_ids,
            on_file=lambda path: _say(f"recording to {path}"),
            rules=asdict(ledger.rules),
            scheduler=ledger.scheduler,
        )
    elif args.record:
        recorder = Recorder.to_file(
            args.record,
            chosen.mode,
            ultraservers,
            known_hosts=lambda: ledger.hosts.keys(),
            simulated_sources=ledger.simulated_source_ids,
            rules=asdict(ledger.rules),
            scheduler=ledger.scheduler,
        )
    if recorder is not None and recorder.error is not None:
        raise UsageError(f"cannot record to {args.record or args.folder}: {recorder.error}")
    session = Session(
        ledger,
        chosen.built.sources,
        recorder,
        args.duration,
        chosen.built.recorded_evidence,
        background=chosen.built.background,
        replay=chosen.built.replay,
        receipt_path=args.receipt,
        remote_sources=chosen.remote,
    )
    if stacks is not None:  # the job view's key; with --capture-stacks, confirmed stalls
        from trnwatch.stacks import StackCapturer

        session.stacks = StackCapturer(ledger, stacks, session.apply, auto=args.capture_stacks, clock=session.now_s)
        session.stacks.notice = session.notice  # each capture's outcome, said once (stderr headless)
        session.background.append(session.stacks.run)
    _add_alerts(args, session)
    return session, chosen.progress_every_s


def _scheduler_job(args):
    """The job this session serves: `--k8s-job`'s pods (two kubectl calls, now), else the Slurm
    allocation trnwatch runs in, else None; UsageError when kubectl cannot say."""
    from trnwatch.collectors.kubernetes import KubernetesError, resolve_job
    from trnwatch.collectors.scheduler import slurm_job

    ref = getattr(args, "k8s_job", None)
    if ref is None:
        return slurm_job(os.environ)
    try:
        job = resolve_job(ref, _warn)
    except KubernetesError as exc:
        raise UsageError(str(exc)) from None
    if job.pods_dropped:
        _warn(f"--k8s-job {ref}: {job.pods_dropped} pod(s) of the job left out (unreadable or past the bound)")
    return job


def _stack_options(args):
    """How a live `watch` / `record` takes ranks' stacks (None for other commands)."""
    import shutil

    from trnwatch.scaleout import OptionError
    from trnwatch.stacks import stack_options

    if args.command not in ("watch", "record"):
        return None
    try:
        return stack_options(args, shutil.which("ssh"))
    except OptionError as exc:
        raise UsageError(str(exc)) from None


def _add_alerts(args, session) -> None:
    """--alert-cmd, --alert-webhook, --exit-on and --serve-metrics on the session; UsageError
    for an option that cannot work (a missing secret, a bad address)."""
    from trnwatch.alerts import AlertConfigError, Alerts, Webhook

    command, webhook_spec = getattr(args, "alert_cmd", None), getattr(args, "alert_webhook", None)
    try:
        webhook = None if webhook_spec is None else Webhook.from_options(webhook_spec, args.alert_webhook_auth)
    except AlertConfigError as exc:
        raise UsageError(str(exc)) from None
    if getattr(args, "alert_webhook_auth", None) and webhook is None:
        raise UsageError("--alert-webhook-auth needs --alert-webhook")
    if command or webhook:
        session.alerts = Alerts(command, webhook, hold_down_s=args.alert_hold_down)
    session.exit_on = getattr(args, "exit_on", frozenset())
    if getattr(args, "serve_metrics", None):
        from trnwatch.metrics import MetricsError, metrics_server

        try:
            session.background.append(metrics_server(session, args.serve_metrics))
        except MetricsError as exc:
            raise UsageError(str(exc)) from None


def _end_alerts(session) -> None:
    """Queued alerts get a bounded wait to go out (done already if a receipt was written; README:
    Alerts), and what did not is said."""
    if session.alerts is not None:
        session.alerts.close()
        c = session.alerts.counts
        if c.failed or c.pending_at_exit:
            _warn(f"alerts: {c.sent} sent, {c.failed} failed, {c.pending_at_exit} not sent by the end")
