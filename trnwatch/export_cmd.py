"""`trnwatch export RECORDING [--scope S] [--format F] [--from T] [--to T] [-o PATH]`.

Reads the recording as `replay` does (trnwatch/export_scopes.py) and writes one scope's rows in
one format (trnwatch/export_formats.py, export_trace.py). `-o PATH` is created whole or not at
all (output.NewFile: a failure, a damaged recording or Ctrl-C leaves nothing under the name);
no `-o`, or `-o -`, writes to standard output.

Exit status: 0 written; 2 the recording, the window or the options cannot be used (nothing
written); 1 the output could not be written (nothing left under its name).
"""

import argparse
import sys
from pathlib import Path

from trnwatch.collectors.recording import RecordingError
from trnwatch.collectors.recording_reader import Recording, TimeArg
from trnwatch.export_formats import (
    MissingDependency,
    require_pyarrow,
    write_csv,
    write_jsonl,
    write_openmetrics,
    write_parquet,
)
from trnwatch.export_scopes import SCOPES, Scope, scope_rows
from trnwatch.export_trace import TRACE_SCOPES, write_trace
from trnwatch.output import NewFile, OutputError
from trnwatch.outside import clean

FORMATS = ("csv", "jsonl", "parquet", "openmetrics", "trace")


def _time_arg(text: str) -> TimeArg:
    try:
        return TimeArg.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_options(p: argparse.ArgumentParser) -> None:
    """The options of `trnwatch export` (trnwatch/cli.py names the command and its help line)."""
    p.description = (
        "Export one scope of a recording (what `replay` accepts: a file or a folder of parts), "
        "one row per sample with its UTC time, read through replay's decode path: the figures the screen "
        "and the receipt saw. Missing values are nulls. --format trace writes the whole recording as a "
        "Chrome trace-event timeline (hosts, ranks, chip counters, incidents) for Perfetto."
    )
    p.add_argument("recording", type=Path, metavar="RECORDING", help="a recording file or a folder of parts")
    p.add_argument("--scope", choices=SCOPES, help="chip (default), core, host, rank, job or incidents")
    p.add_argument("--format", choices=FORMATS, default="csv", help="csv (default), jsonl, parquet, openmetrics, trace")
    p.add_argument("--from", dest="from_t", type=_time_arg, metavar="T", help="as replay's --from")
    p.add_argument("--to", dest="to_t", type=_time_arg, metavar="T", help="as replay's --to")
    p.add_argument(
        "-o", "--output", metavar="PATH", help="the file to create (refused if it exists); - or none: stdout"
    )
    p.add_argument(
        "--skip-damaged",
        action="store_true",
        help="export what can be read of a damaged recording (else it is refused, nothing written)",
    )


def _warn(text: str) -> None:
    print(f"trnwatch export: {clean(text)}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    scope: Scope = args.scope or "chip"
    if args.format == "trace" and args.scope is not None:
        _warn("--format trace holds every scope it draws (hosts, ranks, chips, incidents): leave out --scope")
        return 2
    to_stdout = args.output in (None, "-")
    if args.format == "parquet" and to_stdout and sys.stdout.isatty():
        _warn("Parquet is binary: give -o PATH (or redirect standard output)")
        return 2
    try:
        if args.format == "parquet":
            require_pyarrow()
        recording = Recording(args.recording)
    except MissingDependency as exc:
        _warn(str(exc))
        return 2
    except (RecordingError, OSError) as exc:
        _warn(str(exc))
        return 2
    try:
        from_s, to_s = recording.window(args.from_t, args.to_t)
        out = None if to_stdout else NewFile(Path(args.output))
    except RecordingError as exc:
        _warn(str(exc))
        recording.close()
        return 2
    except OutputError as exc:
        _warn(str(exc))
        recording.close()
        return 1
    try:
        for warning in recording.warnings:
            if not args.skip_damaged:
                raise RecordingError(f"{warning}; --skip-damaged exports the readable parts")
            _warn(warning)
        sink = out.write if out is not None else _stdout_sink()
        count = _write(args.format, scope, recording, from_s, to_s, sink, out)
        skipped = {k: n for k, n in recording.stats.skipped.items() if n}
        if skipped:
            said = ", ".join(f"{n} {reason}" for reason, n in sorted(skipped.items()))
            if not args.skip_damaged:
                raise RecordingError(
                    f"{args.recording} is damaged (frames or entries skipped: {said}); nothing written: "
                    "--skip-damaged exports what can be read"
                )
            _warn(f"skipped as damaged: {said}")
        if out is not None:
            out.commit()
            print(
                f"{count} {'trace events' if args.format == 'trace' else 'rows'} -> {clean(args.output)}",
                file=sys.stderr,
            )
        return 0
    except RecordingError as exc:
        _warn(str(exc))
        return 2
    except OutputError as exc:
        _warn(str(exc))
        return 1
    except BrokenPipeError:
        return 0  # `| head`: the reader has what it wanted
    except OSError as exc:  # the Parquet writer's own writes
        _warn(f"cannot write {args.output}: {exc.strerror or exc}")
        return 1
    finally:
        if out is not None:
            out.discard()
        recording.close()


def _stdout_sink():
    stream = sys.stdout.buffer

    def sink(data: bytes) -> None:
        stream.write(data)

    return sink


def _write(fmt: str, scope: Scope, recording: Recording, from_s, to_s, sink, out: NewFile | None) -> int:
    if fmt == "trace":
        return write_trace(scope_rows(recording, TRACE_SCOPES, from_s, to_s), sink)
    rows = (row for _, row in scope_rows(recording, (scope,), from_s, to_s))
    if fmt == "csv":
        return write_csv(scope, rows, sink)
    if fmt == "jsonl":
        return write_jsonl(scope, rows, sink)
    if fmt == "openmetrics":
        return write_openmetrics(scope, rows, sink, out.path.parent if out is not None else None)
    return write_parquet(scope, rows, out.file if out is not None else sys.stdout.buffer)
