"""Waiting on a condition instead of sleeping for a guess.

The deadline only bounds a broken test; it is no figure (a loaded machine just takes longer), so
it is generous, and the failure says what never happened and, when asked, the state that shows why.
"""

import asyncio
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

DEADLINE_S = 120.0
POLL_S = 0.05


def wait_until(
    condition: Callable[[], T],
    what: str,
    timeout_s: float = DEADLINE_S,
    poll_s: float = POLL_S,
    detail: Callable[[], str] | None = None,
) -> T:
    """Call `condition` until it returns something true and return that; after `timeout_s`, fail
    with "timed out after N s waiting for `what`" and `detail()` if given."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout_s:g} s waiting for {what}" + (f": {detail()}" if detail is not None else "")
            )
        time.sleep(poll_s)


async def until(condition: Callable[[], T], what: str, timeout_s: float = DEADLINE_S, poll_s: float = 0.01) -> T:
    """`wait_until` inside an event loop: the loop runs (the session, the app) while it waits."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        await asyncio.sleep(poll_s)


def run_until_said(
    command: list[str],
    needles: list[str],
    timeout_s: float = DEADLINE_S,
    signum: int = signal.SIGINT,
    **popen,
) -> subprocess.CompletedProcess:
    """Run a headless watch until its stderr has said every one of `needles`, then end it with
    Ctrl-C (SIGINT, or `signum`), as a person would: instead of a `--duration` that a loaded
    machine can outrun. Returns the finished process with its whole stdout and stderr."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)
    said: list[str] = []
    reader = threading.Thread(target=lambda: said.extend(proc.stderr), daemon=True)
    reader.start()
    try:
        wait_until(
            lambda: all(n in "".join(said) for n in needles) or proc.poll() is not None,
            f"{needles} on stderr",
            timeout_s,
            detail=lambda: "".join(said)[-2000:],
        )
        proc.send_signal(signum)
        out = proc.stdout.read()
        proc.wait(timeout=timeout_s)
        reader.join(timeout_s)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(command, proc.returncode, out, "".join(said))


def process_alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie (Linux /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False
