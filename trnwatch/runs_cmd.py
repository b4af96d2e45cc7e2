"""`trnwatch runs [DIR] [--json]`: the receipts in a folder (default the receipts folder) as a
table of runs, newest first.

Each `*.json` in DIR (not its subfolders) is read as a receipt (`trnwatch.receipt/1`): its
window, evidence, boundary (chips, hosts, model), the job's verdict and first suspect, steady
steps and tokens/s, goodput and incidents. A file that is not one (another JSON, a damaged or
cut file, one past the size any receipt has) is listed as such with the reason, never a crash.
"""

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from trnwatch.ledger.compare import MAX_RECEIPT_BYTES
from trnwatch.output import default_receipt_dir
from trnwatch.outside import clean

RECEIPT_SCHEMA = "trnwatch.receipt/1"
COLUMNS = (
    "when",
    "length",
    "evidence",
    "chips",
    "hosts",
    "model",
    "verdict",
    "culprit",
    "steps",
    "tokens/s",
    "goodput",
    "incidents",
    "file",
)


def add_options(p: argparse.ArgumentParser) -> None:
    """The options of `trnwatch runs` (trnwatch/cli.py names the command and its help line)."""
    p.description = (
        "List the receipts in DIR (default: the receipts folder, $XDG_STATE_HOME/trnwatch/receipts) "
        "newest first: when, length, evidence, boundary, verdict, culprit, steps, tokens/s, goodput, "
        "incidents. Files that are not receipts are listed as such."
    )
    p.add_argument("folder", type=Path, nargs="?", metavar="DIR", help="the folder of receipts")
    p.add_argument("--json", action="store_true", help="print the runs as a JSON list")


def _get(data: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _number(value: Any) -> float | None:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    return clean(str(value)) if value is not None else None


def run_of(path: Path) -> dict[str, Any]:
    """One receipt's row; `problem` says why a file is not one (the other fields None)."""
    row: dict[str, Any] = {"file": clean(path.name), "problem": None}
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_RECEIPT_BYTES + 1)
        if len(data) > MAX_RECEIPT_BYTES:
            raise ValueError(f"over {MAX_RECEIPT_BYTES >> 20} MiB: larger than any receipt")
        receipt = json.loads(data.decode("utf-8"))
        if _get(receipt, "schema") != RECEIPT_SCHEMA:
            raise ValueError(f"not a receipt (no schema {RECEIPT_SCHEMA})")
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return {**row, "problem": clean(f"unreadable: {reason}"[:200])}
    job = _get(receipt, "job")
    suspect = (_get(job, "suspects") or [None])[0] if isinstance(_get(job, "suspects"), list) else None
    culprit = None
    if isinstance(suspect, dict):
        where = "/".join(str(x) for x in (suspect.get("host"), suspect.get("chip")) if x is not None)
        culprit = _text(" ".join(x for x in (f"rank {suspect.get('rank')}", where, suspect.get("region") or "") if x))
    incidents = _get(receipt, "incidents")
    return {
        **row,
        "start_s": _number(_get(receipt, "window", "start")),
        "seconds": _number(_get(receipt, "window", "seconds")),
        "evidence": _text(_get(receipt, "evidence")),
        "chips": _number(_get(receipt, "boundary", "chips")),
        "hosts": _number(_get(receipt, "boundary", "hosts")),
        "model": _text(_get(receipt, "boundary", "model")),
        "verdict": _text(_get(job, "verdict")),
        "culprit": culprit,
        "steps": _number(_get(job, "throughput", "steps_in_window")),
        "tokens_per_s": _number(_get(job, "throughput", "tokens_per_s")),
        "goodput_pct": _number(_get(receipt, "goodput", "goodput_pct")),
        "incidents": len(incidents) if isinstance(incidents, list) else None,
    }


def runs_in(folder: Path) -> list[dict[str, Any]]:
    """Every `*.json` of `folder` as a run, newest first (unreadable files last, by name)."""
    rows = [run_of(p) for p in sorted(folder.glob("*.json")) if p.is_file()]
    return sorted(rows, key=lambda r: (r["problem"] is not None, -(r.get("start_s") or 0.0), r["file"]))


def _cells(r: dict[str, Any]) -> list[str]:
    def fmt(value: Any, spec: str = "") -> str:
        return "-" if value is None else format(value, spec)

    when = time.strftime("%Y-%m-%d %H:%M", time.gmtime(r["start_s"])) + "Z" if r.get("start_s") is not None else "-"
    return [
        when,
        fmt(r["seconds"], ".0f") + ("s" if r["seconds"] is not None else ""),
        fmt(r["evidence"]),
        fmt(r["chips"]),
        fmt(r["hosts"]),
        fmt(r["model"]),
        fmt(r["verdict"]),
        fmt(r["culprit"]),
        fmt(r["steps"]),
        fmt(r["tokens_per_s"], ",.0f"),
        fmt(r["goodput_pct"], ".1f") + ("%" if r["goodput_pct"] is not None else ""),
        fmt(r["incidents"]),
        r["file"],
    ]


def run(args: argparse.Namespace) -> int:
    folder = args.folder if args.folder is not None else default_receipt_dir()
    if not folder.is_dir():
        print(f"trnwatch runs: {clean(str(folder))} is not a folder", file=sys.stderr)
        return 2
    rows = runs_in(folder)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = [list(COLUMNS)] + [_cells(r) for r in rows if r["problem"] is None]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
    for line in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip())
    for r in rows:
        if r["problem"] is not None:
            print(f"{r['file']}: {r['problem']}")
    if not rows:
        print(f"no receipts in {clean(str(folder))}")
    return 0
