"""HTTP for the Prometheus sources: which URLs are accepted, the bearer token, one bounded GET.

Standard library only (`http.client`), each request in a daemon thread of its own with a total
deadline: a peer that drips one byte a second (which no per-read socket timeout ever stops)
has its socket shut at the deadline, and so does every request still running when the session
ends, so no worker outlives the session or holds the exit after the receipt (issue 9.6). A
hung endpoint never holds the event loop or the other sources.
No redirects are followed (a redirect could carry the token to another host) and no proxy
variables are read: trnwatch talks to exactly the URL it was given.

URLs are data from the command line: only `http` and `https`, a host is required, and
credentials in the URL (`http://user:pass@host`) are refused, because a URL is printed in
progress lines, receipts and recordings; the token goes in a file (`--prometheus-token-file`) or
the `TRNWATCH_PROMETHEUS_TOKEN` environment variable and is only ever put in the Authorization
header. It is registered with trnwatch/redaction.py, so no output ever holds it, in any common
escaping, whoever echoes it back (an error body, a label, a log line).
"""

import asyncio
import http.client
import os
import socket
import ssl
import threading
import time
import urllib.parse
from pathlib import Path

from trnwatch.collectors.text_files import TextFileError, read_text_file
from trnwatch.redaction import redact, register

TOKEN_ENV = "TRNWATCH_PROMETHEUS_TOKEN"
USER_AGENT = "trnwatch"
READ_CHUNK_BYTES = 256 * 1024


# Query parameters that carry a credential: a URL is printed in progress lines and written into
# receipts and recordings, so one holding any of these is refused (its query never printed).
CREDENTIAL_PARAMETERS = frozenset(
    {
        "access_token",
        "token",
        "api_key",
        "apikey",
        "key",
        "password",
        "passwd",
        "secret",
        "auth",
        "authorization",
        "bearer",
        "sig",
        "signature",
        "x_amz_signature",
        "x_amz_credential",
        "x_amz_security_token",
    }
)


class UrlError(ValueError):
    """A URL trnwatch will not fetch; the message says why (credentials in it are masked)."""


class TokenError(ValueError):
    """The bearer token cannot be used; the message never contains the token."""


class FetchError(Exception):
    """One request failed: connection, timeout, HTTP status, or an answer over the size limit."""


def _masked(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1]))


def check_url(url: str) -> str:
    """Return `url` if trnwatch may fetch it; raise `UrlError` otherwise."""
    if not url or any(ch.isspace() or not ch.isprintable() for ch in url):
        raise UrlError(f"URL {url!r} is empty or contains whitespace or control characters")
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port  # raises ValueError for a malformed port
    except ValueError as exc:
        raise UrlError(f"URL {_masked(url)!r} cannot be read: {exc}") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise UrlError(
            f"URL {_masked(url)!r}: only http:// and https:// URLs are fetched, not {parts.scheme or 'no scheme'!r}"
        )
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise UrlError(
            f"URL {_masked(url)!r} carries credentials; put a bearer token in --prometheus-token-file "
            f"or {TOKEN_ENV} instead"
        )
    if not parts.hostname:
        raise UrlError(f"URL {url!r} has no host")
    if port == 0:
        raise UrlError(f"URL {url!r} has port 0")
    if parts.fragment:
        raise UrlError(f"URL {url!r} has a fragment ('#...'), which HTTP never sends")
    secret = sorted(
        {
            name
            for name, _ in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
            if name.lower().replace("-", "_") in CREDENTIAL_PARAMETERS
        }
    )
    if secret:
        raise UrlError(
            f"URL {urllib.parse.urlunsplit(parts._replace(query='***'))!r} carries credentials in its query "
            f"({', '.join(secret)}); put a bearer token in --prometheus-token-file or {TOKEN_ENV} instead"
        )
    return url


def load_token(path: Path | None, environ: dict[str, str] | None = None) -> str | None:
    """The bearer token: from `path` if given, else from TRNWATCH_PROMETHEUS_TOKEN, else None."""
    env = os.environ if environ is None else environ
    if path is not None:
        try:
            token = read_text_file(path, "token file").strip()
        except TextFileError as exc:
            raise TokenError(str(exc)) from None
        where = f"token file {path}"
    elif env.get(TOKEN_ENV):
        token, where = env[TOKEN_ENV].strip(), TOKEN_ENV
    else:
        return None
    if not token:
        raise TokenError(f"{where} is empty")
    # It goes into an HTTP header: a line break would inject another header.
    if any(ch.isspace() or not ch.isprintable() or not ch.isascii() for ch in token):
        raise TokenError(f"{where} holds whitespace, control or non-ASCII characters inside the token")
    try:
        register(token)  # never written or printed, in any escaping, whoever echoes it
    except ValueError as exc:
        raise TokenError(f"{where}: {exc}") from None
    return token


class _Request:
    """One GET whose socket another thread may shut (the deadline, or the session ending)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conn: http.client.HTTPConnection | None = None
        self.aborted = False

    def connection(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            self._conn = conn

    def abort(self) -> None:
        """Wake a read blocked on the socket (shutdown does; closing from another thread does not)."""
        with self._lock:
            self.aborted = True
            sock = self._conn.sock if self._conn is not None else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed or never connected


def fetch(url: str, token: str | None, timeout_s: float, max_bytes: int, request: _Request | None = None) -> bytes:
    """GET `url` (checked with `check_url`) and return the body of a 200 answer; `FetchError` else.

    `timeout_s` bounds connecting and each wait for bytes, and the whole read is checked against
    it between chunks; a body over `max_bytes` is an error. A peer that drips bytes slower than
    that is only stopped by `request.abort()`, which `fetch_async` calls at the total deadline.
    """
    parts = urllib.parse.urlsplit(url)
    path = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
    headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity", "Connection": "close"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    deadline = time.monotonic() + timeout_s
    if not parts.hostname:  # check_url refuses these first; never a connection to "" (this host)
        raise UrlError(f"URL {url!r} has no host")
    conn: http.client.HTTPConnection
    if parts.scheme.lower() == "https":
        conn = http.client.HTTPSConnection(
            parts.hostname, parts.port, timeout=timeout_s, context=ssl.create_default_context()
        )
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout_s)
    request = request or _Request()
    request.connection(conn)
    try:
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        body = bytearray()
        # read1: whatever has arrived, so the deadline is checked however slowly bytes come.
        while chunk := response.read1(READ_CHUNK_BYTES):
            body += chunk
            if len(body) > max_bytes:
                raise FetchError(f"answer from {url} is over {max_bytes} bytes")
            if time.monotonic() > deadline:
                raise FetchError(f"{url} did not finish answering within {timeout_s:g} s")
        if request.aborted:
            raise FetchError(f"{url} did not finish answering within {timeout_s:g} s")
        if response.status != 200:
            # The first line of a short text or JSON answer says why (Prometheus: {"error": ...});
            # an HTML error page says nothing a status line does not.
            first = bytes(body[:300]).decode("utf-8", "replace").strip().split("\n", 1)[0]
            detail = "" if first.startswith("<") else first[:200]
            message = f"HTTP {response.status} {response.reason} from {url}" + (f": {detail}" if detail else "")
            if 300 <= response.status < 400:
                message += " (redirects are not followed)"
            raise FetchError(redact(message))
        return bytes(body)
    except (OSError, http.client.HTTPException) as exc:
        if request.aborted:
            raise FetchError(f"{url} did not finish answering within {timeout_s:g} s") from None
        reason = (
            "timed out"
            if isinstance(exc, TimeoutError)
            else (getattr(exc, "strerror", None) or str(exc) or type(exc).__name__)
        )
        raise FetchError(f"{url}: {reason}") from None
    finally:
        conn.close()


async def fetch_async(url: str, token: str | None, timeout_s: float, max_bytes: int) -> bytes:
    """`fetch` in a daemon thread of its own, awaitable from the event loop, with a total deadline.

    At `timeout_s` (however slowly the peer drips bytes), or when the awaiting task is cancelled
    (the session ends), the request's socket is shut down, so the thread ends at once; being a
    daemon, a thread stuck where no socket can wake it (a name lookup) never holds the exit.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[bytes] = loop.create_future()
    request = _Request()

    def settle(body: bytes, error: BaseException | None) -> None:
        if not done.done():
            if error is not None:
                done.set_exception(error)
            else:
                done.set_result(body)

    def work() -> None:
        body, error = b"", None
        try:
            body = fetch(url, token, timeout_s, max_bytes, request)
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task
            error = exc
        try:
            loop.call_soon_threadsafe(settle, body, error)
        except RuntimeError:
            pass  # the loop is closed: nobody waits any more

    threading.Thread(target=work, name="trnwatch-http", daemon=True).start()
    try:
        # Not `asyncio.wait_for`: on Python 3.11 it returns the answer when the task is cancelled
        # in the same turn as the answer arrives (CPython gh-86296), and the scrape loop, which
        # only ends by cancellation, would then run on after the session ended. `timeout` passes
        # a cancel through; on timeout or cancel, awaiting `done` cancels it.
        async with asyncio.timeout(timeout_s):
            return await done
    except TimeoutError:
        raise FetchError(f"{url} did not finish answering within {timeout_s:g} s") from None
    finally:
        request.abort()  # nothing left to shut once the request finished (its connection is closed)
