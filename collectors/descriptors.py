"""The process's file descriptors: its limit, how many are left, and running out as data.

A descriptor shortage (EMFILE: this process is at its limit; ENFILE: the system is) is trnwatch's
own, never the watched source's: a follower that meets it retries with backoff and says so, and a
server trnwatch runs keeps a reserve of descriptors free for the sources (trnwatch/metrics.py).
"""

import errno
import os
import resource

SHORT_ERRNOS = (errno.EMFILE, errno.ENFILE)


def out_of_descriptors(exc: OSError) -> bool:
    """Whether `exc` says the process or the system ran out of file descriptors."""
    return exc.errno in SHORT_ERRNOS


def soft_limit() -> int | None:
    """The soft RLIMIT_NOFILE, or None when unlimited."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


def descriptors_free() -> int | None:
    """Descriptors the process may still open under its soft limit: 0 when it is out of them
    (listing /proc/self/fd itself takes one), None when that cannot be told (no /proc, no limit)."""
    soft = soft_limit()
    if soft is None:
        return None
    try:
        in_use = len(os.listdir("/proc/self/fd")) - 1  # less the listing's own
    except OSError as exc:
        return 0 if out_of_descriptors(exc) else None
    return max(0, soft - in_use)


def shortage_words(exc: OSError) -> str:
    """'out of file descriptors (EMFILE: Too many open files)'."""
    name = errno.errorcode.get(exc.errno or 0, "error")
    return f"out of file descriptors ({name}: {exc.strerror or exc})"
