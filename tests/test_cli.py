"""The command line end to end, as real child processes: pipes, signals, receipts, replay."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trnwatch.ledger.receipt import Receipt
from trnwatch.workloads.sim.ground_truth import chip_hbm_bytes, chip_utilization_pct
from trnwatch.workloads.sim.topology import get_topology
from tests import reports as R

TRNWATCH = [sys.executable, "-m", "trnwatch"]
SIM = [sys.executable, "-m", "trnwatch.workloads.sim"]


def run(args, **kw):
    return subprocess.run(TRNWATCH + args, capture_output=True, text=True, timeout=120, **kw)


def load_receipt(path: Path) -> dict:
    text = path.read_text()
    Receipt.model_validate_json(text)  # the file honours its own schema
    return json.loads(text)


def figures(receipt: dict) -> dict:
    """The measured figures of a receipt (everything but when it was written and how it ended)."""
    return {k: receipt[k] for k in ("window", "sources", "hosts", "chips", "runtimes", "ultraservers")}


def test_version_and_help():
    assert run(["--version"]).stdout.startswith("trnwatch ")
    out = run(["watch", "--help"]).stdout
    assert "--stdin" in out and "--neuron-monitor" in out and "--receipt" in out


def test_sim_pipe_receipt_matches_ground_truth(tmp_path):
    ticks, host, scenario = 40, 7, "hbm-leak"
    sim = subprocess.Popen(
        SIM + ["--no-wait", "--count", str(ticks), "--host", str(host), "--scenario", scenario], stdout=subprocess.PIPE
    )
    receipt_path = tmp_path / "r.json"
    watch = subprocess.run(
        TRNWATCH + ["watch", "--stdin", "--headless", "--receipt", str(receipt_path)],
        stdin=sim.stdout,
        capture_output=True,
        text=True,
        timeout=120,
    )
    sim.wait(timeout=30)
    assert watch.returncode == 0, watch.stderr
    assert f"receipt: {receipt_path}" in watch.stdout
    r = load_receipt(receipt_path)
    assert r["evidence"] == "simulated" and r["exit_reason"] == "eof"
    topo = get_topology("trn3-gen2-us")
    assert len(r["chips"]) == topo.chips_per_host
    for chip in r["chips"]:
        d = chip["device"]
        assert chip["hbm_peak_bytes"] == max(chip_hbm_bytes(topo, scenario, 0, host, d, t) for t in range(ticks))
        mean = sum(chip_utilization_pct(topo, scenario, 0, host, d, t) for t in range(ticks)) / ticks
        assert chip["util_mean_pct"] == pytest.approx(mean, abs=1e-3)
        assert chip["samples"] == ticks
        assert chip["hbm_capacity_bytes"] == 144 * R.GIB
    assert r["sources"] == [{**r["sources"][0], "id": "stdin", "reports": ticks, "rejected": 0, "ended": True}]
    md = receipt_path.with_suffix(".md").read_text()
    assert "SIMULATED" in md and "not an UltraServer figure" in md


def test_stream_survives_every_kind_of_bad_line(tmp_path):
    from tests.test_neuron_monitor import BAD_LINES

    good = R.line(R.report([R.runtime(1, "t", [0], util={0: 40.0})]))
    bad = [text for text, _ in BAD_LINES.values()]
    stream = "\n".join([good] + bad + ["\x00\xff binary", "{" + "x" * (5 << 20) + "}", good]) + "\n"
    receipt_path = tmp_path / "r.json"
    watch = subprocess.run(
        TRNWATCH + ["watch", "--stdin", "--headless", "--receipt", str(receipt_path)],
        input=stream.encode("utf-8", "surrogateescape"),
        capture_output=True,
        timeout=120,
    )
    assert watch.returncode == 0, watch.stderr
    (source,) = load_receipt(receipt_path)["sources"]
    assert source["reports"] == 2
    assert source["rejected"] == len(bad) + 2
    assert source["rejected_by_reason"]["oversize"] == 1


def _neuron_monitor_wrapper(tmp_path: Path, *sim_args: str) -> Path:
    """An executable standing in for neuron-monitor: the simulator with the caller's arguments."""
    script = tmp_path / "neuron-monitor"
    script.write_text(f'#!/bin/sh\nexec {sys.executable} -m trnwatch.workloads.sim {" ".join(sim_args)} "$@"\n')
    script.chmod(0o755)
    return script


@pytest.mark.slow
@pytest.mark.parametrize(
    "signum, reason", [(signal.SIGTERM, "sigterm"), (signal.SIGHUP, "sighup"), (signal.SIGINT, "interrupt")]
)
def test_signal_to_headless_watch_leaves_a_valid_receipt(tmp_path, signum, reason):
    # The stand-in neuron-monitor also copies its reports to a file, so the test signals once
    # reports are flowing (however slow the machine) instead of after a fixed sleep.
    sent = tmp_path / "sent.jsonl"
    monitor = tmp_path / "neuron-monitor"
    monitor.write_text(f'#!/bin/sh\n{sys.executable} -m trnwatch.workloads.sim --host 3 "$@" | tee -a {sent}\n')
    monitor.chmod(0o755)
    receipt_path = tmp_path / "r.json"
    proc = subprocess.Popen(
        TRNWATCH
        + ["watch", "--neuron-monitor", str(monitor), "--period", "0.2", "--headless", "--receipt", str(receipt_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not (sent.exists() and sent.read_text().count("\n") >= 4):
        assert proc.poll() is None and time.monotonic() < deadline, "no reports from the stand-in neuron-monitor"
        time.sleep(0.05)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    r = load_receipt(receipt_path)
    assert r["exit_reason"] == reason
    assert r["evidence"] == "simulated"
    assert r["sources"][0]["reports"] >= 1
    assert len(r["chips"]) == 4 and all(c["samples"] == r["sources"][0]["reports"] for c in r["chips"])
    assert receipt_path.with_suffix(".md").exists()


def test_missing_neuron_monitor_is_a_clear_error(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path)}
    result = subprocess.run(TRNWATCH + ["watch", "--headless"], capture_output=True, text=True, env=env, timeout=60)
    if Path("/opt/aws/neuron/bin/neuron-monitor").exists():
        pytest.skip("a real neuron-monitor is installed here")
    assert result.returncode == 2
    assert "neuron-monitor not found" in result.stderr and "Traceback" not in result.stderr


def test_neuron_monitor_that_dies_is_reported_lost(tmp_path):
    monitor = _neuron_monitor_wrapper(tmp_path, "--scenario", "host-loss", "--host", "7", "--no-wait")
    receipt_path = tmp_path / "r.json"
    result = run(["watch", "--neuron-monitor", str(monitor), "--headless", "--receipt", str(receipt_path)])
    assert result.returncode == 1
    (source,) = load_receipt(receipt_path)["sources"]
    assert source["reports"] == 45 and "exited with status 1" in source["end_error"]


@pytest.mark.slow
def test_replay_reproduces_the_live_receipt(tmp_path):
    rec, live, replayed = tmp_path / "s.trnrec", tmp_path / "live.json", tmp_path / "replay.json"
    result = run(
        [
            "demo",
            "--headless",
            "--duration",
            "3",
            "--topology",
            "trn3-gen1-us",
            "--scenario",
            "ecc",
            "--record",
            str(rec),
            "--receipt",
            str(live),
        ]
    )
    assert result.returncode == 0, result.stderr
    result = run(["replay", str(rec), "--headless", "--receipt", str(replayed)])
    assert result.returncode == 0, result.stderr
    a, b = load_receipt(live), load_receipt(replayed)
    assert (a["evidence"], b["evidence"], b["recorded_evidence"]) == ("simulated", "replayed", "simulated")
    assert figures(a) == figures(b)
    assert len(b["chips"]) == 64 and b["ultraservers"][0]["chips"] == 64


def test_not_a_recording_is_a_clear_error(tmp_path):
    path = tmp_path / "x.trnrec"
    path.write_text("hello\n")
    result = run(["replay", str(path), "--headless"])
    assert result.returncode == 2 and "not a trnwatch recording" in result.stderr


def test_receipt_goes_to_the_default_folder_without_receipt_option(tmp_path):
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path)}
    result = subprocess.run(
        TRNWATCH + ["watch", "--stdin", "--headless"],
        input=R.line(R.report([])) + "\n",
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    (path,) = (tmp_path / "trnwatch" / "receipts").glob("trnwatch-*-live.json")
    assert f"receipt: {path}" in result.stdout


def test_schema_command_prints_the_receipt_schema():
    schema = json.loads(run(["schema", "receipt"]).stdout)
    assert schema["properties"]["schema"]["type"] == "string"
    assert "chips" in schema["required"]


def test_schema_command_prints_the_neuron_monitor_report_schema_with_its_bounds():
    defs = json.loads(run(["schema", "neuron-monitor"]).stdout)["$defs"]
    assert "neuron_runtime_data" in defs["Report"]["properties"]
    assert {"type": "number", "minimum": 0.0, "maximum": 100.0} in defs["CoreCounters"]["properties"][
        "neuroncore_utilization"
    ]["anyOf"]


def test_a_silent_pipe_writer_does_not_hold_the_exit(tmp_path):
    """The stdin reader must not keep the process alive after the receipt: with --duration the
    session ends even though the writer neither writes nor closes the pipe."""
    receipt = tmp_path / "r.json"
    proc = subprocess.Popen(
        TRNWATCH + ["watch", "--stdin", "--headless", "--duration", "1", "--receipt", str(receipt)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        proc.wait(timeout=20)  # the pipe stays open (and silent) for the whole wait
    finally:
        proc.kill()
        proc.stdin.close()
    assert proc.returncode == 5  # the silent writer delivered nothing: nothing was measured
    assert load_receipt(receipt)["exit_reason"] == "duration"


def test_ecc_scenario_totals_match_ground_truth_through_the_pipe(tmp_path):
    from trnwatch.workloads.sim.scenarios import ECC_UNCORRECTED_TICK, ecc_corrected_at

    ticks = 60
    sim = subprocess.run(
        SIM + ["--no-wait", "--count", str(ticks), "--host", "7", "--scenario", "ecc"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    receipt_path = tmp_path / "r.json"
    result = run(["watch", "--stdin", "--headless", "--receipt", str(receipt_path)], input=sim.stdout)
    assert result.returncode == 0, result.stderr
    chips = {c["device"]: c for c in load_receipt(receipt_path)["chips"]}
    assert chips[2]["ecc_reading"] == "per_period"
    assert chips[2]["ecc"]["mem_corrected"] == sum(ecc_corrected_at(t) for t in range(ticks))
    assert chips[2]["ecc"]["mem_uncorrected"] == (1 if ECC_UNCORRECTED_TICK < ticks else 0)
    assert all(chips[d]["ecc"]["mem_corrected"] == 0 for d in (0, 1, 3))
