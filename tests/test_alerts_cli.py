"""Alerts, --exit-on and --serve-metrics through the real command line.

Two designs, each honest about its clock:
- Replays of demo scenarios recorded at the simulator's own pace: every simulated host's report
  and every rank's job events, tick by tick, with the receive times a live demo at one tick a
  second has (tick t at T0 + t), written by trnwatch's recorder. A headless replay folds them as
  fast as it can and judges incidents by the data's clock, so "70 s of the healthy demo" is 70
  simulated seconds, and the hang's alert time is measured against the simulator's ground truth
  (the last step's time in the recording) without the machine's load in it.
- The live demo (`trnwatch demo --scenario hang`, a tick a second) for what needs the wall clock:
  a scrape of --serve-metrics during the hang, and --exit-on stalled ending it with status 4.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from trnwatch.cli import EXIT_ON_STATUS
from trnwatch.collectors.lines import Line
from trnwatch.collectors.recording_reader import Recording
from trnwatch.session import INCIDENT_PERIOD_S
from trnwatch.workloads.sim.job import fault_rank
from trnwatch.workloads.sim.scenarios import ECC_UNCORRECTED_TICK, HANG_START_TICK
from trnwatch.workloads.sim.topology import get_topology
from tests.recordings import write_scenario_recording
from tests.waiting import process_alive, wait_until

pytestmark = pytest.mark.slow

T0 = 1_800_000_000.0
FAULT_HOST = "sim-trn3-gen2-us-07"
FAULT_RANK = fault_rank(get_topology("trn3-gen2-us"))
JOB_SOURCE = "job-dir:/sim-run"


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    folder = tmp_path_factory.mktemp("scenarios")
    made = {}
    for scenario, ticks in (("hang", 72), ("healthy", 70), ("ecc", ECC_UNCORRECTED_TICK + 4)):
        path = folder / f"{scenario}.trnrec"
        made[scenario] = (path, write_scenario_recording(path, scenario, ticks))
    return made


def trnwatch(*args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trnwatch", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def alerts_in(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def test_replayed_hang_pages_late_at_the_threshold_then_stalled_once_and_nothing_more(recordings, tmp_path):
    recording, last_step_s = recordings["hang"]
    out = tmp_path / "alerts.jsonl"
    receipt = tmp_path / "r.json"
    result = trnwatch(
        "replay", str(recording), "--headless", "--receipt", str(receipt), "--alert-cmd", f"cat >> {out}; echo >> {out}"
    )
    assert result.returncode == 0, result.stderr
    alerts = alerts_in(out)
    assert [(a["change"], a["incident"]["label"]) for a in alerts] == [("opened", "LATE"), ("escalated", "STALLED")]
    site = alerts[0]["incident"]["site"]
    assert (site["rank"], site["host"], site["chip"]) == (FAULT_RANK, FAULT_HOST, 2)
    assert site["instance_id"].startswith("i-")
    assert all(a["evidence"] == "replayed" and a["text"].startswith("[REPLAY] ") for a in alerts)
    # Ground truth: no step after `last_step_s` (tick HANG_START_TICK - 1). LATE opens once the job
    # has been silent for its threshold, judged once a period of the data's clock.
    r = json.loads(receipt.read_text())
    late_s = r["job"]["thresholds"]["late_s"]
    assert last_step_s == T0 + HANG_START_TICK - 1 + 0.5
    opened_after_s = alerts[0]["incident"]["first"] - last_step_s
    assert late_s <= opened_after_s <= late_s + INCIDENT_PERIOD_S + 1.0, opened_after_s
    stalled = alerts[1]["incident"]["changes"][-1]["at"] - last_step_s
    assert r["job"]["thresholds"]["stall_s"] <= stalled <= r["job"]["thresholds"]["stall_s"] + INCIDENT_PERIOD_S + 1.0
    assert r["alerts"] == {**r["alerts"], "sent": 2, "failed": 0, "suppressed": 0, "destinations": ["command"]}
    assert [(i["kind"], i["label"], i["state"]) for i in r["incidents"]] == [("job", "STALLED", "open")]


def test_seventy_simulated_seconds_of_the_healthy_demo_send_no_alert(recordings, tmp_path):
    recording, _ = recordings["healthy"]
    out = tmp_path / "alerts.jsonl"
    receipt = tmp_path / "r.json"
    result = trnwatch("replay", str(recording), "--headless", "--receipt", str(receipt), "--alert-cmd", f"cat >> {out}")
    assert result.returncode == 0, result.stderr
    r = json.loads(receipt.read_text())
    assert r["window"]["seconds"] >= 69 and r["job"]["verdict"] in ("steady", "checkpointing")
    assert not out.exists() and r["incidents"] == [] and r["alerts"]["sent"] == 0


class _Sink(BaseHTTPRequestHandler):
    received: list = []

    def do_POST(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append((self.path, self.headers.get("Authorization"), json.loads(body)))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_webhook_reaches_a_local_sink_and_its_secrets_are_in_no_file_written(recordings, tmp_path):
    recording, _ = recordings["ecc"]
    server = HTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    path_secret, token = "T0TALLY-S3CRET-PATH", "tok-5ecret-h3ader"
    (tmp_path / "token").write_text(f"Bearer {token}\n")
    out = tmp_path / "out"
    out.mkdir()
    try:
        result = trnwatch(
            "replay",
            str(recording),
            "--headless",
            "--receipt",
            str(out / "r.json"),
            "--record",
            str(out / "again.trnrec"),
            "--alert-webhook",
            "env:HOOK_URL",
            "--alert-webhook-auth",
            f"file:{tmp_path / 'token'}",
            env={"HOOK_URL": f"http://127.0.0.1:{server.server_port}/services/{path_secret}"},
        )
    finally:
        server.shutdown()
        server.server_close()
    assert result.returncode == 0, result.stderr
    ecc = [doc for _, _, doc in _Sink.received if doc["incident"]["kind"] == "ecc-uncorrected"]
    assert len(ecc) == 1 and all(auth == f"Bearer {token}" for _, auth, _ in _Sink.received)
    assert all(p == f"/services/{path_secret}" for p, _, _ in _Sink.received)
    doc = ecc[0]
    assert doc["text"].startswith("[REPLAY] trnwatch CRITICAL ECC uncorrected ECC on sim-trn3-gen2-us-07/2 at ")
    r = json.loads((out / "r.json").read_text())
    (incident,) = [i for i in r["incidents"] if i["kind"] == "ecc-uncorrected"]
    assert (incident["site"]["host"], incident["site"]["chip"]) == (FAULT_HOST, 2)
    # Ground truth: host 7's report of tick ECC_UNCORRECTED_TICK arrives at T0 + tick + 1 + 0.07.
    arrived_s = T0 + ECC_UNCORRECTED_TICK + 1 + 0.07
    assert arrived_s <= incident["first"] <= arrived_s + INCIDENT_PERIOD_S + 1.0
    assert r["alerts"]["destinations"] == ["webhook http://127.0.0.1"]
    written = [p for p in out.rglob("*") if p.is_file()]
    assert {p.suffix for p in written} >= {".json", ".md", ".svg", ".trnrec"}
    for p in written:
        data = p.read_bytes()
        if p.suffix == ".trnrec":  # compressed frames: read back every entry as well
            recorded = Recording(p)
            data += "\n".join(item.text if isinstance(item, Line) else repr(item) for item in recorded.items()).encode()
            recorded.close()
        assert path_secret.encode() not in data and token.encode() not in data, p
    assert path_secret not in result.stdout + result.stderr and token not in result.stdout + result.stderr


def test_a_hanging_alert_command_delays_neither_judging_and_its_receipt_says_it_was_killed(recordings, tmp_path):
    """The LATE alert's command hangs; the replay still judges STALLED (--exit-on); the receipt is
    written once the bounded wait is over and the command killed, and says so: the LATE alert
    failed (killed), the STALLED one queued behind it was never tried (issue 36.12)."""
    recording, _ = recordings["hang"]
    pid_file = tmp_path / "pid"
    receipt = tmp_path / "r.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "trnwatch", "replay", str(recording), "--headless", "--receipt", str(receipt)]
        + ["--alert-cmd", f"echo $$ > {pid_file}; exec sleep 600", "--exit-on", "stalled"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("receipt: "):
                break
        r = json.loads(receipt.read_text())
        assert not process_alive(int(pid_file.read_text()))  # killed before the receipt was written
        assert r["exit_reason"] == "exit-on"
        assert {k: r["alerts"][k] for k in ("sent", "failed", "pending_at_exit")} == {
            "sent": 0,
            "failed": 1,
            "pending_at_exit": 1,
        }
        assert [(i["label"], i["state"]) for i in r["incidents"]] == [("STALLED", "open")]
        assert proc.wait(timeout=120) == EXIT_ON_STATUS
        assert "alerts: 0 sent, 1 failed, 1 not sent by the end" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_an_alert_that_goes_out_during_the_wait_at_the_end_is_sent_in_the_receipt(recordings, tmp_path):
    """Issue 36.12: the receipt was written before the wait for pending alerts, so an alert that
    took a second to go out (a slow webhook; here a command taking one) stayed 'pending' in it
    while stderr said it was sent. The session ends (--exit-on) as the ECC alert is queued."""
    recording, _ = recordings["ecc"]
    receipt = tmp_path / "r.json"
    result = trnwatch(
        *("replay", str(recording), "--headless", "--receipt", str(receipt)),
        *("--alert-cmd", "cat > /dev/null; sleep 1", "--exit-on", "critical"),
    )
    assert result.returncode == EXIT_ON_STATUS, result.stderr
    r = json.loads(receipt.read_text())
    assert r["alerts"]["sent"] >= 1 and (r["alerts"]["failed"], r["alerts"]["pending_at_exit"]) == (0, 0)
    assert "not sent by the end" not in result.stderr


def test_a_job_log_that_echoes_the_webhook_secrets_leaves_them_in_no_output(tmp_path):
    """Issue 36.1: a rank's error echoes the webhook URL and its Authorization value; before,
    they landed in the receipt JSON (6 times), its Markdown (3) and the recording."""
    server = HTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/services/T0AAA/B0BBB/xoxSECRETpath"
    log = tmp_path / "job.log"
    fixture = (Path(__file__).parent / "fixtures" / "logs" / "torchrun_exception.log").read_text()
    echo = f"POST {url} failed, sent Authorization: Bearer tok-5ecret-h3ader"
    log.write_text(fixture.replace("injected failure on rank 1", echo))
    (tmp_path / "auth").write_text("Bearer tok-5ecret-h3ader\n")
    out = tmp_path / "out"
    out.mkdir()
    try:
        result = trnwatch(
            *("watch", "--headless", "--duration", "3", "--job-log", str(log), "--receipt", str(out / "r.json")),
            *("--record", str(out / "rec.trnrec"), "--alert-webhook", "env:HOOK_URL"),
            *("--alert-webhook-auth", f"file:{tmp_path / 'auth'}"),
            env={"HOOK_URL": url},
        )
    finally:
        server.shutdown()
        server.server_close()
    assert result.returncode == 0, result.stderr
    r = json.loads((out / "r.json").read_text())
    assert "<redacted>" in json.dumps(r) and r["alerts"]["sent"] >= 1  # the echo is there, redacted
    written = [p for p in out.rglob("*") if p.is_file()]
    assert {p.suffix for p in written} >= {".json", ".md", ".svg", ".trnrec"}
    for p in written:
        data = p.read_bytes()
        if p.suffix == ".trnrec":
            recorded = Recording(p)
            data += "\n".join(item.text if isinstance(item, Line) else repr(item) for item in recorded.items()).encode()
            recorded.close()
        assert b"SECRET" not in data and b"5ecret" not in data, p
    assert "SECRET" not in result.stdout + result.stderr and "5ecret" not in result.stdout + result.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_live_demo_hang_scrape_shows_verdict_and_suspect_then_exit_on_stalled(tmp_path):
    """The live demo at its own pace (a tick a second). On a starved machine the session can fall
    behind at start-up and see the job late or ranks silent before the hang (the same findings the
    screen would show), so this test asserts what the hang must give, not the exact sequence: that
    is the replayed test's, whose clock is the data's."""
    port = _free_port()
    out = tmp_path / "alerts.jsonl"
    receipt = tmp_path / "r.json"
    command = [sys.executable, "-m", "trnwatch", "demo", "--scenario", "hang", "--headless"]
    command += ["--receipt", str(receipt), "--job-dir", str(tmp_path / "job"), "--stall-after", "12"]
    command += ["--serve-metrics", f"127.0.0.1:{port}", "--exit-on", "stalled"]
    command += ["--alert-cmd", f"cat >> {out}; echo >> {out}"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    suspect = f'trnwatch_job_suspect{{rank="{FAULT_RANK}",host="{FAULT_HOST}",chip="2",region="dataloader"}} 1'
    incident = f'kind="job",label="LATE",severity="critical",rank="{FAULT_RANK}",host="{FAULT_HOST}"'
    scraped: list[str] = []

    def scrape_shows_the_hang() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
                scraped.append(response.read().decode())
        except OSError:
            return proc.poll() is not None
        text = scraped[-1]
        late = 'trnwatch_job_verdict{verdict="late"} 1' in text and suspect in text and incident in text
        return late or proc.poll() is not None

    try:
        wait_until(scrape_shows_the_hang, "a scrape during the hang naming the suspect", 300)
        assert proc.wait(timeout=300) == EXIT_ON_STATUS, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)
    text = scraped[-1]
    assert 'trnwatch_job_verdict{verdict="late"} 1' in text and text.endswith("# EOF\n")
    assert suspect in text and incident in text and 'trnwatch_evidence{evidence="simulated"} 1' in text
    r = json.loads(receipt.read_text())
    assert r["exit_reason"] == "exit-on"
    job = [i for i in r["incidents"] if i["kind"] == "job"][-1]
    assert (job["label"], job["site"]["rank"], job["site"]["host"], job["site"]["chip"]) == (
        "STALLED",
        FAULT_RANK,
        FAULT_HOST,
        2,
    )
    alerts = alerts_in(out)
    last = alerts[-1]
    assert (last["change"], last["incident"]["label"], last["incident"]["site"]["rank"]) == (
        "escalated",
        "STALLED",
        FAULT_RANK,
    )
    assert all(a["text"].startswith("[SIMULATED] ") and a["evidence"] == "simulated" for a in alerts)
