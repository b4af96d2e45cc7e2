"""PyTorch Lightning 2.5.0 run for real (tests/lightning_run.py, a tiny CPU model): its default TQDM
bar and messages in a file read after the fact, and under a real pseudo-terminal of 120 and 300
columns watched live, plain and with NxD Training's bar metrics and saves (--nxdt); a stall (a
sleep in one step), checkpoints every 5 steps, the end by max_steps across two epochs (two bars).
The run records its own truth and each receipt is checked against it. A RichProgressBar run is
recognised and the receipt says why it gives no steps and what to do."""

import fcntl
import json
import os
import pty
import re
import signal
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path
from statistics import median

import pytest

from tests.waiting import wait_until

pytest.importorskip("pytorch_lightning")

RUN = [sys.executable, str(Path(__file__).parent / "lightning_run.py")]
TRNWATCH = [sys.executable, "-m", "trnwatch"]
STEPS, BATCHES, STALL_STEP, STALL_S, SAVE_EVERY = 20, 16, 8, 1.5, 5
ARGS = [
    "--steps",
    str(STEPS),
    "--batches",
    str(BATCHES),
    "--step-s",
    "0.1",
    "--stall-step",
    str(STALL_STEP),
    "--stall-s",
    str(STALL_S),
    "--save-every",
    str(SAVE_EVERY),
]
ENV = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")} | {"TERM": "xterm"}


def intervals(truth: dict) -> dict[int, float]:
    """Each step's time as a log shows it: from the previous step's end to its own (the first
    step from its own start)."""
    steps = {int(k): v for k, v in truth["steps"].items()}
    return {n: steps[n]["end_s"] - steps[n - 1]["end_s"] if n - 1 in steps else steps[n]["step_time_s"] for n in steps}


def check_receipt(receipt: dict, truth: dict) -> dict:
    """The receipt against the run's truth; returns the figures compared, for the report."""
    job = receipt["job"]
    times = intervals(truth)
    window = job["throughput"]
    covered = [times[n] for n in range(window["first_step"], window["last_step"] + 1)]
    got = {
        "verdict": job["verdict"],
        "last_step": window["last_step"],
        "p50": window["step_time_s"]["p50"],
        "p99": window["step_time_s"]["p99"],
        "saves": job["checkpoint_saves"]["count"],
        "truth_p50": median(covered),
        "truth_stall": times[STALL_STEP],
        "truth_last": truth["last_step"],
        "truth_saves": len(truth["saves"]),
    }
    assert job["verdict"] == "finished", job["reason"]  # `Trainer.fit` stopped: `max_steps=20` reached.
    assert window["last_step"] == truth["last_step"] == STEPS  # the last step is reported
    # The bar's elapsed time, refined by counter / rate, gives each step to a few ms.
    assert got["p50"] == pytest.approx(got["truth_p50"], abs=0.02)
    # Up to 100 steady steps, p99 is the longest: the stalled step, with its own length.
    assert window["first_step"] <= STALL_STEP <= window["last_step"]
    # Within 5% of the stall (1.6 s against 0.12 s steps): a few ms when quiet, 29 ms once with both
    # cores busy, where the bar's redraw lags the step's end by the scheduler's delay.
    assert got["p99"] == pytest.approx(got["truth_stall"], rel=0.05)
    assert got["saves"] == got["truth_saves"] == STEPS // SAVE_EVERY
    print(json.dumps(got))
    return got


def watch_after_the_fact(log: Path, receipt: Path) -> dict:
    result = subprocess.run(
        TRNWATCH + ["watch", "--job-log", str(log), "--headless", "--duration", "3", "--receipt", str(receipt)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(receipt.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("flavour", [[], ["--nxdt"]], ids=["lightning", "nxdt"])
def test_a_lightning_run_logged_to_a_file_read_after_the_fact(tmp_path, flavour):
    log, truth_path = tmp_path / "train.log", tmp_path / "truth.json"
    with open(log, "wb") as out:  # `python train.py > train.log 2>&1`
        subprocess.run(
            RUN + [str(truth_path)] + ARGS + flavour, stdout=out, stderr=subprocess.STDOUT, timeout=600, check=True
        )
    truth = json.loads(truth_path.read_text())
    receipt = watch_after_the_fact(log, tmp_path / "r.json")
    check_receipt(receipt, truth)
    assert receipt["job"]["log_profiles"] == {"joblog:train.log": "nxdt" if flavour else "lightning"}
    # Read after the fact, the steps keep their spacing on the bar's clock: the stall is there.
    ends = {int(n): step["end_s"] for n, step in truth["steps"].items()}
    assert receipt["goodput"]["window"]["seconds"] == pytest.approx(ends[STEPS] - ends[1], abs=0.05)


def run_in_pty(command: list[str], columns: int, log: Path) -> int:
    """Run `command` on a pseudo-terminal of `columns` x 40, copying what it draws to `log` as a
    terminal recorder (`script`) would; returns its exit status."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    proc = subprocess.Popen(command, stdin=slave, stdout=slave, stderr=slave, env=ENV, close_fds=True)
    os.close(slave)
    with open(log, "ab") as out:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the terminal's last writer is gone
                break
            if not data:
                break
            out.write(data)
            out.flush()
    os.close(master)
    return proc.wait(timeout=600)


@pytest.mark.slow
@pytest.mark.parametrize("columns, flavour", [(120, []), (300, []), (120, ["--nxdt"])], ids=["120", "300", "nxdt-120"])
def test_a_lightning_run_on_a_terminal_watched_live(tmp_path, columns, flavour):
    log, truth_path, receipt = tmp_path / "train.log", tmp_path / "truth.json", tmp_path / "r.json"
    log.write_bytes(b"")
    watch = subprocess.Popen(
        TRNWATCH + ["watch", "--job-log", str(log), "--headless", "--receipt", str(receipt)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        status: list[int] = []
        runner = threading.Thread(
            target=lambda: status.append(run_in_pty(RUN + [str(truth_path)] + ARGS + flavour, columns, log))
        )
        runner.start()
        runner.join(600)
        assert status == [0]
        bars = [line for line in re.split(r"\r\n|\r|\n", log.read_text(encoding="utf-8")) if line.startswith("Epoch ")]
        # 120 columns: tqdm cut every redraw with metrics to the terminal (postfix and `]` gone).
        assert all("]" in line for line in bars if "<" in line) == (columns == 300)
        wait_until(lambda: log.stat().st_size and True, "the log")
        watch.send_signal(signal.SIGTERM)  # the session ends after the run, reading what the log holds
        _, err = watch.communicate(timeout=120)
        assert watch.returncode == 0, err
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
    check_receipt(json.loads(receipt.read_text()), json.loads(truth_path.read_text()))


@pytest.mark.slow
def test_a_rich_bar_log_is_recognised_and_the_receipt_says_how_to_get_a_readable_one(tmp_path):
    log, truth_path = tmp_path / "train.log", tmp_path / "truth.json"
    with open(log, "wb") as out:
        # Lightning 2.5.0's RichProgressBar with the rich this environment has (>= 14, Textual's
        # requirement) fails at the start of fit (console.clear_live on an empty live stack); with
        # an older rich it draws a live display that leaves only its last frame in a file. Either
        # way no line per step.
        subprocess.run(
            RUN + [str(truth_path), "--rich", "--steps", "4"], stdout=out, stderr=subprocess.STDOUT, timeout=600
        )
    receipt = watch_after_the_fact(log, tmp_path / "r.json")
    job = receipt["job"]
    assert job["verdict"] == "no-data"
    assert job["log_profiles"] == {"joblog:train.log": "lightning-rich"}
    assert "RichProgressBar writes no line per step to a file: use the TQDM bar" in job["reason"]
