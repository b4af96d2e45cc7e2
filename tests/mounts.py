"""Small file systems for output-failure tests: a tmpfs that is read-only or nearly full.

Root ignores folder permissions (a chmod 0555 folder stays writable for root), so a read-only
folder is a read-only tmpfs mount, and a full disk is a small tmpfs filled up. Both need the
right to mount; without it the test is skipped with that reason.
"""

import contextlib
import errno
import os
import subprocess
from pathlib import Path

import pytest

PAGE_BYTES = 4096


@contextlib.contextmanager
def tmpfs(path: Path, size_kib: int = 64, read_only: bool = False):
    """Mount a tmpfs of `size_kib` at `path` (created) for the duration of the block."""
    path.mkdir(parents=True, exist_ok=True)
    options = f"size={size_kib}k,mode=0755" + (",ro" if read_only else "")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip() or mounted.returncode}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


def fill(folder: Path, leave_pages: int = 0) -> Path:
    """Fill the file system of `folder` with one file, then give back `leave_pages` pages."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        while True:
            try:
                os.write(fd, b"\0" * PAGE_BYTES)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                break
        os.ftruncate(fd, max(0, os.fstat(fd).st_size - leave_pages * PAGE_BYTES))
    finally:
        os.close(fd)
    return filler
