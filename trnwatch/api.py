"""trnwatch for notebooks: a recording's rows as a pyarrow Table.

    import trnwatch.api
    chips = trnwatch.api.read("run.trnrec", scope="chip", start=-3600)   # the last hour
    df = chips.to_pandas()                 # or polars.from_arrow(chips)

The columns are `trnwatch export`'s (docs/recordings.md, "Export"): read through replay's decode
path, nulls where a report gave no figure, `time` a UTC timestamp. Needs pyarrow (`pip install
'trnwatch[data]'`); without it `read` raises `MissingDependency` saying so.
"""

from datetime import datetime
from os import PathLike
from pathlib import Path
from typing import Any

from trnwatch.collectors.recording_reader import Recording, TimeArg
from trnwatch.export_formats import MissingDependency, arrow_batches, arrow_schema, require_pyarrow
from trnwatch.export_scopes import SCOPES, Scope, scope_rows

__all__ = ["MissingDependency", "SCOPES", "read"]


def _time(value: float | str | datetime | None) -> TimeArg | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return TimeArg.parse(value.isoformat())
    return TimeArg.parse(str(value))


def read(
    path: str | PathLike[str],
    scope: Scope = "chip",
    start: float | str | datetime | None = None,
    end: float | str | datetime | None = None,
) -> Any:
    """The rows of `scope` ("chip", "core", "host", "rank", "job" or "incidents") of the recording
    at `path` (a file or a folder of parts) in [start, end), as a `pyarrow.Table`. `start` and
    `end` take replay's --from / --to forms: seconds from the start (negative: before the end),
    an ISO-8601 string, or a datetime (naive: UTC). Raises ValueError for an unknown scope,
    `trnwatch.collectors.recording.RecordingError` for a recording or window that cannot be read."""
    if scope not in SCOPES:
        raise ValueError(f"unknown scope {scope!r}; scopes: {', '.join(SCOPES)}")
    pa = require_pyarrow()
    recording = Recording(Path(path))
    try:
        from_s, to_s = recording.window(_time(start), _time(end))
        rows = (row for _, row in scope_rows(recording, (scope,), from_s, to_s))
        return pa.Table.from_batches(list(arrow_batches(scope, rows)), schema=arrow_schema(scope))
    finally:
        recording.close()
