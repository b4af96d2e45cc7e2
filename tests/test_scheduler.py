"""Scheduler identity (issue 23 item 4): the Slurm job trnwatch runs in, from SLURM_JOB_ID,
SLURM_JOB_NAME and SLURM_JOB_NODELIST (Slurm's documented sbatch/srun output environment
variables), set in a real child `trnwatch` and read back from its receipt, its recording's replay
and `compare`; and where the header shows it."""

import json
import os
import subprocess
import sys
from pathlib import Path

from trnwatch.collectors.scheduler import SlurmJob, slurm_job
from trnwatch.ledger.compare import compare, render_markdown
from trnwatch.ledger.receipt import Receipt
from tests import reports as R
from tests.test_tui_app import drive
from tests.tui_fleet import make_app

TRNWATCH = [sys.executable, "-m", "trnwatch"]
SLURM = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "pretrain-70b", "SLURM_JOB_NODELIST": "trn[001-004]"}
REPORTS = "".join(R.line(R.report([R.runtime(1, "t", [0], util={0: 40.0 + i})])) + "\n" for i in range(3))


def _env(slurm: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    return {**env, **slurm}


def _watch(tmp_path: Path, name: str, slurm: dict[str, str], *extra: str) -> dict:
    """`trnwatch watch --stdin --headless` in a child with `slurm` in its environment; its receipt."""
    receipt = tmp_path / f"{name}.json"
    result = subprocess.run(
        [*TRNWATCH, "watch", "--stdin", "--headless", "--receipt", str(receipt), *extra],
        input=REPORTS,
        env=_env(slurm),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(receipt.read_text())


def test_slurm_variables_are_the_job_and_none_outside_an_allocation():
    assert slurm_job(SLURM) == SlurmJob(kind="slurm", job_id="4242", name="pretrain-70b", nodelist="trn[001-004]")
    assert slurm_job({"SLURM_JOB_ID": "7"}) == SlurmJob(kind="slurm", job_id="7", name=None, nodelist=None)
    assert slurm_job({"SLURM_JOB_NAME": "x", "HOME": "/root"}) is None
    assert slurm_job({"SLURM_JOB_ID": "9", "SLURM_JOB_NAME": "a\x1b[31mb\n"}).name == "a[31mb"  # data, no escapes


def test_a_child_in_a_slurm_allocation_writes_its_job_into_the_receipt_and_recording(tmp_path):
    recording = tmp_path / "run.trnrec"
    inside = _watch(tmp_path, "inside", SLURM, "--record", str(recording))
    Receipt.model_validate(inside)
    assert inside["boundary"]["scheduler"] == {
        "kind": "slurm",
        "job_id": "4242",
        "name": "pretrain-70b",
        "nodelist": "trn[001-004]",
    }
    md = (tmp_path / "inside.md").read_text()
    assert "slurm job 4242 (pretrain-70b) on trn\\[001-004\\]" in md  # brackets from outside are escaped

    outside = _watch(tmp_path, "outside", {})
    assert outside["boundary"]["scheduler"] is None
    assert "none: not inside a Slurm allocation" in (tmp_path / "outside.md").read_text()

    # A replay reports the recorded job, not the replaying shell's (which is in another job here).
    replayed = tmp_path / "replayed.json"
    result = subprocess.run(
        [*TRNWATCH, "replay", str(recording), "--headless", "--receipt", str(replayed)],
        env=_env({"SLURM_JOB_ID": "9999", "SLURM_JOB_NAME": "replaying-shell"}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(replayed.read_text())["boundary"]["scheduler"] == inside["boundary"]["scheduler"]

    # compare: another job id is information, shown, not a mismatch.
    other = _watch(tmp_path, "other", {**SLURM, "SLURM_JOB_ID": "4343"})
    result = compare(inside, other)
    assert not result.refused and result.like_for_like and result.mismatched == []
    assert result.scheduler_jobs == (
        "slurm job 4242 (pretrain-70b) on trn[001-004]",
        "slurm job 4343 (pretrain-70b) on trn[001-004]",
    )
    text = render_markdown(result, "inside.json", "other.json")
    assert "**Like for like**" in text
    assert "Scheduler jobs (different; information, not a boundary field): baseline slurm job 4242" in text
    assert "Scheduler jobs" not in render_markdown(compare(outside, outside), "a", "b")


def test_the_header_shows_the_job_where_it_fits_and_never_cuts_the_scope():
    job = SlurmJob(kind="slurm", job_id="4242", name="pretrain-70b", nodelist="trn[001-004]")
    long_name = job.model_copy(update={"name": "x" * 120})

    def shown(width: int, scheduler: SlurmJob | None) -> str:
        app = make_app()
        app.ledger.scheduler = scheduler
        return drive(app, size=(width, 24)).header

    # 80 columns: the UltraServer's scope line already fills its room, so the job is left out
    # and the header is exactly what it is outside an allocation (the snapshots' header).
    assert shown(80, job) == shown(80, None)
    assert "36 hosts · 144 chips" in shown(80, job)
    wide = shown(200, job)
    assert "36 hosts · 144 chips · slurm 4242 pretrain-70b" in wide
    # A name too long for the room: the job id alone.
    cut = shown(200, long_name)
    assert "36 hosts · 144 chips · slurm 4242" in cut and "xxx" not in cut
    assert "slurm" not in shown(200, None)
