"""Alerts: incidents that open, escalate or clear leave the screen, to a command or a webhook.

The session hands every incident change (ledger/incidents.py) to `Alerts.offer` on the event
loop; that call only decides (hold-down, --exit-on) and queues. Delivery runs on one daemon
thread of its own, so a command that hangs or a webhook that does not answer never blocks
ingest, a key or the receipt:

- `--alert-cmd CMD`: `/bin/sh -c CMD` with the alert JSON on stdin and TRNWATCH_* variables in
  its environment (outside strings travel only as data: never in the command line itself); killed
  (its process group) after `timeout_s`; a non-zero exit, a kill or a spawn error is retried up to
  `retries` more times.
- `--alert-webhook`: the same JSON plus `text` (a line Slack or Teams shows) as an HTTP POST; TLS
  verified by the system's trust store; redirects refused; retried with back-off. Its URL and its
  Authorization value come from the environment or a file (`env:NAME`, `file:PATH`) and are never
  written anywhere: errors name the webhook's host only. Both are registered for redaction where
  they are loaded (`secret_from`, `Webhook.from_options`): the URL whole, its path and query (a
  Slack or Teams URL is the credential), the Authorization value and its credential part, so a
  job log that echoes any of them reaches no output (trnwatch/redaction.py). A URL's userinfo
  (`https://user:password@host/...`) becomes a Basic Authorization header and is cut from the URL
  before anything resolves or connects (the resolver would be asked for `user:password@host`).

Hold-down: an alert for the same incident site, change and label as one sent within
`hold_down_s` (the session's clock) is suppressed, and so is the clearing of an incident whose
opening was suppressed: a finding that flaps pages at most once per interval. Every alert is
counted (`AlertCounts`, in the receipt). Simulated and replayed incidents say so in the JSON
(`evidence`), the environment (TRNWATCH_EVIDENCE) and the first word of `text`.
"""

import base64
import json
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit, urlunsplit

if (
    TYPE_CHECKING
):  # the ledger's models are imported where used: `--alert-hold-down`'s default is read to build a parser
    from trnwatch.ledger.incidents import Incident
    from trnwatch.ledger.receipt import AlertCounts
from trnwatch.outside import clean
from trnwatch.redaction import MIN_SECRET_CHARS, register

SCHEMA = "trnwatch.alert/1"
HOLD_DOWN_S = 300.0
TIMEOUT_S = 10.0
RETRIES = 2  # after the first attempt
BACKOFF_S = 1.0  # doubled after each failed attempt
MAX_QUEUED = 256  # alerts waiting for delivery; past it one is dropped and counted as failed
EXIT_WAIT_S = 15.0  # at the end, before the receipt: how long queued alerts may take to go out
STOP_WAIT_S = 5.0  # after that: how long the delivery thread may take to count a killed command
EVIDENCE_MARK = {"live": "", "simulated": "[SIMULATED] ", "replayed": "[REPLAY] "}


class AlertConfigError(ValueError):
    """An alert option that cannot work (the message says which and why)."""


def secret_from(spec: str, what: str) -> str:
    """A secret given as `env:NAME` or `file:PATH` (never on the command line itself), registered
    for redaction as it is loaded."""
    if spec.startswith("env:"):
        value = os.environ.get(spec[4:], "").strip()
        if not value:
            raise AlertConfigError(f"{what}: environment variable {spec[4:]} is not set or empty")
    elif spec.startswith("file:"):
        try:
            value = Path(spec[5:]).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise AlertConfigError(f"{what}: cannot read {spec[5:]}: {exc}") from None
        if not value:
            raise AlertConfigError(f"{what}: {spec[5:]} is empty")
    else:
        raise AlertConfigError(f"{what}: give env:NAME or file:PATH (a secret never goes on the command line)")
    _register_secret(value, what)
    return value


def _register_secret(value: str, what: str) -> None:
    try:
        register(value)
    except ValueError:
        raise AlertConfigError(f"{what}: under {MIN_SECRET_CHARS} characters: not a credential") from None


def _register_webhook(url: str | None, authorization: str | None) -> None:
    """Besides what `secret_from` registered as loaded: the secret URL (None for a literal one)
    without its userinfo, its path and query (without the host a Slack or Teams URL is still the
    credential), and the Authorization value whole and its credential (after `Bearer `, `Basic `)."""
    parts = urlsplit(url) if url is not None else None
    tail = "" if parts is None else parts.path + (f"?{parts.query}" if parts.query else "")
    credential = None if authorization is None else authorization.split(None, 1)[-1]
    for secret in (url, tail, authorization, credential):
        if secret is not None and len(secret) >= MIN_SECRET_CHARS and secret != "/":
            register(secret)


def _userinfo_to_header(url: str, what: str) -> tuple[str, str | None]:
    """`url` without its userinfo, and the Basic Authorization value it stood for (None when it
    has none). The userinfo never reaches the resolver: `http.client` would look up
    `user:password@host` as a host name."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    userinfo, hostport = parts.netloc.rsplit("@", 1)
    user, _, password = userinfo.partition(":")
    pair = f"{unquote(user)}:{unquote(password)}"
    value = "Basic " + base64.b64encode(pair.encode("utf-8")).decode("ascii")
    for secret in (pair, unquote(password), userinfo):
        if len(secret) >= MIN_SECRET_CHARS:
            register(secret)
    if not hostport:
        raise AlertConfigError(f"{what}: not an http(s) URL")
    return urlunsplit(parts._replace(netloc=hostport)), value


@dataclass(frozen=True)
class Webhook:
    url: str
    authorization: str | None = None  # the Authorization header's value

    @classmethod
    def from_options(cls, url_spec: str, auth_spec: str | None) -> "Webhook":
        """The webhook of `--alert-webhook` and `--alert-webhook-auth`; every secret in them is
        registered for redaction here, where it is loaded."""
        literal = url_spec.startswith(("http://", "https://"))
        if literal and ("@" in urlsplit(url_spec).netloc or urlsplit(url_spec).query):
            raise AlertConfigError(
                "--alert-webhook: a URL with credentials or a query is a secret: pass it as env:NAME or file:PATH"
            )
        url = url_spec if literal else secret_from(url_spec, "--alert-webhook")
        if any(ch.isspace() or not ch.isprintable() for ch in url):
            raise AlertConfigError("--alert-webhook: the URL contains whitespace or control characters")
        url, from_userinfo = _userinfo_to_header(url, "--alert-webhook")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise AlertConfigError("--alert-webhook: not an http(s) URL")
        authorization = None if auth_spec is None else secret_from(auth_spec, "--alert-webhook-auth")
        if from_userinfo is not None and authorization is not None:
            raise AlertConfigError(
                "--alert-webhook: its URL carries user:password@ and --alert-webhook-auth is given too: give one"
            )
        authorization = authorization or from_userinfo
        _register_webhook(None if literal else url, authorization)
        return cls(url, authorization)

    @property
    def host(self) -> str:
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.hostname}"


@dataclass(frozen=True)
class Alert:
    change: str
    incident: "Incident"
    evidence: str
    verdict: str | None

    def document(self) -> dict:
        return {
            "schema": SCHEMA,
            "evidence": self.evidence,
            "change": self.change,
            "verdict": self.verdict,
            "incident": self.incident.model_dump(mode="json"),
            "text": self.text(),
        }

    def text(self) -> str:
        from trnwatch.ledger.incidents import incident_words

        i = self.incident
        words = {"opened": "", "escalated": "escalated: ", "eased": "eased: ", "cleared": "cleared: "}[self.change]
        return clean(
            f"{EVIDENCE_MARK.get(self.evidence, '')}trnwatch {i.severity.upper()} {words}{i.label} "
            f"{incident_words(i)}: {i.evidence.what}"
        )

    def environment(self) -> dict[str, str]:
        from trnwatch.ledger.incidents import site_words

        i = self.incident
        values = {
            "TRNWATCH_CHANGE": self.change,
            "TRNWATCH_KIND": i.kind,
            "TRNWATCH_LABEL": i.label,
            "TRNWATCH_SEVERITY": i.severity,
            "TRNWATCH_SITE": site_words(i.site),
            "TRNWATCH_EVIDENCE": self.evidence,
            "TRNWATCH_INCIDENT_ID": str(i.id),
        }
        return {k: clean(v) for k, v in values.items()}


def _site_key(i: "Incident") -> tuple:
    s = i.site
    return (i.kind,) if i.kind == "job" else (i.kind, s.instance_id or s.host, s.chip, s.source)


class Alerts:
    """Decides which incident changes page, and delivers them on a thread of its own."""

    def __init__(
        self,
        command: str | None = None,
        webhook: Webhook | None = None,
        *,
        hold_down_s: float = HOLD_DOWN_S,
        timeout_s: float = TIMEOUT_S,
        retries: int = RETRIES,
        backoff_s: float = BACKOFF_S,
    ):
        self.command = command
        self.webhook = webhook
        self.hold_down_s = hold_down_s
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        from trnwatch.ledger.receipt import AlertCounts

        destinations = (["command"] if command else []) + ([f"webhook {webhook.host}"] if webhook else [])
        self.counts = AlertCounts(destinations=destinations)
        self._sent_at: dict[tuple, float] = {}  # (site key, change, label) -> session time
        self._suppressed_ids: set[int] = set()  # incidents whose opening was held down
        self._queue: queue.Queue[Alert] = queue.Queue(MAX_QUEUED)
        self._lock = threading.Lock()
        self._busy = 0
        self._stopping = threading.Event()
        self._running: subprocess.Popen | None = None
        self._thread = threading.Thread(target=self._deliver_all, name="trnwatch-alerts", daemon=True)
        self._thread.start()

    # --- on the event loop: decide and queue (never waits) ------------------------------------

    def offer(self, changed: "list[Incident]", evidence: str, verdict: str | None) -> None:
        for incident in changed:
            if incident.kind == "monitor":
                continue  # trnwatch behind on its own reading: said everywhere, never paged as a fault
            change = incident.changes[-1]
            key = (_site_key(incident), change.change, change.label)
            last = self._sent_at.get(key)
            held = last is not None and 0 <= change.at - last < self.hold_down_s
            if change.change == "cleared" and incident.id in self._suppressed_ids:
                held = True
            if change.change == "eased":
                continue  # not a page: the incident is still open, and milder
            if held:
                if change.change == "opened":
                    self._suppressed_ids.add(incident.id)
                self._count(suppressed=1)
                continue
            self._sent_at[key] = change.at
            try:
                self._queue.put_nowait(Alert(change.change, incident, evidence, verdict))
            except queue.Full:
                self._count(failed=1)

    # --- the delivery thread ------------------------------------------------------------------

    def _count(self, **more: int) -> None:
        with self._lock:
            for name, n in more.items():
                setattr(self.counts, name, getattr(self.counts, name) + n)

    def _deliver_all(self) -> None:
        while True:
            alert = self._queue.get()
            with self._lock:
                self._busy += 1
            try:
                self._deliver(alert)
            finally:
                with self._lock:
                    self._busy -= 1
                self._queue.task_done()

    def _deliver(self, alert: Alert) -> None:
        body = json.dumps(alert.document(), ensure_ascii=False).encode()
        if self.command:
            self._with_retries(lambda: self._run_command(alert, body))
        if self.webhook:
            self._with_retries(lambda: self._post(body))

    def _with_retries(self, attempt: Callable[[], bool]) -> None:
        delay = self.backoff_s
        for n in range(self.retries + 1):
            if self._stopping.is_set():  # closed before this attempt: never tried is pending
                self._count(**({"pending_at_exit": 1} if n == 0 else {"failed": 1}))
                return
            try:
                ok = attempt()
            except Exception:  # noqa: BLE001 - a delivery defect costs this attempt, never the session
                ok = False
            if ok:
                self._count(sent=1)
                return
            if n < self.retries:
                self._count(retried=1)
                if self._stopping.wait(delay):
                    break
                delay *= 2
        self._count(failed=1)

    def _run_command(self, alert: Alert, body: bytes) -> bool:
        assert self.command is not None
        env = {**os.environ, **alert.environment()}
        try:
            proc = subprocess.Popen(
                ["/bin/sh", "-c", self.command],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # its own process group: a timeout kills its children too
            )
        except OSError:
            return False
        self._running = proc
        try:
            try:
                proc.communicate(body, timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                return False
            return proc.returncode == 0
        finally:
            self._running = None

    def _post(self, body: bytes) -> bool:
        # The HTTP client and TLS are imported here, on the delivery thread: a session without a
        # webhook (and every replay that has none) never loads them.
        import ssl
        import urllib.error
        import urllib.request

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001 - urllib's signature
                raise urllib.error.HTTPError(req.full_url, code, f"redirect refused ({code})", headers, fp)

        assert self.webhook is not None
        headers = {"Content-Type": "application/json", "User-Agent": "trnwatch-alerts"}
        if self.webhook.authorization:
            headers["Authorization"] = self.webhook.authorization
        request = urllib.request.Request(self.webhook.url, data=body, headers=headers, method="POST")
        opener = urllib.request.build_opener(
            NoRedirect(), urllib.request.HTTPSHandler(context=ssl.create_default_context())
        )
        try:
            with opener.open(request, timeout=self.timeout_s) as response:
                return 200 <= response.status < 300
        except (urllib.error.URLError, OSError, ValueError):
            return False

    # --- the end -------------------------------------------------------------------------------

    def counted(self) -> "AlertCounts":
        """The counts so far, with what is still queued or being delivered as pending."""
        with self._lock:
            if self._stopping.is_set():  # closed: the counts are final
                return self.counts.model_copy()
            return self.counts.model_copy(update={"pending_at_exit": self._queue.qsize() + self._busy})

    def close(self, wait_s: float = EXIT_WAIT_S) -> None:
        """Give queued alerts up to `wait_s` to go out, then kill a command still running; what
        was never tried is counted as pending. Called before the receipt is built, so its counts
        are final; a second call changes nothing."""
        if self._stopping.is_set():
            return
        self._wait_idle(wait_s)
        self._stopping.set()
        while True:  # what the thread has not taken stays untried: pending, not failed
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
            self._queue.task_done()
            self._count(pending_at_exit=1)
        running = self._running
        if running is not None and running.poll() is None:
            _kill_group(running)
        self._wait_idle(STOP_WAIT_S)  # the attempt in hand is counted (a killed command: failed)
        with self._lock:
            self.counts.pending_at_exit += self._busy

    def _wait_idle(self, wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            with self._lock:
                if self._busy == 0 and self._queue.empty():
                    return
            time.sleep(0.05)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
