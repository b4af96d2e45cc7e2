"""A real systemd journal of kernel messages, written by systemd-journal-remote from journal export
entries (apt: systemd-journal-remote), for the real journalctl to read (`--file`, `--directory`)."""

import subprocess
from pathlib import Path

JOURNAL_REMOTE = Path("/lib/systemd/systemd-journal-remote")
BOOT_ID = b"0123456789abcdef0123456789abcdef"


def write_kernel_journal(path: Path, entries: list[tuple[float, int, str]], hostname: str, seqnum: int = 1) -> None:
    """Write `entries` (unix time, syslog level, message), as the kernel logged them on `hostname`,
    numbered from `seqnum` on (journalctl orders one journal's files by these numbers: a file
    that continues another continues its numbers, as journald's rotated files do)."""
    export = b"".join(
        b"__CURSOR=s=0;i=%d\n__REALTIME_TIMESTAMP=%d\n__MONOTONIC_TIMESTAMP=%d\n"
        b"_BOOT_ID=%s\n_TRANSPORT=kernel\nPRIORITY=%d\nSYSLOG_FACILITY=0\n"
        b"SYSLOG_IDENTIFIER=kernel\n_HOSTNAME=%s\nMESSAGE=%s\n\n"
        % (seqnum + i, int(t * 1e6), seqnum + i, BOOT_ID, lvl, hostname.encode(), msg.encode())
        for i, (t, lvl, msg) in enumerate(entries)
    )
    subprocess.run([str(JOURNAL_REMOTE), "-o", str(path), "-"], input=export, capture_output=True, check=True)
