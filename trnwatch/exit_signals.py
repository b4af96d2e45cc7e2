"""What SIGINT, SIGTERM and SIGHUP do, from the program's start to its end.

Three phases; each changes a signal's disposition with one `signal.signal` call, the next
phase's handler replacing the last one's, so no signal ever meets a default disposition in
between (asyncio's `remove_signal_handler` puts the default back first: it is not used).

1. Starting (`install_start_handlers`, the first thing the program does, before its heavy
   imports): SIGTERM and SIGHUP raise `Stopped`, which the command line turns into one line on
   stderr and exit status 128 + N (143, 129); SIGINT keeps Python's KeyboardInterrupt (130).
2. A session runs (`catch_exit_signals`): each one asks the session to stop (trnwatch/session.py
   names the reason: interrupt, sigterm, sighup).
3. Finishing (`hold_exit_signals`): the session is over and its receipt being written; each
   one only says so on stderr ("finishing ..., please wait").
4. Leaving (`ignore_exit_signals`): all is written and said; they are ignored, because the
   interpreter's own end puts the default disposition back in place of any Python handler (a
   SIGTERM then would end a finished process with 143), never in place of SIG_IGN. A signal
   that arrives while `signal.signal` swaps a Python handler for SIG_IGN is caught by the old
   handler's C part and found ignored when Python goes to run it: CPython reports that as an
   unraisable "OSError: Signal N ignored due to race condition", with a traceback, on stderr (2
   of 12 Ctrl-C storms on a loaded machine). It is what this phase asks for, so that report,
   and only that one, is not printed.

It imports only `os`, `signal`, `sys` and `time`: phase 1 costs no import.
"""

import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

EXIT_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

FINISHING_WORDS = b"trnwatch: finishing: writing the receipt, please wait\n"


class Stopped(BaseException):
    """SIGTERM or SIGHUP before a session's own handlers existed. A BaseException, like
    KeyboardInterrupt, so no `except Exception` on the way swallows it."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def status(self) -> int:
        """The exit status: 128 + the signal's number, as a shell reports a process it ended."""
        return 128 + self.signum


def _raise_stopped(signum: int, _frame: object) -> None:
    raise Stopped(signum)


def install_start_handlers() -> None:
    """Phase 1: SIGTERM and SIGHUP raise `Stopped` until a session installs its own handlers."""
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _raise_stopped)


def catch_exit_signals(loop: Any, stop: Callable[[int], None]) -> Callable[[], None]:
    """Phase 2: each exit signal calls `stop(signum)` on `loop` (an asyncio event loop). Returns
    what puts the previous handlers back (for a session run inside another program, a test);
    the program itself ends with `hold_exit_signals` instead."""

    def handler(signum: int, _frame: object) -> None:
        try:
            loop.call_soon_threadsafe(stop, signum)
        except RuntimeError:  # the loop is closed: the session is over, its receipt on the way
            _say_finishing(signum, _frame)

    previous = {signum: signal.signal(signum, handler) for signum in EXIT_SIGNALS}

    def restore() -> None:
        for signum, before in previous.items():
            signal.signal(signum, before)

    return restore


_said_at: list[float] = []  # when the finishing words were last said (a storm of signals says them once a second)


def _say_finishing(_signum: int, _frame: object) -> None:
    now = time.monotonic()
    if _said_at and now - _said_at[-1] < 1.0:
        return
    _said_at[:] = [now]
    try:
        os.write(2, FINISHING_WORDS)  # not print(): it may be the very call this signal interrupted
    except OSError:
        pass


def hold_exit_signals() -> None:
    """Phase 3, to the process's end: each exit signal only says that the receipt is being
    written. Called once the session has ended, while its handlers are still in place."""
    for signum in EXIT_SIGNALS:
        signal.signal(signum, _say_finishing)


def ignore_exit_signals() -> None:
    """Phase 4, the program's last step: everything is written and said; the exit signals are
    ignored while the interpreter ends, and so is CPython's report of one that arrived during the
    swap (`_unless_ignored_in_the_swap`)."""
    sys.unraisablehook = _unless_ignored_in_the_swap(sys.unraisablehook)
    for signum in EXIT_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


def _unless_ignored_in_the_swap(report: Callable[[Any], object]) -> Callable[[Any], None]:
    """`report` (an unraisable hook) for everything but "Signal N ignored due to race condition",
    the words of CPython's Modules/signalmodule.c for a signal caught just before it was ignored."""

    def hook(unraisable: Any) -> None:
        error = unraisable.exc_value
        if not (isinstance(error, OSError) and str(error).endswith("ignored due to race condition")):
            report(unraisable)

    return hook
