"""logrotate's `copytruncate` (the default for many services' logs) under a followed rank file or
job log: the file is copied, then truncated in place while its writer keeps it open. A writer
with O_APPEND goes on at the new end (offset 0); a writer without it (a shell's `>`, a plain
open for writing) goes on at its old offset, leaving a hole of NUL bytes before its next line.
Either way, every line written after the rotation is read once and whole. The rotation is the
real logrotate's."""

import os
import shutil
import subprocess

import pytest

from trnwatch.collectors.job_files import FileTail

pytestmark = pytest.mark.skipif(shutil.which("logrotate") is None, reason="logrotate not installed (apt: logrotate)")


def logrotate_copytruncate(tmp_path, log) -> None:
    """One forced rotation of `log` by the real logrotate, with copytruncate."""
    conf = tmp_path / "logrotate.conf"
    conf.write_text(f"{log} {{\n  copytruncate\n  rotate 3\n  missingok\n}}\n")
    subprocess.run(
        ["logrotate", "-f", "-s", str(tmp_path / "logrotate.state"), str(conf)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    assert os.path.getsize(log) == 0 and os.path.getsize(f"{log}.1") > 0  # copied, then truncated


def job_line(step: int, pad: int = 0) -> bytes:
    return (
        f'{{"v":1,"ts":{1_700_000_000 + step},"run":"r","rank":0,"event":"step","step":{step},"note":"{"x" * pad}"}}\n'
    ).encode()


def texts(tail: FileTail) -> list[str]:
    out = []
    while True:
        lines, more = tail.read_lines()
        out += [line.text if not line.oversize_bytes else f"<oversize {line.oversize_bytes}>" for line in lines]
        if not more:
            return out


@pytest.mark.parametrize("append", [True, False], ids=["O_APPEND", "no-O_APPEND"])
@pytest.mark.parametrize("written_before", [2_000, 3 << 20], ids=["2KB-before", "3MiB-before"])
@pytest.mark.parametrize("poll_between", [True, False], ids=["polled-between", "not-polled-between"])
def test_copytruncate_loses_no_line_written_after_the_rotation(tmp_path, append, written_before, poll_between):
    log = tmp_path / "rank-00000.jsonl"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else 0), 0o600)
    tail = FileTail(str(log), split_cr=True)
    try:
        before, step = [], 0
        while sum(map(len, before)) < written_before:
            step += 1
            before.append(job_line(step, pad=1000))
            os.write(fd, before[-1])
        assert texts(tail) == [line.decode().rstrip("\n") for line in before]
        logrotate_copytruncate(tmp_path, log)
        if poll_between:
            assert texts(tail) == []
        after = [job_line(step + i) for i in range(1, 4)]
        for line in after:
            os.write(fd, line)
        assert texts(tail) == [line.decode().rstrip("\n") for line in after]
        os.write(fd, job_line(step + 4))  # and the file is followed on from there
        assert texts(tail) == [job_line(step + 4).decode().rstrip("\n")]
    finally:
        os.close(fd)
        tail.close()
