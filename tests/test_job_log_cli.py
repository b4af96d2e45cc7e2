"""Passive logs through the command line: profile options, their errors (exit 2), one log per
rank, and the demo writing its job as each framework's log and reading it back."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trnwatch.cli import main
from tests import nxd_logs, torchtitan_logs

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
TRNWATCH = [sys.executable, "-m", "trnwatch"]


def test_a_bad_log_profile_file_exits_2_naming_the_file_and_the_problem(tmp_path, capsys):
    log = tmp_path / "nxd_tp_pp.log"
    nxd_logs.tp_pp_resumed_fixture(log)
    bad = tmp_path / "profiles.toml"
    bad.write_text("[[profile]]\nname = 'x'\nrules = [{ pattern = '(?P<speed>\\d+)', emit = [{ event = 'step' }] }]\n")
    code = main(
        [
            "watch",
            "--job-log",
            str(log),
            "--log-profile-file",
            str(bad),
            "--headless",
            "--duration",
            "1",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert str(bad) in err and "profile 'x' rule 1: unknown group(s) ['speed']" in err


def test_an_unknown_log_profile_exits_2_listing_the_choices(tmp_path, capsys):
    log = tmp_path / "nxd_tp_pp.log"
    nxd_logs.tp_pp_resumed_fixture(log)
    code = main(
        [
            "watch",
            "--job-log",
            str(log),
            "--log-profile",
            "megatron",
            "--headless",
            "--duration",
            "1",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "unknown log profile 'megatron'; choose one of: nxd, nxdt, torchtitan" in err
    assert main(["watch", "--job-log", "x.log", "--log-profile", "torchrun", "--headless", "--duration", "1"]) == 2


def run(args, timeout=120):
    return subprocess.run(TRNWATCH + args, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_watch_reads_one_log_per_rank_and_the_receipt_names_the_profile(tmp_path):
    logs = tmp_path / "run7"
    for rank in (0, 1):
        (logs / str(rank)).mkdir(parents=True)
    torchtitan_logs.resumed_fixture(logs / "0" / "stdout.log")
    (logs / "1" / "stdout.log").write_text((FIXTURES / "neuron_runtime_errors.log").read_text().replace("[rank3]:", ""))
    receipt = tmp_path / "r.json"
    result = run(
        [
            "watch",
            "--headless",
            "--duration",
            "3",
            "--receipt",
            str(receipt),
            "--job-log",
            str(logs / "0" / "stdout.log"),
            "--job-log",
            str(logs / "1" / "stdout.log"),
            "--global-batch",
            "8",
            "--seq-len",
            "8192",
        ]
    )
    assert result.returncode == 0, result.stderr
    job = json.loads(receipt.read_text())["job"]
    assert job["log_profiles"] == {"joblog:0/stdout.log": "torchtitan", "joblog:1/stdout.log": None}
    assert job["throughput"]["tokens_per_s"] > 0
    sources = {s["id"]: s for s in json.loads(receipt.read_text())["sources"]}
    assert sources["joblog:1/stdout.log"]["unparsed_lines"] == 4 and sources["joblog:1/stdout.log"]["rejected"] == 0
    assert "read with log profile torchtitan" in receipt.with_suffix(".md").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("job_format", ["nxd", "nxdt", "torchtitan"])
def test_demo_writes_the_job_as_a_framework_log_and_reads_it_back_through_its_profile(tmp_path, job_format):
    # The hang scenario at 5 ticks a second: steps from tick 10, none from tick 30 (6 s in); with
    # --stall-after 1 the receipt at 10 s is STALLED (a passive log has no heartbeats to say more).
    receipt = tmp_path / "r.json"
    result = run(
        [
            "demo",
            "--headless",
            "--topology",
            "trn2.48xlarge",
            "--scenario",
            "hang",
            "--period",
            "0.2",
            "--duration",
            "10",
            "--late-after",
            "0.5",
            "--stall-after",
            "1",
            "--job-format",
            job_format,
            "--job-dir",
            str(tmp_path / "job"),
            "--receipt",
            str(receipt),
        ]
    )
    assert result.returncode == 0, result.stderr
    job = json.loads(receipt.read_text())["job"]
    log = f"joblog:rank0-{job_format}.log"
    assert job["log_profiles"] == {log: job_format}
    assert job["throughput"]["steps_in_window"] > 0
    assert job["throughput"]["tokens_per_s"] == pytest.approx(1024 * 4096 / 0.2, rel=0.1)
    assert job["verdict"] == "stalled", job["reason"]


KILLED_RANK_SCRIPT = """
import os, signal, time
print(f"rank {os.environ['RANK']} up", flush=True)
if os.environ["RANK"] == "1":
    time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGKILL)
time.sleep(60)
"""


@pytest.mark.slow
def test_a_real_torchrun_failure_summary_blames_the_killed_rank(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(KILLED_RANK_SCRIPT)
    log = tmp_path / "torchrun.log"
    torchrun = Path(sys.executable).with_name("torchrun")
    with open(log, "w") as out:
        launched = subprocess.run(
            [str(torchrun), "--standalone", "--nproc-per-node", "2", "--role", "rank", "--tee", "3", str(script)],
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=120,
        )
    assert launched.returncode != 0
    receipt = tmp_path / "r.json"
    result = run(["watch", "--headless", "--duration", "2", "--receipt", str(receipt), "--job-log", str(log)])
    assert result.returncode == 0, result.stderr
    job = json.loads(receipt.read_text())["job"]
    assert job["verdict"] == "failed"
    [first] = [failure for failure in job["failures"] if failure["role"] == "first"]
    assert first["rank"] == 1 and first["signal"] == "SIGKILL" and first["source"] == "launcher"
    assert job["reason"].startswith("first failure rank 1 ")


@pytest.mark.slow
def test_a_recorded_log_session_replays_to_the_same_job_section(tmp_path):
    receipt, replayed, recording = tmp_path / "live.json", tmp_path / "replay.json", tmp_path / "s.trnrec"
    nxd_logs.tp_zero1_fixture(tmp_path / "nxd_tp_zero1.log")
    result = run(
        [
            "watch",
            "--headless",
            "--duration",
            "2",
            "--receipt",
            str(receipt),
            "--record",
            str(recording),
            "--job-log",
            str(tmp_path / "nxd_tp_zero1.log"),
            "--global-batch",
            "64",
            "--seq-len",
            "4096",
        ]
    )
    assert result.returncode == 0, result.stderr
    result = run(["replay", str(recording), "--headless", "--receipt", str(replayed)])
    assert result.returncode == 0, result.stderr
    live, again = (json.loads(path.read_text()) for path in (receipt, replayed))
    assert again["job"]["log_profiles"] == live["job"]["log_profiles"] == {"joblog:nxd_tp_zero1.log": "nxd"}
    assert again["job"]["throughput"] == live["job"]["throughput"]
    assert [s["unparsed_lines"] for s in again["sources"]] == [s["unparsed_lines"] for s in live["sources"]]
