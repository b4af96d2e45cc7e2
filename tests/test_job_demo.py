"""The demo's hang through the real CLI, headless: LATE within seconds of the last step, and the
receipt, its Markdown and the snapshot text name the fault-site rank with its host and chip."""

import json
import re
import subprocess
import sys

import pytest

from trnwatch.workloads.sim.job import fault_rank
from trnwatch.workloads.sim.topology import get_topology

pytestmark = pytest.mark.slow

# The demo's own pace (a tick a second): the last step ends at tick 29, about 30 s in; LATE
# follows 5 s later; each session ends 40 s in, before STALLED (30 s after the last step).
DURATION_S = "40"
FAULT_RANK = fault_rank(get_topology("trn3-gen2-us"))
FAULT_HOST = "sim-trn3-gen2-us-07"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trnwatch", *args], capture_output=True, text=True, timeout=180)


def test_demo_hang_receipt_names_the_fault_site_as_the_first_suspect(tmp_path):
    receipt = tmp_path / "hang.json"
    result = run(
        "demo",
        "--headless",
        "--scenario",
        "hang",
        "--duration",
        DURATION_S,
        "--receipt",
        str(receipt),
        "--job-dir",
        str(tmp_path / "job"),
    )
    assert result.returncode == 0, result.stderr
    job = json.loads(receipt.read_text())["job"]
    assert job["verdict"] == "late", job["reason"]
    first = job["suspects"][0]
    assert (first["rank"], first["host"], first["chip"], first["region"]) == (FAULT_RANK, FAULT_HOST, 2, "dataloader")
    assert job["ranks"]["world_size"] == 576 and job["ranks"]["running"] == 576
    assert job["throughput"]["last_step_age_s"] > job["thresholds"]["late_s"]
    markdown = receipt.with_suffix(".md").read_text()
    assert f"**Verdict: LATE** (rank {FAULT_RANK} (host {FAULT_HOST} chip 2)" in markdown
    assert first["pid"] is not None  # its run_start's: the simulated chip's runtime
    culprit = f"culprit: rank {FAULT_RANK} (pid {first['pid']}, host {FAULT_HOST}, chip 2, core 8, region dataloader)"
    assert culprit in markdown


def test_snapshot_of_the_demo_hang_names_rank_host_and_chip():
    result = run("snapshot", "--demo", "--scenario", "hang", "--duration", DURATION_S)
    assert result.returncode == 0, result.stderr
    assert "LATE - rank 120 (host sim-trn3-gen2-us-07 chip 2)" in result.stdout
    assert re.search(
        rf"suspect rank {FAULT_RANK} \(pid \d+\): host {FAULT_HOST} chip 2 core 8, region dataloader", result.stdout
    ), result.stdout
