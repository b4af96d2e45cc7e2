"""Every file trnwatch writes, under one rule: receipts and their Markdown, snapshots, recordings.

- Files are created `0600` and folders trnwatch creates `0700`, whatever the umask: a receipt
  names hosts, runs and error messages of a cluster, which is nobody else's business on a shared
  login node. Folders that already exist are left as they are.
- A file is only ever created, never written over or through: a path that exists (a file, or a
  symbolic link someone planted in a shared folder, dangling or not) is refused with
  `ExistingFileError`, never followed, truncated or chmod-ed. Whole files (receipts, their Markdown
  and SVG, snapshots) are written to a private temporary file in the same folder, fsynced, then
  hard-linked to their name, which fails on any existing name (`write_new`), so a reader never
  sees half a file; where the file system has no hard links they are created with
  `O_CREAT|O_EXCL|O_NOFOLLOW` and written in place. Recordings grow for the whole session and
  are opened with `O_CREAT|O_EXCL|O_NOFOLLOW` (`create_exclusive`); the folder of a rotated set
  (`trnwatch record DIR`) is opened once with `O_DIRECTORY|O_NOFOLLOW`, refused when it is a link
  or another user's, and its parts are created, listed and removed through that descriptor
  (`open_own_folder`, `create_exclusive_at`), so a link swapped in later is never followed either.
  The one file replaced is a
  receipt trnwatch itself just wrote (`rewrite_own`, by rename, which replaces a name and never
  follows it).
- Receipts without `--receipt` go to `$XDG_STATE_HOME/trnwatch/receipts` (default
  `~/.local/state/trnwatch/receipts`), named after the session's start and this process, so two
  sessions never pick the same name (`default_receipt_name`). When the chosen place cannot be
  written at exit, the receipt falls back to that folder, then to the current directory
  (`receipt_places`).

Every text written passes through `redaction.redact`: no secret trnwatch holds reaches a file.

A write that cannot be done raises `OutputError`, whose message names the path and the reason in
words. `check_writable` asks the same question before a session starts.
"""

import errno
import os
import tempfile
import time
from pathlib import Path

from trnwatch.redaction import redact

FILE_MODE = 0o600
DIR_MODE = 0o700


class OutputError(Exception):
    """A file could not be written; the message says which and why."""


class ExistingFileError(OutputError):
    """The path to create exists already (perhaps as a planted symbolic link): refused."""


def existing_file_message(path: Path) -> str:
    what = "a symbolic link" if path.is_symlink() else "a folder" if path.is_dir() else "a file"
    return (
        f"{path} already exists ({what}); trnwatch never writes over or through an existing path: "
        "choose a new name or remove it"
    )


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


_EXCLUSIVE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def create_exclusive(path: Path, flags: int = 0) -> int:
    """Create `path` (mode `0600`) and return its descriptor; `ExistingFileError` if the name
    exists in any form (O_EXCL refuses a symbolic link even when it points nowhere)."""
    make_dirs(path.parent)
    try:
        fd = os.open(path, _EXCLUSIVE | flags, FILE_MODE)
    except FileExistsError:
        raise ExistingFileError(existing_file_message(path)) from None
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {os_error_reason(exc)}") from None
    os.fchmod(fd, FILE_MODE)  # O_CREAT's mode is narrowed by the umask, never widened back
    return fd


def open_own_folder(folder: Path) -> int:
    """Open the folder files are created in for a whole session (`trnwatch record DIR`) and return
    its descriptor, creating it `0700` when missing. Never through a link: a `folder` that is a
    symbolic link (planted in a shared folder, say) is refused, and so is one owned by another
    user, who could remove, rename or add files there; `OutputError` says which."""
    make_dirs(folder.parent)
    created = False
    try:
        os.mkdir(folder, DIR_MODE)
        created = True
    except FileExistsError:
        pass  # a folder already there, or a link in its place: the open below tells them apart
    except OSError as exc:
        raise OutputError(f"cannot create folder {folder}: {os_error_reason(exc)}") from None
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if os.path.islink(folder):
            raise OutputError(
                f"{folder} is a symbolic link; trnwatch never writes into a folder through a link: "
                "name the folder itself"
            ) from None
        if exc.errno == errno.ENOTDIR:
            raise OutputError(f"{folder} is a file, not a folder") from None
        raise OutputError(f"cannot open folder {folder}: {os_error_reason(exc)}") from None
    owner = os.fstat(fd).st_uid
    if owner != os.geteuid():
        os.close(fd)
        raise OutputError(
            f"{folder} belongs to another user (uid {owner}), who could remove, rename or add files "
            "in it: record into a folder of your own"
        )
    if created:
        os.fchmod(fd, DIR_MODE)  # mkdir's mode is narrowed by the umask, never widened back
    return fd


def create_exclusive_at(folder_fd: int, folder: Path, name: str, flags: int = 0) -> int:
    """Create `name` (mode `0600`) in the folder open as `folder_fd` (`open_own_folder`) and
    return its descriptor; `ExistingFileError` if the name exists in any form, a link too."""
    try:
        fd = os.open(name, _EXCLUSIVE | flags, FILE_MODE, dir_fd=folder_fd)
    except FileExistsError:
        raise ExistingFileError(existing_file_message(folder / name)) from None
    except OSError as exc:
        raise OutputError(f"cannot write {folder / name}: {os_error_reason(exc)}") from None
    os.fchmod(fd, FILE_MODE)
    return fd


def _write_fd(fd: int, path: Path, data: bytes) -> None:
    try:
        os.fchmod(fd, FILE_MODE)  # mkstemp's 0600 is narrowed by the umask too
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {os_error_reason(exc)}") from None
    finally:
        os.close(fd)


def write_new(path: Path, text: str) -> Path:
    """Create `path` holding `text` (UTF-8, mode `0600`), whole or not at all; return `path`.
    Raises `ExistingFileError` if the name exists, `OutputError` for any other failure."""
    make_dirs(path.parent)
    data = redact(text).encode("utf-8")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # O_EXCL, 0600
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {os_error_reason(exc)}") from None
    try:
        _write_fd(fd, path, data)
        try:
            os.link(tmp, path, follow_symlinks=False)  # atomic, and fails on any existing name
        except FileExistsError:
            raise ExistingFileError(existing_file_message(path)) from None
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS, errno.EMLINK):
                raise OutputError(f"cannot write {path}: {os_error_reason(exc)}") from None
            _write_fd(create_exclusive(path), path, data)  # no hard links here (FAT, some FUSE)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return path


class NewFile:
    """A file created whole or not at all, written as a stream (an export of a long recording):
    the bytes go to a private temporary file in the same folder, and `commit` fsyncs it and
    hard-links it to its name (`ExistingFileError` if the name exists by then); `discard`, or
    leaving the `with` block on an exception, removes it, so nothing half-written is ever left
    under the name. Bytes are written as given (callers redact text)."""

    def __init__(self, path: Path):
        self.path = path
        make_dirs(path.parent)
        if os.path.lexists(path):
            raise ExistingFileError(existing_file_message(path))
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # O_EXCL, 0600
        except OSError as exc:
            raise OutputError(f"cannot write {path}: {os_error_reason(exc)}") from None
        self._tmp = Path(tmp)
        os.fchmod(fd, FILE_MODE)
        self.file = os.fdopen(fd, "wb", buffering=1 << 20)

    def write(self, data: bytes) -> None:
        try:
            self.file.write(data)
        except OSError as exc:
            raise OutputError(f"cannot write {self.path}: {os_error_reason(exc)}") from None

    def commit(self) -> Path:
        try:
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()
            os.link(self._tmp, self.path, follow_symlinks=False)
        except FileExistsError:
            raise ExistingFileError(existing_file_message(self.path)) from None
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS, errno.EMLINK):
                raise OutputError(f"cannot write {self.path}: {os_error_reason(exc)}") from None
            if os.path.lexists(self.path):  # no hard links here (FAT, some FUSE): a rename, never over a name
                raise ExistingFileError(existing_file_message(self.path)) from None
            os.rename(self._tmp, self.path)
        finally:
            self.discard()
        return self.path

    def discard(self) -> None:
        if not self.file.closed:
            try:
                self.file.close()
            except OSError:
                pass  # a write that failed: the file goes anyway
        self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> "NewFile":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.discard()


def rewrite_own(path: Path, text: str) -> Path:
    """Replace a file trnwatch wrote itself this session (temporary file, fsync, rename: a rename
    replaces the name and never follows it). Raises `OutputError`."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {os_error_reason(exc)}") from None
    try:
        _write_fd(fd, path, redact(text).encode("utf-8"))
        os.replace(tmp, path)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {os_error_reason(exc)}") from None
    finally:
        Path(tmp).unlink(missing_ok=True)
    return path


def check_writable(path: Path) -> None:
    """Raise `OutputError` if a file at `path` clearly cannot be written: a folder in its place, a
    parent that is a file, a folder that is read-only or on a full file system. Nothing is created.
    (A file system can still fill up later: writers report that when it happens.) A path that
    exists is refused (`ExistingFileError`): trnwatch only creates files."""
    if path.is_dir():
        raise OutputError(f"{path} is a folder, not a file name")
    if os.path.lexists(path):
        raise ExistingFileError(existing_file_message(path))
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


def default_receipt_name(evidence: str, started_s: float, pid: int | None = None) -> str:
    """`trnwatch-YYYYmmdd-HHMMSS.mmm-<pid>-<evidence>.json`: the session's local start time, to the
    millisecond, so names sort by time, and this process's id, so two sessions of one host never
    pick the same name (and the file is created exclusively anyway)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(started_s))
    millis = int(started_s * 1000) % 1000
    return f"trnwatch-{stamp}.{millis:03d}-{os.getpid() if pid is None else pid}-{evidence}.json"


def receipt_places(requested: Path | None, default_name: str) -> list[Path]:
    """The receipt's JSON path, then its fallbacks: the default folder, the current directory."""
    places = [requested] if requested is not None else []
    places.append(default_receipt_dir() / default_name)
    try:
        places.append(Path.cwd() / default_name)
    except OSError:
        pass  # the current directory was removed under us
    return list(dict.fromkeys(places))
