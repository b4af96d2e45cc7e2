"""`trnwatch snapshot`: collect headless, then print every scope, as real child processes."""

import json
import subprocess
import sys

import pytest

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
