"""Commands that draw no screen import only what they use (issue 32 item 4: they start in at most
0.2 s; the figure is docs/benchmarks.md's, this checks what makes it): `--version` and `schema`
import neither the sources, the ledger's fold nor the screen; `compare` and `replay --info` read
their files without the fold, the session or the event loop (compare without pydantic too). A
real child process each."""

import subprocess
import sys

import pytest

HEAVY = ("trnwatch.sources", "trnwatch.session", "trnwatch.ledger.ledger", "trnwatch.export_cmd", "textual", "asyncio")
# What reading two receipts needs none of (pydantic: the contracts' models); reading a recording's
# header (a pydantic model) needs none but pydantic.
COMPARE_NEEDS_NONE_OF = ("trnwatch.session", "trnwatch.ledger.ledger", "textual", "asyncio", "pydantic")
INFO_NEEDS_NONE_OF = COMPARE_NEEDS_NONE_OF[:-1]

CHILD = """
import sys
from trnwatch.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(" ".join(sorted(m for m in sys.modules if m.startswith(tuple(sys.argv[0].split(","))))), file=sys.stderr)
"""


def imported(*argv: str, heavy: tuple[str, ...] = HEAVY) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD.replace("sys.argv[0]", repr(",".join(heavy))), *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return set(done.stderr.splitlines()[-1].split())  # the last line: the list (empty when none)


@pytest.mark.parametrize("argv", [("--version",), ("schema", "job"), ("schema", "neuron-monitor")])
def test_commands_without_a_screen_import_nothing_heavy(argv):
    assert imported(*argv) == set()


def test_a_session_command_still_builds_its_options():
    # watch's parser is the whole of its sources' options: they are imported for it.
    assert "trnwatch.sources" in imported("watch", "--help")


def test_compare_and_replay_info_read_their_files_without_the_fold(tmp_path):
    receipt = tmp_path / "receipt.json"
    receipt.write_text('{"schema": "trnwatch.receipt/1"}')  # not a whole receipt: compare says so, exit 2
    recording = tmp_path / "run.trnrec"
    recording.write_bytes(b"not a recording\n")
    assert imported("compare", str(receipt), str(receipt), heavy=COMPARE_NEEDS_NONE_OF) == set()
    assert imported("replay", "--info", str(recording), heavy=INFO_NEEDS_NONE_OF) == set()
