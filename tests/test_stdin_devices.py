"""A device on stdin (`watch --stdin < /dev/zero`, `< /dev/urandom`) or as a recording: a line
past its bound is counted the moment it passes the bound, not at a newline that may never come,
and a stream with no newline at all is refused in words. Real child processes, each under an
address-space limit (an unbounded reader of /dev/zero grows until the machine kills it)."""

import json
import resource
import subprocess
import sys

TRNWATCH = [sys.executable, "-m", "trnwatch"]
ADDRESS_SPACE_BYTES = 2 << 30  # far above what trnwatch needs, far below what /dev/zero would take


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_BYTES, ADDRESS_SPACE_BYTES))


def watch_stdin(device: str, tmp_path, duration_s: str) -> tuple[subprocess.CompletedProcess, dict]:
    receipt = tmp_path / "r.json"
    with open(device, "rb") as stdin:
        result = subprocess.run(
            [*TRNWATCH, "watch", "--stdin", "--headless", "--duration", duration_s, "--receipt", str(receipt)],
            stdin=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            preexec_fn=_limit_memory,
        )
    assert "Traceback" not in result.stderr and "MemoryError" not in result.stderr, result.stderr
    return result, json.loads(receipt.read_text())


def test_dev_zero_on_stdin_is_counted_and_refused_not_a_clean_empty_session(tmp_path):
    """Before: 8 s of /dev/zero ended with exit 0 and a receipt of 0 reports, 0 rejected."""
    result, receipt = watch_stdin("/dev/zero", tmp_path, "8")
    assert result.returncode == 1, result.stderr
    (source,) = receipt["sources"]
    assert source["reports"] == 0
    assert source["rejected_by_reason"] == {"oversize": 1}
    assert "no newline in 64 MiB: not a stream of lines" in source["end_error"]
    assert "stdin lost: " in result.stderr and "no newline in 64 MiB" in result.stderr


def test_dev_urandom_on_stdin_is_counted_line_by_line(tmp_path):
    result, receipt = watch_stdin("/dev/urandom", tmp_path, "2")
    assert result.returncode == 1, result.stderr  # lines arrived and not one was valid
    (source,) = receipt["sources"]
    assert source["reports"] == 0 and source["rejected"] > 1000
    assert "no valid line" in result.stderr


def test_a_device_as_a_recording_is_refused_in_words(tmp_path):
    """`replay /dev/zero` (or /dev/urandom): refused after reading at most a header line's bound,
    exit 2, never read whole (a MemoryError or a read that never ended, once)."""
    for device in ("/dev/zero", "/dev/urandom"):
        result = subprocess.run(
            [*TRNWATCH, "replay", device, "--headless", "--receipt", str(tmp_path / "r.json")],
            capture_output=True,
            text=True,
            timeout=120,
            preexec_fn=_limit_memory,
        )
        assert result.returncode == 2, result.stderr
        assert f"{device} is not a trnwatch recording" in result.stderr and "Traceback" not in result.stderr
        assert not (tmp_path / "r.json").exists()
