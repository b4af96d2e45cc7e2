"""How the command line ends on bad input and closed pipes (issue 9.10): a count and a reason,
an exit status that says something went wrong, no traceback."""

import subprocess
import sys

TRNWATCH = [sys.executable, "-m", "trnwatch"]


def test_garbage_on_stdin_says_how_many_lines_were_rejected_and_why_and_exits_1(tmp_path):
    result = subprocess.run(TRNWATCH + ["watch", "--stdin", "--headless", "--receipt", str(tmp_path / "r.json")],
                            input="hello\n[1,2]\n", capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert "no valid line: 2 line(s) rejected (" in result.stderr
    assert "1 not-json" in result.stderr and "1 not-object" in result.stderr
    assert f"receipt: {tmp_path / 'r.json'}" in result.stdout  # the receipt is still written
    assert "Traceback" not in result.stderr


def test_one_valid_line_among_garbage_is_a_normal_end(tmp_path):
    from tests import reports as R
    good = R.line(R.report([R.runtime(1, "t", [0], util={0: 10.0})]))
    result = subprocess.run(TRNWATCH + ["watch", "--stdin", "--headless", "--receipt", str(tmp_path / "r.json")],
                            input=f"hello\n{good}\n", capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "no valid line" not in result.stderr


def test_schema_into_a_pipe_closed_early_ends_quietly():
    # The schema fits in a pipe's buffer, so the reader closes its end before the child (still
    # importing) writes anything: every write then meets a closed pipe, as after `head` exits.
    proc = subprocess.Popen(TRNWATCH + ["schema", "receipt"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(timeout=120) == 0
    assert err == "", err
