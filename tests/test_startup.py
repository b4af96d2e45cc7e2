"""Commands that draw no screen import only what they use (issue 32 item 4: they start in at most
0.2 s; the figure is docs/benchmarks.md's, this checks what makes it): `--version` and `schema`
import neither the sources, the ledger's fold nor the screen. A real child process each."""

import subprocess
import sys

import pytest

HEAVY = ("trnwatch.sources", "trnwatch.session", "trnwatch.ledger.ledger", "trnwatch.export_cmd", "textual")

CHILD = """
import sys
from trnwatch.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(" ".join(sorted(m for m in sys.modules if m.startswith(tuple(sys.argv[0].split(","))))), file=sys.stderr)
"""


def imported(*argv: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD.replace("sys.argv[0]", repr(",".join(HEAVY))), *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return set(done.stderr.strip().splitlines()[-1].split()) if done.stderr.strip() else set()


@pytest.mark.parametrize("argv", [("--version",), ("schema", "job"), ("schema", "neuron-monitor")])
def test_commands_without_a_screen_import_nothing_heavy(argv):
    assert imported(*argv) == set()


def test_a_session_command_still_builds_its_options():
    # watch's parser is the whole of its sources' options: they are imported for it.
    assert "trnwatch.sources" in imported("watch", "--help")
