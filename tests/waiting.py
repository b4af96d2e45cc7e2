"""Waiting on a condition instead of sleeping for a guess.

The deadline only bounds a broken test; it is no figure (a loaded machine just takes longer), so
it is generous, and the failure says what never happened and, when asked, the state that shows why.
"""

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

DEADLINE_S = 120.0
POLL_S = 0.05


def wait_until(condition: Callable[[], T], what: str, timeout_s: float = DEADLINE_S, poll_s: float = POLL_S,
               detail: Callable[[], str] | None = None) -> T:
    """Call `condition` until it returns something true and return that; after `timeout_s`, fail
    with "timed out after N s waiting for `what`" and `detail()` if given."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}"
                                 + (f": {detail()}" if detail is not None else ""))
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
