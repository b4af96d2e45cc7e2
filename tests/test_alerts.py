"""Alerts (trnwatch/alerts.py) with real /bin/sh commands and a real local HTTP sink: what goes
out, what is held down, retried and killed, and that outside strings stay data."""

import base64
import json
import os
import socket
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from trnwatch.alerts import AlertConfigError, Alerts, Webhook
from trnwatch.ledger.findings import Finding, Site
from trnwatch.ledger.incidents import IncidentLog
from trnwatch.outside import clean, json_safe
from trnwatch.redaction import REDACTED
from tests.waiting import process_alive, wait_until


def _changes(log: IncidentLog, findings: list[Finding], now_s: float):
    return log.update(findings, now_s, None)


def _ecc(host: str, host_id: str = "i-0abc") -> Finding:
    site = Site(host_id=host_id, host=host, chip=2)
    return Finding("critical", "ecc-uncorrected", "chip", "ECC", site, "1 uncorrected ECC error", "")


def test_command_gets_json_on_stdin_and_env_and_outside_strings_stay_data(tmp_path):
    host = "evil$(touch pwned)`touch pwned2`;touch pwned3"
    out = tmp_path / "alerts.jsonl"
    env = tmp_path / "env.txt"
    command = f'cat >> {out}; echo >> {out}; printf "%s|%s|%s\\n" "$TRNWATCH_SITE" "$TRNWATCH_SEVERITY" "$TRNWATCH_EVIDENCE" >> {env}'
    alerts = Alerts(command)
    log = IncidentLog()
    alerts.offer(_changes(log, [_ecc(host)], 100.0), "simulated", None)
    wait_until(lambda: alerts.counts.sent == 1, "the alert command ran", 30)
    doc = json.loads(out.read_text().strip())
    assert doc["schema"] == "trnwatch.alert/1" and doc["evidence"] == "simulated" and doc["change"] == "opened"
    assert doc["incident"]["site"] == {**doc["incident"]["site"], "host": host, "chip": 2, "instance_id": "i-0abc"}
    assert doc["text"].startswith("[SIMULATED] trnwatch CRITICAL ECC uncorrected ECC on ")
    assert env.read_text() == f"{host}/2|critical|simulated\n"
    assert not any(p.name.startswith("pwned") for p in tmp_path.iterdir())
    assert not any(p.startswith("pwned") for p in os.listdir("."))
    alerts.close(5)


def test_a_flapping_finding_pages_once_per_hold_down(tmp_path):
    out = tmp_path / "n"
    alerts = Alerts(f"cat > /dev/null; echo x >> {out}", hold_down_s=300)
    log = IncidentLog(clear_after_s=1.0)
    for t in range(0, 50, 10):  # open, clear, open, clear, ... within the hold-down
        alerts.offer(_changes(log, [_ecc("h")], t), "live", None)
        alerts.offer(_changes(log, [], t + 2), "live", None)
    wait_until(lambda: alerts.counts.sent == 2, "the first opening and its clearing sent", 30)
    assert (alerts.counts.sent, alerts.counts.suppressed) == (2, 8)
    alerts.offer(_changes(log, [_ecc("h")], 400.0), "live", None)  # past the hold-down: pages again
    wait_until(lambda: alerts.counts.sent == 3, "the opening after the hold-down sent", 30)
    alerts.close(5)
    assert out.read_text().count("x") == 3 and alerts.counts.suppressed == 8


def test_a_failing_command_is_retried_a_bounded_number_of_times(tmp_path):
    tries = tmp_path / "tries"
    alerts = Alerts(f"cat > /dev/null; echo x >> {tries}; exit 3", retries=2, backoff_s=0.01)
    alerts.offer(_changes(IncidentLog(), [_ecc("h")], 0.0), "live", None)
    wait_until(lambda: alerts.counts.failed == 1, "given up", 30)
    assert tries.read_text().count("x") == 3 and alerts.counts.retried == 2 and alerts.counts.sent == 0
    alerts.close(1)


def test_a_hanging_command_is_killed_with_its_children(tmp_path):
    pid_file = tmp_path / "pid"
    alerts = Alerts(f"sleep 600 & echo $! > {pid_file}; wait", timeout_s=0.5, retries=0)
    alerts.offer(_changes(IncidentLog(), [_ecc("h")], 0.0), "live", None)
    wait_until(lambda: alerts.counts.failed == 1, "the command timed out", 60)
    child = int(pid_file.read_text())
    wait_until(lambda: not process_alive(child), "the command's child killed too", 30)
    alerts.close(1)


def test_close_kills_a_command_still_running_and_its_counts_are_final(tmp_path):
    """The one being delivered is killed (failed); the one queued behind it was never tried
    (pending); what `counted` says after the close (the receipt's block) no longer moves."""
    alerts = Alerts("sleep 600", timeout_s=600, retries=0)
    log = IncidentLog()
    alerts.offer(_changes(log, [_ecc("h")], 0.0), "live", None)
    alerts.offer(_changes(log, [_ecc("h"), _ecc("h2", "i-0def")], 1.0), "live", None)
    wait_until(lambda: alerts._running is not None, "the command started", 30)
    running = alerts._running
    alerts.close(0.2)
    assert running is not None and running.poll() is not None  # killed and reaped within close
    final = alerts.counted()
    assert (final.sent, final.failed, final.pending_at_exit) == (0, 1, 1)
    alerts.close(0.2)
    assert alerts.counted() == final


def test_close_waits_for_an_alert_still_going_out_so_the_counts_say_sent(tmp_path):
    """Issue 36.12: the receipt is built after this wait; the alert delivered during it is sent."""
    go = tmp_path / "go"
    started = tmp_path / "started"
    alerts = Alerts(f"cat > /dev/null; touch {started}; while [ ! -e {go} ]; do sleep 0.02; done", retries=0)
    alerts.offer(_changes(IncidentLog(), [_ecc("h")], 0.0), "live", None)
    wait_until(started.exists, "the command started", 30)
    assert alerts.counted().pending_at_exit == 1
    threading.Thread(target=go.touch).start()
    alerts.close(60)
    final = alerts.counted()
    assert (final.sent, final.failed, final.pending_at_exit) == (1, 0, 0)


class _Sink(BaseHTTPRequestHandler):
    received: list = []
    status = 200

    def do_POST(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append((self.path, dict(self.headers), body))
        if type(self).status in (301, 302):
            self.send_response(type(self).status)
            self.send_header("Location", "/elsewhere")
            self.end_headers()
            return
        self.send_response(type(self).status)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def sink():
    handler = type("Sink", (_Sink,), {"received": [], "status": 200})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, handler
    server.shutdown()
    server.server_close()


def test_webhook_posts_json_with_text_and_the_authorization_from_a_file(sink, tmp_path, monkeypatch):
    server, handler = sink
    monkeypatch.setenv("HOOK_URL", f"http://127.0.0.1:{server.server_port}/services/T0/B0/s3cr3t-path")
    secret = tmp_path / "token"
    secret.write_text("Bearer tok-123\n")
    webhook = Webhook.from_options("env:HOOK_URL", f"file:{secret}")
    assert webhook.host == "http://127.0.0.1"  # what the receipt and errors name
    alerts = Alerts(webhook=webhook)
    alerts.offer(_changes(IncidentLog(), [_ecc("h")], 0.0), "replayed", None)
    wait_until(lambda: alerts.counts.sent == 1, "the sink answered 200", 30)
    path, headers, body = handler.received[0]
    assert path == "/services/T0/B0/s3cr3t-path" and headers["Authorization"] == "Bearer tok-123"
    doc = json.loads(body)
    assert doc["text"].startswith("[REPLAY] ") and doc["incident"]["kind"] == "ecc-uncorrected"
    alerts.close(1)


def test_webhook_refuses_redirects_and_retries_with_back_off(sink):
    server, handler = sink
    handler.status = 302
    alerts = Alerts(webhook=Webhook(f"http://127.0.0.1:{server.server_port}/hook"), retries=1, backoff_s=0.01)
    alerts.offer(_changes(IncidentLog(), [_ecc("h")], 0.0), "live", None)
    wait_until(lambda: alerts.counts.failed == 1, "given up on the redirect", 30)
    assert [p for p, _, _ in handler.received] == ["/hook", "/hook"]  # never /elsewhere
    alerts.close(1)


def test_webhook_secrets_never_come_from_the_command_line(monkeypatch):
    with pytest.raises(AlertConfigError, match="env:NAME or file:PATH"):
        Webhook.from_options("https://hooks.example.com/x?token=abc", None)
    with pytest.raises(AlertConfigError, match="env:NAME or file:PATH"):
        Webhook.from_options("https://hooks.example.com/x", "Bearer abc")
    monkeypatch.delenv("NO_SUCH_HOOK", raising=False)
    with pytest.raises(AlertConfigError, match="NO_SUCH_HOOK"):
        Webhook.from_options("env:NO_SUCH_HOOK", None)


def test_a_webhook_url_with_userinfo_goes_out_as_basic_auth_and_is_never_resolved(sink, monkeypatch):
    """Issue 36.2: `user:password@` in a URL from env: was handed to the resolver whole (the
    password in DNS queries, nothing delivered); now it is the Authorization header."""
    server, handler = sink
    monkeypatch.setenv("HOOK_URL", f"http://ops:pa%40ss-w0rd@127.0.0.1:{server.server_port}/hook/x1")
    asked: list[str] = []
    real = socket.getaddrinfo

    def recorded(host, *args, **kwargs):  # the real resolver, every name it is asked for kept
        asked.append(str(host))
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", recorded)
    webhook = Webhook.from_options("env:HOOK_URL", None)
    alerts = Alerts(webhook=webhook, retries=0)
    alerts.offer(_changes(IncidentLog(), [_ecc("h")], 0.0), "live", None)
    alerts.close(60)
    assert alerts.counted().sent == 1, alerts.counted()
    path, headers, _ = handler.received[0]
    assert path == "/hook/x1"
    assert headers["Authorization"] == "Basic " + base64.b64encode(b"ops:pa@ss-w0rd").decode()
    assert asked and all("@" not in host and "pa" not in host for host in asked), asked
    assert webhook.host == "http://127.0.0.1"
    for secret in ("pa@ss-w0rd", "pa%40ss-w0rd", base64.b64encode(b"ops:pa@ss-w0rd").decode()):
        assert clean(f"echo: {secret}") == f"echo: {REDACTED}", secret


def test_userinfo_and_an_authorization_option_together_are_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("HOOK_URL", "https://ops:secret-pw@hooks.example.com/x")
    (tmp_path / "auth").write_text("Bearer tok-abcdef\n")
    with pytest.raises(AlertConfigError, match="user:password@ and --alert-webhook-auth"):
        Webhook.from_options("env:HOOK_URL", f"file:{tmp_path / 'auth'}")


def test_every_webhook_secret_is_registered_for_redaction_where_it_is_loaded(tmp_path, monkeypatch):
    """Issue 36.1: the URL (whole, without its host: the path is Slack's credential) and the
    Authorization value (whole and its token) are redacted from every output as soon as the
    option is read."""
    url = "https://hooks.slack.com/services/T0AAA/B0BBB/xoxSECRETpath"
    monkeypatch.setenv("HOOK_URL", url)
    (tmp_path / "auth").write_text("Bearer tok-5ecret-h3ader\n")
    Webhook.from_options("env:HOOK_URL", f"file:{tmp_path / 'auth'}")
    echoes = [
        f"POST {url} failed",
        "POST /services/T0AAA/B0BBB/xoxSECRETpath HTTP/1.1 -> 404",
        "Authorization: Bearer tok-5ecret-h3ader",
        "token tok-5ecret-h3ader rejected",
    ]
    for echo in echoes:
        assert "SECRET" not in clean(echo) and "5ecret" not in clean(echo), clean(echo)
        assert "SECRET" not in json_safe(json.dumps({"line": echo})), echo
