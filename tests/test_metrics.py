"""--serve-metrics (trnwatch/metrics.py): the exposition and its bounds, scraped by a real
Prometheus server; the README's alerting rules checked by promtool."""

import asyncio
import re
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from trnwatch.ledger.findings import Finding, Site
from trnwatch.metrics import MAX_INCIDENT_SERIES, MetricsError, metrics_server, parse_address, render
from trnwatch.session import Session
from tests.prometheus_server import MISSING as PROMETHEUS_MISSING
from tests.prometheus_server import LocalPrometheus
from tests.sshd import free_port
from tests.tui_fleet import FAULT_SITE, SCENARIO_TICKS, now_at, scenario_ledger

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="needs promtool: apt-get install prometheus")
README = Path(__file__).resolve().parents[1] / "README.md"


def hang_session() -> tuple[Session, float]:
    ledger = scenario_ledger("hang")
    now_s = now_at(SCENARIO_TICKS["hang"])
    session = Session(ledger, [])
    session.incidents.update(list(ledger.read(now_s).findings), now_s)
    return session, now_s


def test_the_hang_shows_its_verdict_suspect_and_incident_with_site_labels():
    session, now_s = hang_session()
    text = render(session, now_s)
    assert 'trnwatch_job_verdict{verdict="late"} 1' in text and 'trnwatch_job_verdict{verdict="steady"} 0' in text
    assert f'trnwatch_job_suspect{{rank="120",host="{FAULT_SITE}",chip="2",region="dataloader"}} 1' in text
    assert 'trnwatch_incidents_open{kind="job",severity="critical"} 1' in text
    assert re.search(
        rf'trnwatch_incident_open\{{id="1",kind="job",label="LATE",severity="critical",rank="120",host="{FAULT_SITE}",instance_id="i-[^"]+",chip="2"\}} 1',
        text,
    )
    assert 'trnwatch_hosts{state="fresh"} 36' in text and text.endswith("# EOF\n")


def test_incident_series_are_bounded_and_label_values_escaped():
    session, now_s = hang_session()
    hostile = 'evil"host\\\nname'
    findings = [
        Finding("error", "host-lost", "host", "LOST", Site(host_id=f"i-{n}", host=f"{hostile}{n}"), "gone", "")
        for n in range(MAX_INCIDENT_SERIES + 5)
    ]
    session.incidents.update(findings, now_s + 1)
    text = render(session, now_s + 1)
    assert text.count("trnwatch_incident_open{") == MAX_INCIDENT_SERIES
    assert "trnwatch_incidents_open_unlisted 6" in text  # the 25 lost hosts and the job: 26 open
    assert 'host="evil\\"host\\\\ name0"' in text  # quote and backslash escaped, the line break a space
    assert "\nname" not in text


@pytest.mark.slow
@pytest.mark.skipif(PROMETHEUS_MISSING is not None, reason=str(PROMETHEUS_MISSING))
def test_a_real_prometheus_scrapes_the_endpoint(tmp_path):
    """The endpoint served on an event loop of its own, scraped by a real Prometheus server: the
    exposition parses (`up` 1) and the verdict and the suspect's incident are queryable."""
    session, now_s = hang_session()
    session.now_s = lambda: now_s  # the session's clock at the scenario's tick
    port = free_port()
    loop = asyncio.new_event_loop()
    serve = loop.create_task(metrics_server(session, f"127.0.0.1:{port}")())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    prometheus = LocalPrometheus.start(tmp_path, f"127.0.0.1:{port}", ["/metrics"], interval_s=1.0)
    try:
        prometheus.wait_for('up{job="neuron-monitor"}', 1.0, 120)
        prometheus.wait_for('trnwatch_job_verdict{verdict="late"}', 1.0, 60)
        (series,) = prometheus.query('trnwatch_incident_open{kind="job"}')
        assert (series["metric"]["rank"], series["metric"]["host"], series["metric"]["chip"]) == (
            "120",
            FAULT_SITE,
            "2",
        )
        assert prometheus.query("trnwatch_incidents_total")[0]["value"][1] == "1"
    finally:
        prometheus.stop()
        loop.call_soon_threadsafe(serve.cancel)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


@needs_promtool
def test_promtool_accepts_the_readme_alerting_rules(tmp_path):
    block = re.search(r"```yaml\n(groups:.*?)```", README.read_text(), re.S)
    assert block is not None
    rules = tmp_path / "rules.yml"
    rules.write_text(block.group(1))
    result = subprocess.run([PROMTOOL, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 2 rules found" in result.stdout


def test_addresses():
    assert parse_address("9464") == ("127.0.0.1", 9464)
    assert parse_address("0.0.0.0:9464") == ("0.0.0.0", 9464)
    assert parse_address("[::1]:9464") == ("::1", 9464)
    for bad in ("x", "1.2.3.4:0", "host:70000", ""):
        with pytest.raises(MetricsError):
            parse_address(bad)
