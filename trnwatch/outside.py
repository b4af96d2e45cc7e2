"""Strings from outside, made safe for every output: the screen, stderr, Markdown, text, JSON.

Runtime tags, instance names, model names, source ids, ssh's stderr, an HTTP error body, a job's
own log: all come from outside and are shown as data. No output of trnwatch may carry a control
character (ESC, BEL, an OSC 52 clipboard write, the 8-bit CSI U+009B) or a bidi override (U+202E)
that a terminal, a pager or an editor would act on.

- `clean` is for text read by people (screen, stderr, Markdown, plain text): tabs and line breaks
  become spaces, every other control, format or unassigned character is dropped, one by one, so
  what remains (`]52;c;aGVsbG8=`) shows that someone put something odd in the string.
- `json_safe` is for JSON text: the same characters are written as `\\uXXXX` escapes instead, so
  the file holds no raw control character and a JSON reader still gets the exact string back.
- Both redact the secrets trnwatch holds, in their escaped forms too (trnwatch/redaction.py).
"""

import unicodedata

from trnwatch.redaction import redact

LINE_BREAKS = "\t\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"  # what str.splitlines breaks on, and tab


def clean(value: object) -> str:
    """`value` as printable text on one line: tabs and line breaks become spaces, every other
    control, format (bidi overrides, zero-width) or unassigned character is dropped."""
    out = []
    for ch in redact(str(value)):
        if ch in LINE_BREAKS:
            out.append(" ")
        elif ch.isprintable() or ch == " ":
            out.append(ch)
        elif unicodedata.category(ch) == "Zs":
            out.append(" ")  # no-break and other spaces read as a space
    return "".join(out)


def _escape(ch: str) -> str:
    code = ord(ch)
    if code > 0xFFFF:  # JSON escapes name UTF-16 code units
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def json_safe(json_text: str) -> str:
    """`json_text` (from `json.dumps` or pydantic) with every non-ASCII control, format, line
    separator or unassigned character written as a `\\uXXXX` escape. Outside JSON strings the text
    is ASCII, so this only touches string contents and the result decodes to the same value.
    Registered secrets are redacted first (trnwatch/redaction.py)."""
    json_text = redact(json_text)
    if json_text.isascii() and "\x7f" not in json_text:
        return json_text
    return "".join(_escape(ch) if ord(ch) >= 0x7F and not ch.isprintable() else ch for ch in json_text)
