"""HTTP for the Prometheus sources: which URLs are accepted, the bearer token, one bounded GET.

Standard library only (`http.client`), each request in a worker thread of a pool of its own, so
a hung endpoint holds one thread until its timeout and never the event loop or the other sources.
No redirects are followed (a redirect could carry the token to another host) and no proxy
variables are read: trnwatch talks to exactly the URL it was given.

URLs are data from the command line: only `http` and `https`, a host is required, and
credentials in the URL (`http://user:pass@host`) are refused, because a URL is printed in
progress lines, receipts and recordings; the token goes in a file (`--prometheus-token-file`) or
the `TRNWATCH_PROMETHEUS_TOKEN` environment variable and is only ever put in the Authorization
header. Error messages never contain it (any echo of it by a server is masked).
"""

import asyncio
import http.client
import os
import ssl
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from trnwatch.collectors.text_files import TextFileError, read_text_file

TOKEN_ENV = "TRNWATCH_PROMETHEUS_TOKEN"
USER_AGENT = "trnwatch"
READ_CHUNK_BYTES = 256 * 1024
# Threads are made on demand; the bound only matters for hundreds of hung scrape targets.
_POOL = ThreadPoolExecutor(max_workers=256, thread_name_prefix="trnwatch-http")


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
        raise UrlError(f"URL {_masked(url)!r}: only http:// and https:// URLs are fetched, not {parts.scheme or 'no scheme'!r}")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise UrlError(f"URL {_masked(url)!r} carries credentials; put a bearer token in --prometheus-token-file "
                       f"or {TOKEN_ENV} instead")
    if not parts.hostname:
        raise UrlError(f"URL {url!r} has no host")
    if port == 0:
        raise UrlError(f"URL {url!r} has port 0")
    if parts.fragment:
        raise UrlError(f"URL {url!r} has a fragment ('#...'), which HTTP never sends")
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
    return token


def fetch(url: str, token: str | None, timeout_s: float, max_bytes: int) -> bytes:
    """GET `url` (checked with `check_url`) and return the body of a 200 answer; `FetchError` else.

    `timeout_s` bounds connecting and the whole read; a body over `max_bytes` is an error.
    """
    parts = urllib.parse.urlsplit(url)
    path = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
    headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity", "Connection": "close"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    deadline = time.monotonic() + timeout_s
    if parts.scheme.lower() == "https":
        conn = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=timeout_s,
                                           context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout_s)
    try:
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        body = bytearray()
        while chunk := response.read(READ_CHUNK_BYTES):
            body += chunk
            if len(body) > max_bytes:
                raise FetchError(f"answer from {url} is over {max_bytes} bytes")
            if time.monotonic() > deadline:
                raise FetchError(f"{url} did not finish answering within {timeout_s:g} s")
        if response.status != 200:
            # The first line of a short text or JSON answer says why (Prometheus: {"error": ...});
            # an HTML error page says nothing a status line does not.
            first = bytes(body[:300]).decode("utf-8", "replace").strip().split("\n", 1)[0]
            detail = "" if first.startswith("<") else first[:200]
            message = f"HTTP {response.status} {response.reason} from {url}" + (f": {detail}" if detail else "")
            if 300 <= response.status < 400:
                message += " (redirects are not followed)"
            raise FetchError(message if token is None else message.replace(token, "<token>"))
        return bytes(body)
    except (OSError, http.client.HTTPException) as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else (getattr(exc, "strerror", None) or str(exc) or type(exc).__name__)
        raise FetchError(f"{url}: {reason}") from None
    finally:
        conn.close()


async def fetch_async(url: str, token: str | None, timeout_s: float, max_bytes: int) -> bytes:
    """`fetch` in the HTTP worker pool, awaitable from the event loop."""
    return await asyncio.get_running_loop().run_in_executor(_POOL, fetch, url, token, timeout_s, max_bytes)
