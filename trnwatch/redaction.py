"""Secrets trnwatch holds never reach an output, whoever echoes them back.

A secret (the Prometheus bearer token; any credential a later option loads) is registered once,
where it is loaded (`register`). `redact` replaces every registered secret, and the forms it
takes when someone echoes it back, with `<redacted>`: as is, JSON-escaped (`/` as `\\/`, `"`, `\\`
and non-ASCII as `\\uXXXX`, either case of hex), URL-encoded (`%2F`, `%2f`, `+` for a space), and
each of those JSON-escaped once more (an echo kept in a field of a JSON file).
The chokepoints call it, so every text written or printed passes through it: `outside.clean`
(screen, stderr, Markdown, plain text), `outside.json_safe` (receipts, snapshots), `output.write_new`
(every whole file written) and the
recorder (every line and source event of a recording). A server that sends the token back in an
error body, a log line, a label: all the same.

Secrets shorter than `MIN_SECRET_CHARS` are refused by `register` (a one-letter "secret" would
blank every such letter of every output and hide nothing).
"""

import json
import re
import urllib.parse

REDACTED = "<redacted>"
MIN_SECRET_CHARS = 4

_forms: tuple[str, ...] = ()  # every registered secret's forms, longest first


def _escapings(secret: str) -> set[str]:
    forms = {secret, urllib.parse.quote(secret), urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret)}
    for ascii_only in (True, False):
        dumped = json.dumps(secret, ensure_ascii=ascii_only)[1:-1]  # '"', '\\' and controls escaped
        forms |= {dumped, dumped.replace("/", "\\/")}
    # An echo kept in a string that is then written as JSON (a receipt's error field) is escaped twice.
    forms |= {json.dumps(f)[1:-1] for f in forms}
    # Hex digits may be written in either case: `%2F` / `%2f`, `\u00e9` / `\u00E9`.
    forms |= {re.sub(r"%[0-9A-F]{2}", lambda m: m[0].lower(), f) for f in forms}
    forms |= {re.sub(r"\\u[0-9a-f]{4}", lambda m: "\\u" + m[0][2:].upper(), f) for f in forms}
    return forms


def register(secret: str) -> None:
    """Redact `secret` from every output from now on. Raises ValueError for a secret too short to
    redact without blanking ordinary text."""
    global _forms
    if len(secret) < MIN_SECRET_CHARS:
        raise ValueError(f"a secret of under {MIN_SECRET_CHARS} characters cannot be kept out of outputs")
    _forms = tuple(sorted(set(_forms) | _escapings(secret), key=len, reverse=True))


def forget_all() -> None:
    """Drop every registered secret (a test's, or a session's that ended)."""
    global _forms
    _forms = ()


def redact(text: str) -> str:
    """`text` with every registered secret, in each of its forms, replaced by `<redacted>`."""
    for form in _forms:
        if form in text:
            text = text.replace(form, REDACTED)
    return text
