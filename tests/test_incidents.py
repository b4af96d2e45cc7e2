"""Incidents (ledger/incidents.py): every finding kept for the session with its site and times.

The scenario tests fold the demo's own streams (simulated reports and job telemetry through the
real decoders) tick by tick at fixed receive times and judge the incidents after every tick, as
the session does once a period; the simulator's ground truth (workloads/sim/scenarios.py) says
where and when each fault starts.
"""

import functools
import json

import pytest

from trnwatch.collectors.lines import Line
from trnwatch.ledger.findings import Finding, Site
from trnwatch.ledger.incidents import CLEAR_AFTER_S, IncidentLog, incident_words
from trnwatch.ledger.ledger import Ledger
from trnwatch.ledger.receipt import build_receipt
from trnwatch.ledger.receipt_markdown import render_markdown
from trnwatch.ledger.timeline_svg import render_timeline_svg
from trnwatch.workloads.sim.fleet import fleet_hosts
from trnwatch.workloads.sim.job import rank_events
from trnwatch.workloads.sim.scenarios import ECC_START_TICK, ECC_UNCORRECTED_TICK, HOST_LOSS_TICK, LEAK_START_TICK
from trnwatch.workloads.sim.source import host_source_id
from tests.tui_fleet import FAULT_SITE, SEED, now_at, received_s

FAULT_CHIP = 2


@functools.cache
def _hosts(scenario: str):
    from trnwatch.workloads.sim.topology import get_topology

    return fleet_hosts(get_topology("trn3-gen2-us"), SEED, scenario, 1.0)


def fold_tick(ledger: Ledger, scenario: str, tick: int, with_job: bool = True) -> None:
    """One tick of the demo scenario: every rank's job events, then every live host's report."""
    hosts = _hosts(scenario)
    if with_job:
        for host in hosts:
            for chip in range(host.topology.chips_per_host):
                for core in range(host.topology.cores_per_chip):
                    for event in rank_events(host, chip, core, tick, now_at(tick) - 0.5):
                        ledger.ingest(Line("job-dir:/run", "job", event["ts"], json.dumps(event)))
    for host in hosts:
        if host.alive(tick):
            line = Line(
                host_source_id(host), "neuron-monitor", received_s(tick, host.host_index), host.report_line(tick)
            )
            ledger.ingest(line)


def judged_scenario(scenario: str, last_tick: int, with_job: bool = True) -> tuple[Ledger, IncidentLog]:
    """The demo scenario folded tick by tick, its incidents judged at each tick's screen time, as
    the session judges them."""
    ledger = Ledger("simulated")
    log = IncidentLog()
    for tick in range(last_tick + 1):
        fold_tick(ledger, scenario, tick, with_job)
        now_s = now_at(tick)
        diagnosis = ledger.read(now_s).diagnosis
        log.update(list(ledger.read(now_s).findings), now_s, diagnosis.verdict if diagnosis else None)
    return ledger, log


def by_kind(log: IncidentLog, kind: str):
    return [i for i in log.incidents() if i.kind == kind]


@pytest.mark.slow  # the demo fleet folded tick by tick: a minute on a busy machine
def test_ecc_scenario_opens_an_uncorrected_incident_at_the_fault_tick_and_a_corrected_burst_before():
    ledger, log = judged_scenario("ecc", ECC_UNCORRECTED_TICK + 5)
    (ecc,) = by_kind(log, "ecc-uncorrected")
    assert (ecc.site.host, ecc.site.chip, ecc.severity, ecc.state) == (FAULT_SITE, FAULT_CHIP, "critical", "open")
    assert ecc.site.instance_id in ledger.hosts  # joins the receipt's chip rows
    assert ecc.first == now_at(ECC_UNCORRECTED_TICK)  # judged at the first tick that carried it
    (burst,) = by_kind(log, "ecc-corrected-burst")
    assert (burst.site.host, burst.site.chip, burst.severity) == (FAULT_SITE, FAULT_CHIP, "warning")
    # 2, 1, 3 corrected events a tick from ECC_START_TICK: the 10th within 10 s arrives 5 ticks in.
    assert now_at(ECC_START_TICK) < burst.first <= now_at(ECC_START_TICK + 5)
    receipt = build_receipt(ledger, "eof", written_at_s=now_at(ECC_UNCORRECTED_TICK + 5), incidents=log)
    markdown = render_markdown(receipt)
    assert f"uncorrected ECC on {FAULT_SITE}/2 at " in markdown.split("## Incidents")[0]  # the headline
    assert f"<title>uncorrected ECC on {FAULT_SITE}/2 at " in render_timeline_svg(receipt)  # its span
    assert json.loads(receipt.to_json())["incidents"][0]["site"]["chip"] == FAULT_CHIP


@pytest.mark.slow  # the demo fleet folded tick by tick: a minute on a busy machine
def test_hbm_leak_scenario_opens_one_leak_incident_on_the_fault_chip():
    _, log = judged_scenario("hbm-leak", LEAK_START_TICK + 40)
    (leak,) = by_kind(log, "hbm-leak")
    assert (leak.site.host, leak.site.chip, leak.severity) == (FAULT_SITE, FAULT_CHIP, "error")
    assert leak.first > now_at(LEAK_START_TICK)  # never before the leak starts
    assert leak.evidence.hbm_rate_bytes_per_s is not None and leak.evidence.hbm_rate_bytes_per_s > 0
    assert [i.kind for i in log.incidents() if i.site.host != FAULT_SITE] == []


@pytest.mark.slow  # the demo fleet folded tick by tick: a minute on a busy machine
def test_host_loss_scenario_opens_the_dead_job_and_the_lost_host_at_the_fault_site():
    ledger, log = judged_scenario("host-loss", HOST_LOSS_TICK + 40)
    (lost,) = by_kind(log, "host-lost")
    assert (lost.site.host, lost.severity, lost.state) == (FAULT_SITE, "error", "open")
    assert lost.first > now_at(HOST_LOSS_TICK)
    (job,) = by_kind(log, "job")
    assert job.site.host == FAULT_SITE and job.first > now_at(HOST_LOSS_TICK - 1)
    assert "DEAD" in [c.label for c in job.changes]
    stale = by_kind(log, "host-stale")
    assert [(i.site.host, i.state) for i in stale] == [(FAULT_SITE, "cleared")]  # stale, then lost


@pytest.mark.slow  # the demo fleet folded tick by tick: a minute on a busy machine
def test_a_hang_is_one_job_incident_late_then_escalated_to_stalled():
    _, log = judged_scenario("hang", 70, with_job=True)
    (job,) = by_kind(log, "job")
    assert [(c.change, c.label) for c in job.changes] == [("opened", "LATE"), ("escalated", "STALLED")]
    assert (job.site.rank, job.site.host, job.site.chip) == (120, FAULT_SITE, FAULT_CHIP)


@pytest.mark.slow  # the demo fleet folded tick by tick: a minute on a busy machine
def test_healthy_scenario_has_no_incident():
    _, log = judged_scenario("healthy", 70)
    assert log.incidents() == []


@pytest.mark.slow  # the demo fleet folded tick by tick: a minute on a busy machine
def test_device_only_outlier_without_job_telemetry():
    """The straggler scenario without its job: the straggler's chip stands far from its peers."""
    _, log = judged_scenario("straggler", 50, with_job=False)
    outliers = by_kind(log, "util-outlier")
    assert [(i.site.host, i.site.chip, i.severity) for i in outliers] == [(FAULT_SITE, FAULT_CHIP, "warning")]


def _finding(label: str, severity="critical", kind="job", scope="job", host="h1") -> Finding:
    return Finding(severity, kind, scope, label, Site(host=host, host_id=host, chip=0), f"{label} story", "")


def test_held_through_a_pause_cleared_after_the_hold_and_flicker_is_one_incident():
    log = IncidentLog()
    slow = _finding("SLOW", "error")
    log.update([slow], 100.0, "slow")
    log.update([], 101.0, "checkpointing")
    log.update([], 100.0 + 3 * CLEAR_AFTER_S, "checkpointing")  # a long checkpoint: still held
    assert [f.label for f in log.open_findings()] == ["SLOW"]
    log.update([slow], 100.0 + 3 * CLEAR_AFTER_S + 1, "slow")
    changed = log.update([], 100.0 + 5 * CLEAR_AFTER_S, "steady")
    assert [(i.state, i.changes[-1].change) for i in changed] == [("cleared", "cleared")]
    assert len(log.incidents()) == 1 and log.open_findings() == []


def test_the_log_is_bounded_and_counts_what_it_dropped():
    log = IncidentLog(max_incidents=2, clear_after_s=1.0)
    log.update([_finding("LOST", "error", "host-lost", "host", host=f"h{i}") for i in range(3)], 1.0)
    assert (len(log.incidents()), log.dropped) == (2, 1)  # both kept ones open: the new one is dropped
    log.update([], 5.0)  # both clear
    log.update([_finding("LOST", "error", "host-lost", "host", host="h9")], 6.0)
    assert [i.site.host for i in log.incidents()] == ["h1", "h9"] and log.dropped == 2


def test_incident_words_name_the_site_and_time():
    log = IncidentLog()
    log.update([_finding("ECC", kind="ecc-uncorrected", scope="chip", host="sim-us-07")], 1_800_000_000.0)
    assert incident_words(log.incidents()[0]) == "uncorrected ECC on sim-us-07/0 at 08:00:00"


@pytest.mark.slow  # the demo fleet folded tick by tick: a minute on a busy machine
def test_the_stragglers_slow_does_not_blink_off_during_the_checkpoint():
    """The straggler scenario checkpoints at tick 60 (3 ticks): the job's verdict is then
    `checkpointing` and its SLOW finding is gone, but the incident stays open, one incident."""
    from trnwatch.workloads.sim.scenarios import CHECKPOINT_EVERY_TICKS

    ledger, log = judged_scenario("straggler", CHECKPOINT_EVERY_TICKS - 1)
    (slow,) = by_kind(log, "job")
    assert (slow.label, slow.site.rank, slow.site.host, slow.site.chip) == ("SLOW", 120, FAULT_SITE, FAULT_CHIP)
    verdicts = []
    for tick in range(CHECKPOINT_EVERY_TICKS, CHECKPOINT_EVERY_TICKS + 8):
        fold_tick(ledger, "straggler", tick)
        now_s = now_at(tick)
        findings = list(ledger.read(now_s).findings)
        verdict = ledger.read(now_s).diagnosis.verdict
        verdicts.append((verdict, [f.label for f in findings if f.kind == "job"]))
        log.update(findings, now_s, verdict)
        assert [f.label for f in log.open_findings() if f.kind == "job"] == ["SLOW"], verdicts
    assert ("checkpointing", []) in verdicts  # the finding itself did go away meanwhile
    assert [(c.change, c.label) for c in by_kind(log, "job")[0].changes] == [("opened", "SLOW")]


def _capture(rank: int, started: float):
    from trnwatch.collectors.stack_records import StackCapture

    return StackCapture(
        rank=rank, host="trn-00", pid=100 + rank, native=False, trigger="stall", incident=None, contrast=rank != 1,
        via="local", started=started, seconds=0.2, outcome="ok", message="ok: 1 thread", threads=[], text="",
        text_truncated=False, dump_files=[],
    )  # fmt: skip


def _job_incident(id_: int, first: float, cleared: float | None):
    from trnwatch.ledger.incidents import Incident, IncidentEvidence, IncidentSite

    return Incident(
        id=id_, kind="job", title="job stalled", label="STALLED", severity="critical", worst_severity="critical",
        state="open" if cleared is None else "cleared", first=first, last=cleared or first + 100, cleared=cleared,
        site=IncidentSite(rank=1), evidence=IncidentEvidence(text="STALLED rank 1", what="stalled"), changes=[],
    )  # fmt: skip


def test_stacks_are_the_evidence_of_the_job_incident_open_when_they_were_taken():
    from trnwatch.ledger.incidents import with_stacks

    earlier, later = _job_incident(1, first=100.0, cleared=150.0), _job_incident(2, first=200.0, cleared=None)
    captures = [_capture(1, 120.0), _capture(0, 121.0), _capture(1, 170.0), _capture(1, 199.0), _capture(1, 230.0)]
    kept = with_stacks([earlier, later], captures)
    assert [c.started for c in kept[0].evidence.stacks] == [120.0, 121.0]  # the suspect and its contrast
    # 170 was between incidents; 199 is within STACK_LEAD_S of the later one's first sighting (a
    # replay judging at the data's ticks sees a stall up to a tick or two after the live capture)
    assert [c.started for c in kept[1].evidence.stacks] == [199.0, 230.0]
    assert [i.id for i in kept] == [1, 2] and earlier.evidence.stacks == []  # the log's own objects are unchanged
