"""Rows of a scope (trnwatch/export_scopes.py) written as CSV, JSON lines, Parquet or OpenMetrics,
and a recording as a Chrome trace-event timeline; each streams, holding at most a batch of rows.

- CSV: a header line of the column names; `time` columns as ISO-8601 UTC with microseconds
  (`2026-12-01T03:00:00.500000Z`); a null is an empty field.
- JSON lines: one object per row, the same names; times as in CSV; nulls as `null`.
- Parquet (pyarrow, `pip install 'trnwatch[data]'`): typed columns, `time` columns as UTC
  timestamps in microseconds, written in row groups of BATCH_ROWS (zstd).
- OpenMetrics: one gauge family per figure of the scope, each sample with its row's timestamp and
  its identity columns as labels, for `promtool tsdb create-blocks-from openmetrics`. Names are
  trnwatch/metrics.py's where `--serve-metrics` has the figure (`trnwatch_job_verdict`,
  `trnwatch_tokens_per_second`, `trnwatch_incident_open`), else `trnwatch_<scope>_<column>`.
  A family's samples must not be interleaved with another's, so each family is spooled to its
  own temporary file beside the output and the files are joined at the end (disk, not memory).
"""

import json
import math
import tempfile
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from trnwatch import metrics
from trnwatch.export_scopes import COLUMNS, Column, Row, Scope

BATCH_ROWS = 65_536  # rows of a Parquet row group
ARROW_BATCH_ROWS = 8_192  # rows held as Python tuples at a time
INT64_MAX = 2**63 - 1
# An open incident's series is sampled this often (and at its opening and closing), so a
# Prometheus query between two samples sees it (the default lookback is 5 minutes).
INCIDENT_SAMPLE_EVERY_S = 15.0

Sink = Callable[[bytes], None]


class MissingDependency(RuntimeError):
    """An optional package a format needs is not installed; the message says what to install."""


def require_pyarrow() -> Any:
    """The pyarrow module, or MissingDependency saying how to install it."""
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401 - the writer lives in the submodule
    except ImportError:
        raise MissingDependency(
            "Parquet and trnwatch.api need pyarrow, which is not installed: pip install 'trnwatch[data]'"
        ) from None
    return pyarrow


def iso(t: float) -> str:
    """Unix seconds as ISO-8601 UTC with microseconds."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _cell(value: object, kind: str) -> object:
    if value is None:
        return None
    if kind == "time":
        return iso(value)  # type: ignore[arg-type]
    if kind == "float" and not math.isfinite(value):  # type: ignore[arg-type]
        return None  # JSON has no NaN or infinity
    return value


def _batched(rows: Iterable[Row], size: int = 4096) -> Iterator[list[Row]]:
    batch: list[Row] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def write_csv(scope: Scope, rows: Iterable[Row], sink: Sink) -> int:
    import csv
    import io

    columns = COLUMNS[scope]
    kinds = [c.kind for c in columns]
    count = 0
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([c.name for c in columns])
    for batch in _batched(rows):
        for row in batch:
            writer.writerow(["" if (v := _cell(x, k)) is None else v for x, k in zip(row, kinds, strict=True)])
        count += len(batch)
        sink(buffer.getvalue().encode())
        buffer.seek(0)
        buffer.truncate()
    sink(buffer.getvalue().encode())
    return count


def write_jsonl(scope: Scope, rows: Iterable[Row], sink: Sink) -> int:
    columns = COLUMNS[scope]
    names = [c.name for c in columns]
    kinds = [c.kind for c in columns]
    count = 0
    for batch in _batched(rows):
        lines = [
            json.dumps(dict(zip(names, (_cell(x, k) for x, k in zip(row, kinds, strict=True)), strict=True)))
            for row in batch
        ]
        count += len(batch)
        sink(("\n".join(lines) + "\n").encode())
    return count


def arrow_schema(scope: Scope) -> Any:
    pa = require_pyarrow()
    types = {
        "time": pa.timestamp("us", tz="UTC"),
        "str": pa.string(),
        "int": pa.int64(),
        "float": pa.float64(),
        "bool": pa.bool_(),
    }
    return pa.schema([pa.field(c.name, types[c.kind]) for c in COLUMNS[scope]])


def _arrow_values(values: list, column: Column) -> list:
    if column.kind == "time":
        return [None if v is None else round(v * 1_000_000) for v in values]
    if column.kind == "int":  # a count past int64 (the ledger keeps unbounded ints) has no Parquet type
        return [None if v is None or not -INT64_MAX <= v <= INT64_MAX else v for v in values]
    if column.kind == "float":
        return [None if v is None or not math.isfinite(v) else float(v) for v in values]
    return values


def arrow_batches(scope: Scope, rows: Iterable[Row], size: int = ARROW_BATCH_ROWS) -> Iterator[Any]:
    """The rows as pyarrow RecordBatches of at most `size` rows, typed by the scope's schema."""
    pa = require_pyarrow()
    schema = arrow_schema(scope)
    columns = COLUMNS[scope]
    for batch in _batched(rows, size):
        by_column = list(zip(*batch, strict=True))
        arrays = [
            pa.array(_arrow_values(list(values), column), type=field.type)
            for values, column, field in zip(by_column, columns, schema, strict=True)
        ]
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)


def write_parquet(scope: Scope, rows: Iterable[Row], file: IO[bytes]) -> int:
    """Row groups of BATCH_ROWS, each gathered from Arrow batches of ARROW_BATCH_ROWS: a row
    group's rows are held as Arrow columns, never as Python tuples."""
    pa = require_pyarrow()
    import pyarrow.parquet as pq

    count = 0
    group: list = []
    with pq.ParquetWriter(file, arrow_schema(scope), compression="zstd") as writer:
        for batch in arrow_batches(scope, rows, ARROW_BATCH_ROWS):
            group.append(batch)
            count += batch.num_rows
            if sum(b.num_rows for b in group) >= BATCH_ROWS:
                writer.write_table(pa.Table.from_batches(group), row_group_size=BATCH_ROWS)
                group = []
        if group:
            writer.write_table(pa.Table.from_batches(group), row_group_size=BATCH_ROWS)
    return count


def metric_name(scope: Scope, column: str) -> str:
    """The OpenMetrics family of a scope's figure: `--serve-metrics`'s name where it has one."""
    return metrics.EXPORTED_NAMES.get((scope, column), f"trnwatch_{scope}_{column}")


class _Families:
    """One spool file per metric family, joined in first-seen order at the end."""

    def __init__(self, folder: Path | None):
        self.folder = folder
        self.files: dict[str, IO[str]] = {}

    def add(self, name: str, help_text: str, line: str) -> None:
        f = self.files.get(name)
        if f is None:
            f = self.files[name] = tempfile.TemporaryFile("w+", dir=self.folder, prefix=".trnwatch-metrics-")
            f.write(f"# TYPE {name} gauge\n# HELP {name} {help_text}\n")
        f.write(line)

    def join(self, sink: Sink) -> None:
        for f in self.files.values():
            f.seek(0)
            while chunk := f.read(1 << 20):
                sink(chunk.encode())
            f.close()
        sink(b"# EOF\n")

    def close(self) -> None:
        for f in self.files.values():
            f.close()


def _om_value(value: float | int) -> str:
    return repr(float(value)) if isinstance(value, float) else str(value)


def write_openmetrics(scope: Scope, rows: Iterable[Row], sink: Sink, spool: Path | None) -> int:
    """The rows as OpenMetrics; each family is spooled in `spool` (None: the temporary folder)."""
    columns = COLUMNS[scope]
    identity = [(i, c.name) for i, c in enumerate(columns) if c.identity]
    figures = [(i, c) for i, c in enumerate(columns) if c.kind in ("int", "float") and not c.identity]
    verdict_at = next((i for i, c in enumerate(columns) if c.name == "verdict"), None) if scope == "job" else None
    families = _Families(spool)
    count = 0
    try:
        for row in rows:
            count += 1
            if scope == "incidents":
                _incident_samples(row, families)
                continue
            t = row[0]
            stamp = f" {t:.3f}"
            labels = metrics.label_set(**{name: row[i] for i, name in identity})
            for i, column in figures:
                value = row[i]
                if value is None or (isinstance(value, float) and not math.isfinite(value)):
                    continue  # not given: no sample, never a zero
                name = metric_name(scope, column.name)
                families.add(name, f"{column.name} of the {scope} scope", f"{name}{labels} {_om_value(value)}{stamp}\n")
            if verdict_at is not None and row[verdict_at] is not None:
                name = metrics.VERDICT_METRIC
                for v in metrics.VERDICTS:
                    families.add(
                        name,
                        "1 for the job's verdict, 0 for the others.",
                        f"{name}{metrics.label_set(verdict=v)} {int(v == row[verdict_at])}{stamp}\n",
                    )
        families.join(sink)
    finally:
        families.close()
    return count


def _incident_samples(row: Row, families: _Families) -> None:
    cells = dict(zip((c.name for c in COLUMNS["incidents"]), row, strict=True))
    name = metrics.INCIDENT_OPEN_METRIC
    labels = metrics.label_set(
        **{k: cells[k] for k in ("id", "kind", "label", "severity", "rank", "host", "instance_id", "chip")}
    )
    opened, closed, last = cells["time"], cells["closed"], cells["last_seen"]
    end = closed if closed is not None else last
    t = opened
    while t < end:
        families.add(name, "1 while the incident is open, 0 once closed.", f"{name}{labels} 1 {t:.3f}\n")
        t += INCIDENT_SAMPLE_EVERY_S
    families.add(
        name, "1 while the incident is open, 0 once closed.", f"{name}{labels} {int(closed is None)} {end:.3f}\n"
    )
