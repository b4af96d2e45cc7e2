"""How the command line ends on bad input and closed pipes (issue 9.10): a count and a reason,
an exit status that says something went wrong, no traceback."""

import subprocess
import sys

TRNWATCH = [sys.executable, "-m", "trnwatch"]


def test_garbage_on_stdin_says_how_many_lines_were_rejected_and_why_and_exits_1(tmp_path):
    result = subprocess.run(
        TRNWATCH + ["watch", "--stdin", "--headless", "--receipt", str(tmp_path / "r.json")],
        input="hello\n[1,2]\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "no valid line: 2 line(s) rejected (" in result.stderr
    assert "1 not-json" in result.stderr and "1 not-object" in result.stderr
    assert f"receipt: {tmp_path / 'r.json'}" in result.stdout  # the receipt is still written
    assert "Traceback" not in result.stderr


def test_one_valid_line_among_garbage_is_a_normal_end(tmp_path):
    from tests import reports as R

    good = R.line(R.report([R.runtime(1, "t", [0], util={0: 10.0})]))
    result = subprocess.run(
        TRNWATCH + ["watch", "--stdin", "--headless", "--receipt", str(tmp_path / "r.json")],
        input=f"hello\n{good}\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
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


def test_check_url_refuses_credentials_in_the_query_and_never_prints_them():
    import pytest

    from trnwatch.collectors.prometheus_http import UrlError, check_url

    for url in ("http://h:9000/metrics?access_token=s3cr3t", "https://h/api?x=1&API-KEY=s3cr3t"):
        with pytest.raises(UrlError, match="carries credentials in its query") as refused:
            check_url(url)
        assert "s3cr3t" not in str(refused.value)
    assert check_url("http://h:9000/metrics?match[]=up") == "http://h:9000/metrics?match[]=up"


def test_scrape_with_a_token_in_the_query_is_a_usage_error_that_does_not_echo_it(tmp_path):
    result = subprocess.run(
        TRNWATCH
        + [
            "watch",
            "--scrape",
            "http://127.0.0.1:1/metrics?access_token=s3cr3t",
            "--headless",
            "--receipt",
            str(tmp_path / "r.json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and "carries credentials" in result.stderr
    assert "s3cr3t" not in result.stderr + result.stdout and not (tmp_path / "r.json").exists()


def test_demo_removes_its_temporary_job_folder_on_exit(tmp_path):
    import os
    import signal
    import time

    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        TRNWATCH + ["demo", "--headless", "--duration", "1", "--period", "0.5", "--receipt", str(tmp_path / "r.json")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert not list(tmp_path.glob("trnwatch-demo-job-*"))
    proc = subprocess.Popen(
        TRNWATCH + ["demo", "--headless", "--period", "0.5", "--receipt", str(tmp_path / "s.json")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        # The session runs once the simulated job has written a line (the files exist earlier).
        while not any(p.stat().st_size for p in tmp_path.glob("trnwatch-demo-job-*/rank-*.jsonl")):
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    assert not list(tmp_path.glob("trnwatch-demo-job-*"))


def run_train_without_torch(*flags: str) -> subprocess.CompletedProcess:
    hide_torch = (
        f"import runpy, sys; sys.modules['torch'] = None; sys.argv = ['train', *{list(flags)!r}]; "
        "runpy.run_module('trnwatch.workloads.train', run_name='__main__')"
    )
    return subprocess.run([sys.executable, "-c", hide_torch], capture_output=True, text=True, timeout=60)


def test_train_without_torch_says_what_to_install(tmp_path):
    result = run_train_without_torch("--run-dir", str(tmp_path / "run"))
    assert result.returncode == 1
    assert "needs PyTorch" in result.stderr and "pip install torch" in result.stderr
    assert "Traceback" not in result.stderr


def test_train_help_needs_no_torch():
    result = run_train_without_torch("--help")
    assert result.returncode == 0 and "--run-dir" in result.stdout and "--hang-region" in result.stdout
