"""`trnwatch export`, `trnwatch.api.read` and `trnwatch runs` against the simulator's ground truth.

The recordings are the demo scenarios' own lines at the demo's pace (tests/recordings.py
write_scenario_recording: 36 hosts, 144 chips, 576 ranks), so every figure exported is checked
against workloads/sim/ground_truth.py and scenarios.py, never against the export's own code, and
read back by each format's real reader: the csv module, json, pyarrow, and Prometheus's own
promtool (create-blocks-from openmetrics, then a dump of the block by a series selector).
"""

import csv
import io
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from trnwatch.collectors.recording import RecordingError
from trnwatch.session import INCIDENT_PERIOD_S
from trnwatch.workloads.sim import ground_truth
from trnwatch.workloads.sim.fleet import fleet_hosts
from trnwatch.workloads.sim.job import fault_rank
from trnwatch.workloads.sim.scenarios import (
    COMPILE_TICKS,
    HANG_START_TICK,
    LEAK_BYTES_PER_TICK,
    LEAK_START_TICK,
    fault_site,
)
from trnwatch.workloads.sim.topology import get_topology
from tests.recordings import SCENARIO_T0 as T0
from tests.recordings import write_scenario_recording

TOPOLOGY = get_topology("trn3-gen2-us")
FAULT_HOST, FAULT_CHIP = fault_site(TOPOLOGY)
LEAK_TICKS = 40
HANG_TICKS = 45


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("export")
    made = {}
    for scenario, ticks in (("hbm-leak", LEAK_TICKS), ("hang", HANG_TICKS)):
        path = folder / f"{scenario}.trnrec"
        made[scenario] = (path, write_scenario_recording(path, scenario, ticks))
    return made


def trnwatch(*args: str, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trnwatch", *args], capture_output=True, text=True, timeout=timeout, **kw
    )


def hosts_by_name(scenario: str) -> dict:
    return {h.instance_name: h for h in fleet_hosts(TOPOLOGY, 0, scenario, 1.0)}


def tick_of(received_s: float, host_index: int) -> int:
    """The tick a report was received for: tick t's reports arrive at T0 + t + 1 + host/100."""
    tick = round(received_s - T0 - 1 - host_index / 100)
    assert abs(received_s - (T0 + tick + 1 + host_index / 100)) < 1e-6
    return tick


def utc(text: str) -> float:
    assert text.endswith("Z")
    return datetime.fromisoformat(text[:-1] + "+00:00").timestamp()


def test_hbm_leak_chip_grows_64_mib_per_report_from_tick_20_and_no_other_chip_does(recorded, tmp_path):
    recording, _ = recorded["hbm-leak"]
    out = tmp_path / "chips.csv"
    result = trnwatch("export", str(recording), "--scope", "chip", "--format", "csv", "-o", str(out))
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    hosts = hosts_by_name("hbm-leak")
    assert len(rows) == LEAK_TICKS * len(hosts) * TOPOLOGY.chips_per_host
    series: dict[tuple[int, int], dict[int, int]] = {}
    for row in rows:
        host = hosts[row["instance_name"]]
        tick, chip = tick_of(utc(row["time"]), host.host_index), int(row["chip"])
        hbm = int(row["hbm_used_bytes"])
        assert hbm == ground_truth.chip_hbm_bytes(TOPOLOGY, "hbm-leak", 0, host.host_index, chip, tick)
        util = float(row["util_pct"])
        truth = ground_truth.chip_utilization_pct(TOPOLOGY, "hbm-leak", 0, host.host_index, chip, tick)
        assert util == pytest.approx(truth, rel=1e-12, abs=1e-12)
        if tick < COMPILE_TICKS:  # no core in use yet, and no FLOP/s ever reported: unknown, not 0
            assert row["flops_per_s"] == "" and row["mfu_pct"] == ""
        else:
            assert float(row["mfu_pct"]) == pytest.approx(100 * float(row["flops_per_s"]) / 671e12)
        series.setdefault((host.host_index, chip), {})[tick] = hbm
    for (host_index, chip), by_tick in series.items():
        growth = {t: by_tick[t] - by_tick[t - 1] for t in range(LEAK_START_TICK + 1, LEAK_TICKS)}
        if (host_index, chip) == (FAULT_HOST, FAULT_CHIP):
            assert set(growth.values()) == {LEAK_BYTES_PER_TICK}
            assert by_tick[LEAK_START_TICK] > by_tick[LEAK_START_TICK - 1]  # the first growth is at tick 20
        else:
            assert set(growth.values()) == {0}


def test_parquet_and_api_hold_the_same_typed_rows_as_csv(recorded, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    from trnwatch import api as trnwatch_api

    recording, _ = recorded["hbm-leak"]
    out = tmp_path / "chips.parquet"
    result = trnwatch("export", str(recording), "--format", "parquet", "-o", str(out), "--from", "30")
    assert result.returncode == 0, result.stderr
    table = pq.read_table(out)
    assert str(table.schema.field("time").type) == "timestamp[us, tz=UTC]"
    assert str(table.schema.field("hbm_used_bytes").type) == "int64"
    api = trnwatch_api.read(recording, scope="chip", start=30)
    assert api.equals(table)
    hosts = hosts_by_name("hbm-leak")
    fault_name = next(n for n, h in hosts.items() if h.host_index == FAULT_HOST)
    rows = [r for r in table.to_pylist() if r["instance_name"] == fault_name and r["chip"] == FAULT_CHIP]
    ticks = [tick_of(r["time"].timestamp(), FAULT_HOST) for r in rows]
    # --from 30: seconds from the recording's start (T0, its sources' open), so reports of tick 29 on
    assert ticks == list(range(29, LEAK_TICKS))
    assert all(r["flops_per_s"] > 0 for r in rows)  # steady: the cores' FLOP/s summed
    for r, tick in zip(rows, ticks, strict=True):
        assert r["hbm_used_bytes"] == ground_truth.chip_hbm_bytes(TOPOLOGY, "hbm-leak", 0, FAULT_HOST, FAULT_CHIP, tick)
    cores = trnwatch_api.read(recording, scope="core", start=-0.5)  # the last tick's reports
    assert cores.num_rows == len(hosts) * TOPOLOGY.chips_per_host * TOPOLOGY.cores_per_chip
    with pytest.raises(ValueError, match="unknown scope"):
        trnwatch_api.read(recording, scope="chips")
    with pytest.raises(RecordingError, match="outside the recording"):
        trnwatch_api.read(recording, start=LEAK_TICKS + 100)


def test_jsonl_rows_equal_csv_rows_with_nulls_as_null(recorded, tmp_path):
    recording, _ = recorded["hbm-leak"]
    as_csv = trnwatch("export", str(recording), "--scope", "host", "--to", "10")
    as_jsonl = trnwatch("export", str(recording), "--scope", "host", "--to", "10", "--format", "jsonl", "-o", "-")
    assert as_csv.returncode == 0 and as_jsonl.returncode == 0, as_csv.stderr + as_jsonl.stderr
    csv_rows = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    json_rows = [json.loads(line) for line in as_jsonl.stdout.splitlines()]
    assert len(csv_rows) == len(json_rows) == 36 * 9  # reports of ticks 0-8 arrive before 10 s
    for c, j in zip(csv_rows, json_rows, strict=True):
        assert c.keys() == j.keys()
        assert all((c[k] == "") == (j[k] is None) for k in c)
        assert j["efa_tx_bytes_per_s"] is None  # no sysfs in this recording: unknown, not 0
        assert j["source_state"] == "connected" and j["memory_total_bytes"] > 0


def test_hang_trace_shows_rank_120_in_dataloader_and_the_others_in_all_reduce_from_tick_30(recorded, tmp_path):
    recording, last_step_s = recorded["hang"]
    out = tmp_path / "hang.json"
    result = trnwatch("export", str(recording), "--format", "trace", "-o", str(out))
    assert result.returncode == 0, result.stderr
    events = json.loads(out.read_text())["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert len(processes) == 36 + 1 and len(threads) == 576 * 2
    hang_us = (T0 + HANG_START_TICK + 0.5) * 1e6  # tick 30's heartbeat: region since its own time
    last_region: dict[int, dict] = {}
    for e in events:
        if e["ph"] == "X" and e["cat"] == "region":
            rank = int(threads[(e["pid"], e["tid"])].split()[1])
            if rank not in last_region or e["ts"] > last_region[rank]["ts"]:
                last_region[rank] = e
    suspect = fault_rank(TOPOLOGY)
    assert suspect == 120 and len(last_region) == 576
    for rank, e in last_region.items():
        assert e["name"] == ("dataloader" if rank == suspect else "collective:all_reduce"), rank
        assert abs(e["ts"] - hang_us) <= 1 and e["ts"] + e["dur"] >= (T0 + HANG_TICKS) * 1e6
    assert processes[last_region[suspect]["pid"]].startswith("sim-trn3-gen2-us-07")
    steps = [e for e in events if e["ph"] == "X" and e["cat"] == "step"]
    assert len(steps) == 576 * 20 and max(e["ts"] + e["dur"] for e in steps) == round(last_step_s * 1e6)
    counters = {(e["pid"], e["name"]) for e in events if e["ph"] == "C"}
    assert len(counters) == 144 * 2
    incidents = [e for e in events if e["ph"] == "i" and e.get("cat") == "incident"]
    assert [i["name"] for i in incidents] == ["LATE: job late"]
    assert incidents[0]["args"]["site"]["rank"] == suspect and processes[incidents[0]["pid"]].startswith(
        "sim-trn3-gen2-us-07"
    )


def test_incidents_and_job_export_with_the_receipts_sites_verdict_and_times(recorded, tmp_path):
    recording, last_step_s = recorded["hang"]
    receipt = tmp_path / "r.json"
    replayed = trnwatch("replay", str(recording), "--headless", "--receipt", str(receipt))
    assert replayed.returncode == 0, replayed.stderr
    r = json.loads(receipt.read_text())
    exported = trnwatch("export", str(recording), "--scope", "incidents", "--format", "jsonl")
    assert exported.returncode == 0, exported.stderr
    rows = [json.loads(line) for line in exported.stdout.splitlines()]
    assert len(rows) == len(r["incidents"]) == 1
    for row, incident in zip(rows, r["incidents"], strict=True):
        for key in ("id", "kind", "label", "severity", "state"):
            assert row[key] == incident[key]
        for key, value in incident["site"].items():
            assert row[key] == value, key
        assert row["evidence"] == incident["evidence"]["text"] and row["closed"] is None
        # Ground truth: LATE once the job has been silent for its threshold after the last step,
        # judged once a period of the data's clock; the replay judges after a fold slice, at most
        # a period (and a slice's data) later than the export, which judges after every line.
        opened = utc(row["time"])
        late_s = r["job"]["thresholds"]["late_s"]
        assert late_s <= opened - last_step_s <= late_s + INCIDENT_PERIOD_S
        assert opened <= incident["first"] <= opened + 2 * INCIDENT_PERIOD_S
    job = trnwatch("export", str(recording), "--scope", "job", "--format", "jsonl")
    steps = [json.loads(line) for line in job.stdout.splitlines()]
    assert [s["step"] for s in steps if s["step_time_s"] is not None] == list(range(20))
    end = steps[-1]
    assert end["verdict"] == r["job"]["verdict"] == "late"
    assert end["tokens_per_s"] == r["job"]["throughput"]["tokens_per_s"]
    assert (end["suspect_rank"], end["suspect_chip"], end["suspect_region"]) == (120, 2, "dataloader")
    assert [s["verdict"] for s in steps].count("late") == 2  # the change, then the window's end


def _promtool_dump(block: Path, selector: str) -> list[tuple[dict, float, int]]:
    (block / "wal").mkdir(exist_ok=True)  # dump opens the database, WAL and all
    dumped = subprocess.run(
        ["promtool", "tsdb", "dump", f"--match={selector}", str(block)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    samples = []
    for line in dumped.stdout.splitlines():
        labels, value, ms = line.rsplit(" ", 2)
        parsed = dict(part.split("=", 1) for part in labels.strip("{}").split(", "))
        samples.append(({k: v.strip('"') for k, v in parsed.items()}, float(value), int(ms)))
    return samples


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (apt prometheus) not installed")
def test_openmetrics_backfills_into_a_prometheus_block_with_the_exported_values(recorded, tmp_path):
    recording, _ = recorded["hbm-leak"]
    out = tmp_path / "chips.om"
    assert trnwatch("export", str(recording), "--format", "openmetrics", "-o", str(out)).returncode == 0
    block = tmp_path / "tsdb"
    made = subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(out), str(block)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0, made.stderr
    fault = f'trnwatch_chip_hbm_used_bytes{{instance_name="sim-trn3-gen2-us-07",chip="{FAULT_CHIP}"}}'
    samples = _promtool_dump(block, fault)
    assert len(samples) == LEAK_TICKS
    for labels, value, ms in samples:
        tick = tick_of(ms / 1000, FAULT_HOST)
        assert value == ground_truth.chip_hbm_bytes(TOPOLOGY, "hbm-leak", 0, FAULT_HOST, FAULT_CHIP, tick)
        assert labels["host"].startswith("i-") and labels["ultraserver"]
    flops = _promtool_dump(block, fault.replace("hbm_used_bytes", "flops_per_s"))
    # no core in use and no FLOP/s reported before the compile ends: no samples there, never zeros
    assert [tick_of(ms / 1000, FAULT_HOST) for _, _, ms in flops] == list(range(COMPILE_TICKS, LEAK_TICKS))
    assert all(v > 0 for _, v, _ in flops)
    job = tmp_path / "job.om"
    assert (
        trnwatch("export", str(recording), "--scope", "job", "--format", "openmetrics", "-o", str(job)).returncode == 0
    )
    job_block = tmp_path / "job-tsdb"
    subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(job), str(job_block)], check=True, timeout=300
    )
    steady = _promtool_dump(job_block, 'trnwatch_job_verdict{verdict="steady"}')
    assert {v for _, v, _ in steady} == {0.0, 1.0}
    tokens = _promtool_dump(job_block, "trnwatch_tokens_per_second")  # --serve-metrics' name
    assert tokens and {v for _, v, _ in tokens} == {4194304.0}


def _no_output_left(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_damaged_foreign_and_out_of_span_recordings_are_refused_and_nothing_is_written(recorded, tmp_path):
    recording, _ = recorded["hbm-leak"]
    damaged = tmp_path / "damaged.trnrec"
    data = bytearray(recording.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    shutil.copy(f"{recording}.idx", f"{damaged}.idx")
    outdir = tmp_path / "out"
    outdir.mkdir()
    result = trnwatch("export", str(damaged), "-o", str(outdir / "x.csv"))
    assert result.returncode == 2 and "damaged" in result.stderr and "--skip-damaged" in result.stderr
    assert _no_output_left(outdir) == []
    skipped = trnwatch("export", str(damaged), "-o", str(outdir / "x.csv"), "--skip-damaged")
    assert skipped.returncode == 0 and "corrupt" in skipped.stderr
    assert 0 < len((outdir / "x.csv").read_text().splitlines()) - 1 < LEAK_TICKS * 144
    (outdir / "x.csv").unlink()
    foreign = tmp_path / "notes.txt"
    foreign.write_text("not a recording\n")
    result = trnwatch("export", str(foreign), "-o", str(outdir / "y.csv"))
    assert result.returncode == 2 and "is not a trnwatch recording" in result.stderr
    result = trnwatch("export", str(recording), "--from", "3600", "-o", str(outdir / "z.csv"))
    assert result.returncode == 2 and "outside the recording" in result.stderr and "spans" in result.stderr
    assert _no_output_left(outdir) == []
    assert "Traceback" not in result.stderr


def test_an_unwritable_or_failing_output_leaves_nothing_under_its_name(recorded, tmp_path):
    recording, _ = recorded["hbm-leak"]
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = trnwatch("export", str(recording), "-o", str(blocker / "x.csv"))
    assert result.returncode == 1 and "is a file, not a folder" in result.stderr
    existing = tmp_path / "existing.csv"
    existing.write_text("keep me")
    result = trnwatch("export", str(recording), "-o", str(existing))
    assert result.returncode == 1 and "already exists" in result.stderr and existing.read_text() == "keep me"

    def small_files():  # a file-size limit: the write fails with EFBIG midway, as a full disk would
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))

    outdir = tmp_path / "out"
    outdir.mkdir()
    for fmt in ("csv", "jsonl", "parquet", "openmetrics", "trace"):
        name = outdir / f"x.{fmt}"
        result = trnwatch("export", str(recording), "--format", fmt, "-o", str(name), preexec_fn=small_files)
        assert result.returncode == 1, (fmt, result.stderr)
        assert "cannot write" in result.stderr and "Traceback" not in result.stderr, result.stderr
        assert _no_output_left(outdir) == [], fmt


def test_without_pyarrow_parquet_and_the_api_say_what_to_install(recorded, tmp_path):
    recording, _ = recorded["hbm-leak"]
    blocked = "import sys; sys.modules['pyarrow'] = None; "
    code = (
        blocked
        + f"from trnwatch.cli import main; sys.exit(main(['export', {str(recording)!r}, '--format', 'parquet', '-o', {str(tmp_path / 'x.parquet')!r}]))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "pip install 'trnwatch[data]'" in result.stderr
    assert not (tmp_path / "x.parquet").exists()
    code = blocked + f"import trnwatch.api; trnwatch.api.read({str(recording)!r})"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "MissingDependency" in result.stderr and "trnwatch[data]" in result.stderr
    code = blocked + f"from trnwatch.cli import main; sys.exit(main(['export', {str(recording)!r}, '--to', '2']))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.startswith("time,host,"), result.stderr  # CSV needs no pyarrow


def test_runs_lists_receipts_newest_first_and_names_files_that_are_not_receipts(recorded, tmp_path):
    recording, _ = recorded["hang"]
    folder = tmp_path / "receipts"
    folder.mkdir()
    for name, window in (("older.json", ["--to", "20"]), ("newer.json", [])):
        made = trnwatch("replay", str(recording), "--headless", "--receipt", str(folder / name), *window)
        assert made.returncode == 0, made.stderr
    (folder / "other.json").write_text('{"not": "a receipt"}')
    (folder / "cut.json").write_text((folder / "newer.json").read_text()[:500])
    os.chmod(folder / "cut.json", 0o600)
    listed = trnwatch("runs", str(folder), "--json")
    assert listed.returncode == 0, listed.stderr
    runs = json.loads(listed.stdout)
    assert [r["file"] for r in runs] == ["newer.json", "older.json", "cut.json", "other.json"]
    newer = json.loads((folder / "newer.json").read_text())
    assert runs[0]["verdict"] == newer["job"]["verdict"] == "late"
    assert runs[0]["culprit"] == "rank 120 sim-trn3-gen2-us-07/2 dataloader"
    assert (runs[0]["chips"], runs[0]["hosts"], runs[0]["incidents"]) == (144, 36, 1)
    assert runs[0]["goodput_pct"] == newer["goodput"]["goodput_pct"]
    assert runs[2]["problem"].startswith("unreadable") and "not a receipt" in runs[3]["problem"]
    table = trnwatch("runs", str(folder))
    assert table.returncode == 0
    lines = table.stdout.splitlines()
    assert lines[0].split()[:3] == ["when", "length", "evidence"] and "newer.json" in lines[1]
    assert lines[-2].startswith("cut.json: unreadable") and lines[-1].startswith("other.json: unreadable")
