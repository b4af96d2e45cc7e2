"""Secrets never reach an output (trnwatch/redaction.py): each registered secret and its common
escapings are redacted by the chokepoints every output passes through."""

import json
import urllib.parse

import pytest

from trnwatch.collectors.lines import Line, SourceEvent
from trnwatch.collectors.recording import Recorder
from trnwatch.output import write_new
from trnwatch.outside import clean, json_safe
from trnwatch.redaction import REDACTED, redact, register
from tests.recordings import plain_bytes

TOKEN = 'tok/en+a=b"é'


def echoes(secret: str) -> list[str]:
    """How servers and tools write a secret back: raw, JSON (with and without `\\/`, ASCII or not,
    either hex case), URL-encoded (either hex case, `+` or `%20` for a space)."""
    dumped = json.dumps(secret)[1:-1]
    quoted = urllib.parse.quote(secret, safe="")
    return [
        secret,
        dumped,
        dumped.replace("/", "\\/"),
        dumped.replace("\\u00e9", "\\u00E9"),
        json.dumps(secret, ensure_ascii=False)[1:-1].replace("/", "\\/"),
        quoted,
        quoted.lower(),
        urllib.parse.quote_plus(secret),
        urllib.parse.quote(secret),
    ]


def test_every_common_escaping_of_a_registered_secret_is_redacted():
    assert redact(f"x {TOKEN} y") == f"x {TOKEN} y"  # nothing registered: nothing touched
    register(TOKEN)
    for form in echoes(TOKEN):
        assert redact(f"401: bad token {form}!") == f"401: bad token {REDACTED}!", form
    assert redact("tok/en and a=b") == "tok/en and a=b"  # parts of it are not it


def test_a_secret_too_short_to_redact_is_refused():
    with pytest.raises(ValueError, match="under 4 characters"):
        register("abc")


def test_the_chokepoints_redact_screen_stderr_json_files_and_recordings(tmp_path):
    register(TOKEN)
    echoed = json.dumps({"error": f"denied for {TOKEN}"}).replace("/", "\\/")
    assert TOKEN not in clean(echoed) and REDACTED in clean(echoed)
    assert json.loads(json_safe(json.dumps({"e": echoed})))["e"].count(REDACTED) == 1
    write_new(tmp_path / "r.json", f"{echoed}\n")
    assert REDACTED in (tmp_path / "r.json").read_text()
    recorder = Recorder.to_file(tmp_path / "r.trnrec", "live", {})
    recorder.write(SourceEvent("p", "promql", 1.0, "open"))
    recorder.write(Line("p", "promql", 1.5, echoed))
    recorder.write(SourceEvent("p", "promql", 2.0, "down", error=f"HTTP 401: {urllib.parse.quote(TOKEN, safe='')}"))
    recorder.close()
    recorded = plain_bytes(tmp_path / "r.trnrec").decode()
    assert recorded.count(REDACTED) == 2
    assert not [f for f in echoes(TOKEN) if f in recorded]
