"""Suite-wide setup."""

import os
import signal

import pytest

from trnwatch import redaction

# A suite started as a background job of a non-interactive shell inherits SIGINT ignored (POSIX),
# and every child it starts would then ignore the Ctrl-C the exit-path tests send it (the
# drop-in simulator hung on SIGINT that way). A Python handler here makes exec'd children start
# with SIGINT at its default again, as under a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# pytest-xdist's workers run with COLUMNS=80 and LINES=24 in their environment, and Textual takes
# those over the terminal's own size: a child started on a 120x30 pty (tests/test_tui_pty.py) would
# draw at 80x24. The tests set every size they want themselves.
for _size in ("COLUMNS", "LINES"):
    os.environ.pop(_size, None)


@pytest.fixture(autouse=True)
def _no_secret_outlives_its_test():
    """A secret registered by one test (a token loaded in process) must not redact the next one's text."""
    yield
    redaction.forget_all()
