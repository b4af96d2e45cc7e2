"""`trnwatch snapshot`: collect headless, then print every scope, as real child processes."""

import json
import subprocess
import sys

import pytest

from trnwatch.ledger.snapshot import Snapshot, snapshot_json_schema

pytestmark = pytest.mark.slow

TRNWATCH = [sys.executable, "-m", "trnwatch"]


def run(args):
    return subprocess.run(TRNWATCH + args, capture_output=True, text=True, timeout=120)


def test_snapshot_of_the_demo_prints_every_scope_as_json():
    out = run(["snapshot", "--demo", "--duration", "2", "--json"])
    assert out.returncode == 0, out.stderr
    snap = json.loads(out.stdout)
    assert snap["schema"] == "trnwatch.snapshot/1" and snap["evidence"] == "simulated"
    assert len(snap["chips"]) == 144 and len(snap["hosts"]) == 36 and len(snap["ultraservers"]) == 1
    assert snap["job"]["run"] == "sim-trn3-gen2-us-seed0-healthy"  # the demo's simulated job
    assert snap["job"]["verdict"] == "compiling"  # two seconds in: the simulated compile phase
    assert Snapshot.model_validate_json(out.stdout).job.run == snap["job"]["run"]  # the JSON honours its model


def test_schema_command_prints_the_snapshot_schema():
    out = run(["schema", "snapshot"])
    assert out.returncode == 0, out.stderr
    schema = json.loads(out.stdout)
    assert schema == snapshot_json_schema() and schema["properties"]["schema"]["const"] == "trnwatch.snapshot/1"
    assert {"findings", "incidents", "sources", "ultraservers", "hosts", "chips", "job"} <= set(schema["required"])


def test_snapshot_of_a_recording_is_judged_at_the_replay_clock(tmp_path):
    recording = tmp_path / "run.trnrec"
    made = run(
        ["demo", "--headless", "--duration", "2", "--record", str(recording), "--receipt", str(tmp_path / "r.json")]
    )
    assert made.returncode == 0, made.stderr
    snap = json.loads(run(["snapshot", "--replay", str(recording), "--json"]).stdout)
    receipt = json.loads((tmp_path / "r.json").read_text())
    assert snap["evidence"] == "replayed" and snap["recorded_evidence"] == "simulated"
    assert snap["now"] == receipt["window"]["end"]  # the last line recorded, not the wall clock
    assert all(h["fresh"] for h in snap["hosts"])  # judged at replay time, an old recording is still fresh
    text = run(["snapshot", "--replay", str(recording)]).stdout
    assert text.startswith("trnwatch snapshot (REPLAYED (recorded session: simulated))")
    assert "UltraServer us-0sim" in text and "figures over 144 chips on 36/36 fresh hosts" in text
