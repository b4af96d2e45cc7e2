"""The Hugging Face transformers Trainer run for real (tests/hf_train.py: a tiny GPT-2 made from a
config, random token ids, CPU; transformers and accelerate from the test extra), alone and under
torchrun with 2 workers over gloo, its console redirected to a file as a user does
(`... > train.log 2>&1`) and read after the fact by `trnwatch watch --headless --job-log`: a clean
run, a slow step, an exception on rank 1 (its traceback glued to the bar's last redraw), a hang on
rank 1 ended by torchrun's SIGTERM. Each run records its own truth
(every step's end by its own clock, which rank did what at which step) and each receipt is checked
against it. Each log is made once per module."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from statistics import median

import pytest

from tests.torchrun import stop_torchrun
from tests.waiting import wait_until

pytest.importorskip("transformers")
pytestmark = pytest.mark.slow

SCRIPT = str(Path(__file__).with_name("hf_train.py"))
TORCHRUN = str(Path(sys.executable).with_name("torchrun"))
TRNWATCH = [sys.executable, "-m", "trnwatch"]
STEPS, STEP_S, SLOW_STEP, SLOW_S, FAIL_STEP, HANG_STEP = 24, 0.3, 10, 3.0, 12, 9
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def run(folder: Path, args: list[str], torchrun: list[str] | None = None, hang: bool = False) -> Path:
    """Run the script (under torchrun with `torchrun`'s flags) with its output in folder/train.log;
    `hang`: once rank 1 wrote that it hangs, stop torchrun with SIGTERM as a user would."""
    folder.mkdir()
    command = [sys.executable, SCRIPT] if torchrun is None else [TORCHRUN, *torchrun, SCRIPT]
    command += [str(folder), "--steps", str(STEPS), "--step-s", str(STEP_S), *args]
    log = folder / "train.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=ENV, start_new_session=True)
    try:
        if hang:
            wait_until(lambda: (truth(folder, 1) or {}).get("case"), "rank 1 to hang", timeout_s=300)
            os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=600)
    finally:
        stop_torchrun(process)
    return log


def truth(folder: Path, rank: int, attempt: int = 0) -> dict | None:
    path = folder / f"rank-{rank}-attempt-{attempt}.json"
    return json.loads(path.read_text()) if path.exists() else None


def receipt(log: Path) -> dict:
    path = log.with_name("receipt.json")
    command = [*TRNWATCH, "watch", "--job-log", str(log), "--headless", "--duration", "3", "--receipt", str(path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    return json.loads(path.read_text())["job"]


def intervals(record: dict) -> dict[int, float]:
    return {int(n): step["interval_s"] for n, step in record["steps"].items()}


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("hf")


@pytest.fixture(scope="module")
def clean(logs):
    return run(logs / "clean", [])


@pytest.fixture(scope="module")
def slow(logs):
    return run(logs / "slow", ["--slow-step", str(SLOW_STEP), "--slow-s", str(SLOW_S), "--save-steps", "8"])


TWO = ["--standalone", "--nproc-per-node", "2"]


@pytest.fixture(scope="module")
def raised(logs):
    return run(logs / "raised", ["--fail-rank", "1", "--fail-step", str(FAIL_STEP)], TWO)


@pytest.fixture(scope="module")
def hung(logs):
    return run(logs / "hung", ["--hang-rank", "1", "--hang-step", str(HANG_STEP)], TWO, hang=True)


def test_a_clean_run_is_finished_at_its_last_step_with_its_step_time(clean):
    job, record = receipt(clean), truth(clean.parent, 0)
    assert job["log_profiles"] == {"joblog:train.log": "hf"}
    assert job["verdict"] == "finished", job["reason"]  # the train_runtime summary
    window = job["throughput"]
    assert window["last_step"] == record["last_step"] == STEPS
    covered = [intervals(record)[n] for n in range(window["first_step"], window["last_step"] + 1)]
    # From the bar's whole-second elapsed field: over 3 s spans, a few steps each.
    assert window["step_time_s"]["p50"] == pytest.approx(median(covered), abs=0.1)


def test_a_slow_step_is_read_from_the_elapsed_field_and_saves_are_not_steps(slow):
    job, record = receipt(slow), truth(slow.parent, 0)
    assert job["verdict"] == "finished", job["reason"]
    window = job["throughput"]
    assert window["last_step"] == STEPS  # the `Writing model shards` bars (0/1, 1/1) are no steps
    assert job["checkpoint_saves"]["count"] == 3  # at steps 8, 16, 24
    # The longest step is the slow one, to the field's second.
    assert window["step_time_s"]["p99"] == pytest.approx(intervals(record)[SLOW_STEP], abs=1.0)
    # The typical step as it ran (the script's own clock: a loaded machine stretches --step-s).
    assert window["step_time_s"]["p50"] == pytest.approx(median(intervals(record).values()), abs=0.15)


def test_an_exception_on_rank_1_glued_to_the_bar_is_the_cause_with_its_message(raised):
    text = raised.read_text(encoding="utf-8")
    assert "s][rank1]: Traceback (most recent call last):" in text  # what this test is about
    job, record = receipt(raised), truth(raised.parent, 1)
    assert record["case"] == {"what": "raise", "step": FAIL_STEP, "ts": record["case"]["ts"]}
    assert job["verdict"] == "failed"
    [first] = [failure for failure in job["failures"] if failure["role"] == "first"]
    assert first["rank"] == 1
    assert first["error"] == f"RuntimeError: injected failure on rank 1 at step {FAIL_STEP}"
    # Rank 0's bar (the only one) reached the step rank 1 failed after.
    assert max(suspect["step"] or 0 for suspect in job["suspects"]) == FAIL_STEP


def test_a_hang_on_rank_1_is_aborted_with_its_last_step(hung):
    job, record = receipt(hung), truth(hung.parent, 1)
    assert record["case"]["what"] == "hang"
    assert job["verdict"] == "aborted"
    assert job["reason"] == "torchrun's agent received SIGTERM (signal 15) and shut its workers down"
    assert job["throughput"]["last_step"] == HANG_STEP == record["last_step"]


def test_neuron_trainers_keys_give_each_logged_step_its_own_time_and_tokens(tmp_path):
    """NeuronTrainer's dicts through the real ProgressCallback (tests/neuron_trainer_lines.py):
    train/step_time is the step's time, train/tokens_per_sec x that time its tokens."""
    log, truth_path = tmp_path / "train.log", tmp_path / "truth.json"
    lines = [sys.executable, str(Path(__file__).with_name("neuron_trainer_lines.py")), str(truth_path)]
    with open(log, "wb") as out:
        subprocess.run(lines + ["--steps", "12", "--step-s", "0.2"], stdout=out, stderr=subprocess.STDOUT, check=True)
    record = json.loads(truth_path.read_text())
    job = receipt(log)
    assert job["log_profiles"] == {"joblog:train.log": "hf"}
    window = job["throughput"]
    assert window["last_step"] == 12
    # The dict prints '%.4g': each step's own time to 4 digits (the receipt's percentile may pick
    # either middle step: steps differ by a few ms).
    times = [record["steps"][str(n)] for n in range(window["first_step"], window["last_step"] + 1)]
    assert window["step_time_s"]["p50"] == pytest.approx(median(times), abs=0.01)
    printed = [float(f"{t:.4g}") for t in times]  # what the log holds: 0.200105 prints as 0.2001
    assert min(printed) <= window["step_time_s"]["p50"] <= max(printed)
    logged = record["logged"]["6"]
    assert window["tokens_per_s"] == pytest.approx(logged["train/tokens_per_sec"], rel=0.1)


@pytest.fixture(scope="module")
def saved(logs):
    """Checkpoints every 8 steps into the folder that holds the console log (the output_dir)."""
    folder = logs / "saved"
    return run(folder, ["--save-steps", "8", "--output-dir", str(folder)])


def check_losses_against_truth(progress: dict, record: dict, sources: list[str]) -> None:
    told = {point["step"]: point for point in progress["losses"]}
    truth_losses = {int(step): loss for step, loss in record["losses"].items()}
    assert sorted(told) == sorted(truth_losses) == list(range(2, STEPS + 1, 2))  # --logging-steps 2
    for step, loss in truth_losses.items():
        # trainer_state.json holds the float the Trainer logged: the receipt's value is it exactly.
        assert told[step]["loss"] == loss and list(told[step]["by_source"]) == sources and told[step]["agree"]
    assert progress["losses_disagreeing"] == 0


def test_trainer_state_beside_the_log_is_a_second_account_joined_with_it(saved):
    job, record = receipt(saved), truth(saved.parent, 0)
    assert job["verdict"] == "finished", job["reason"]
    progress = job["progress"]
    assert progress["last_step"] == record["last_step"] == STEPS
    state, log = progress["sources"]["ckpt:saved"], progress["sources"]["joblog:train.log"]
    assert state["last_step"] == STEPS and state["losses"] == STEPS // 2  # checkpoint-24's log_history
    assert log["last_step"] == STEPS and log["losses"] == STEPS // 2  # the console's dicts, '%.4g'
    assert state["last_loss"] == record["losses"][str(STEPS)]
    check_losses_against_truth(progress, record, ["ckpt:saved", "joblog:train.log"])
    # The log's step times are the run's; the state's untimed steps add none.
    assert job["throughput"]["last_step"] == STEPS and job["sources"]["ckpt:saved"] == {
        "step": STEPS // 2,
        "run_end": 1,
    }


def test_trainer_state_read_from_ckpt_dir_alone_gives_the_last_step_and_the_losses(saved):
    path = saved.with_name("ckpt-receipt.json")
    command = [*TRNWATCH, "watch", "--ckpt-dir", str(saved.parent), "--headless", "--duration", "2"]
    result = subprocess.run([*command, "--receipt", str(path)], capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    job, record = json.loads(path.read_text())["job"], truth(saved.parent, 0)
    progress = job["progress"]
    assert progress["last_step"] == record["last_step"] == STEPS
    assert job["verdict"] == "finished", job["reason"]  # checkpoint-24 says global_step 24 of max_steps 24
    assert list(progress["sources"]) == ["ckpt:saved"]
    check_losses_against_truth(progress, record, ["ckpt:saved"])
