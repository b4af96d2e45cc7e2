"""Every file trnwatch writes, under one rule: receipts and their Markdown, snapshots, recordings.

- Files are created `0600` and folders trnwatch creates `0700`, whatever the umask: a receipt
  names hosts, runs and error messages of a cluster, which is nobody else's business on a shared
  login node. Folders that already exist are left as they are.
- Files are replaced atomically (a temporary file in the same folder, fsync, rename), so a reader
  never sees half a receipt and a failed write leaves the previous file intact. Recordings grow
  for the whole session and are appended instead (`open_new_file`).
- Receipts without `--receipt` go to `$XDG_STATE_HOME/trnwatch/receipts` (default
  `~/.local/state/trnwatch/receipts`). When the chosen place cannot be written at exit, the
  receipt falls back to that folder, then to the current directory (`receipt_places`).

A write that cannot be done raises `OutputError`, whose message names the path and the reason in
words. `check_writable` asks the same question before a session starts.
"""

import errno
import os
import tempfile
import time
from pathlib import Path
from typing import TextIO

FILE_MODE = 0o600
DIR_MODE = 0o700


class OutputError(Exception):
    """A file could not be written; the message says which and why."""


def os_error_reason(exc: OSError) -> str:
    """What went wrong, in words (ENOSPC: "no space left on the device")."""
    if exc.errno == errno.ENOSPC:
        return "no space left on the device"
    if exc.errno == errno.EROFS:
        return "read-only file system"
    if exc.errno == errno.EFBIG:
        return "file too large for the file system or the file-size limit"
    return exc.strerror or str(exc)


def make_dirs(folder: Path) -> None:
    """Create `folder` and any missing parents, each `0700`; raise `OutputError` if impossible."""
    missing = []
    probe = folder
    while not probe.exists():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        raise OutputError(f"{folder}: {probe} is a file, not a folder")
    for path in reversed(missing):
        try:
            os.mkdir(path, DIR_MODE)
        except FileExistsError:
            continue  # made meanwhile by someone else: theirs to keep as it is
        except OSError as exc:
            raise OutputError(f"cannot create folder {path}: {os_error_reason(exc)}") from None
        os.chmod(path, DIR_MODE)  # mkdir's mode is narrowed by the umask, never widened back


def write_atomic(path: Path, text: str) -> Path:
    """Write `text` to `path` (UTF-8, mode `0600`) by temp file and rename; return `path`."""
    make_dirs(path.parent)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {os_error_reason(exc)}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), FILE_MODE)
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise OutputError(f"cannot write {path}: {os_error_reason(exc)}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def open_new_file(path: Path) -> TextIO:
    """Create (or empty) `path`, mode `0600`, for the caller to append to (recordings)."""
    make_dirs(path.parent)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {os_error_reason(exc)}") from None
    os.fchmod(fd, FILE_MODE)
    return os.fdopen(fd, "w", encoding="utf-8")


def check_writable(path: Path) -> None:
    """Raise `OutputError` if a file at `path` clearly cannot be written: a folder in its place, a
    parent that is a file, a folder that is read-only or on a full file system. Nothing is created.
    (A file system can still fill up later: writers report that when it happens.)"""
    if path.is_dir():
        raise OutputError(f"{path} is a folder, not a file name")
    folder = path.parent
    while not folder.exists() and folder.parent != folder:
        folder = folder.parent
    if not folder.is_dir():
        raise OutputError(f"{path}: {folder} is a file, not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        try:
            read_only = os.statvfs(folder).f_flag & os.ST_RDONLY
        except OSError:
            read_only = False
        raise OutputError(f"{path}: folder {folder} is {'on a read-only file system' if read_only else 'not writable'}")
    try:
        free = os.statvfs(folder).f_bavail
    except OSError:
        return
    if free == 0:
        raise OutputError(f"{path}: no space left on the device of {folder}")


def state_dir() -> Path:
    """$XDG_STATE_HOME/trnwatch, by default ~/.local/state/trnwatch."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "trnwatch"


def default_receipt_dir() -> Path:
    """Where receipts go without `--receipt`: $XDG_STATE_HOME/trnwatch/receipts."""
    return state_dir() / "receipts"


def default_receipt_name(evidence: str, started_s: float) -> str:
    """`trnwatch-YYYYmmdd-HHMMSS-<evidence>.json`, stamped with the session's local start time."""
    return f"trnwatch-{time.strftime('%Y%m%d-%H%M%S', time.localtime(started_s))}-{evidence}.json"


def receipt_places(requested: Path | None, default_name: str) -> list[Path]:
    """The receipt's JSON path, then its fallbacks: the default folder, the current directory."""
    places = [requested] if requested is not None else []
    places.append(default_receipt_dir() / default_name)
    try:
        places.append(Path.cwd() / default_name)
    except OSError:
        pass  # the current directory was removed under us
    return list(dict.fromkeys(places))
