"""The demo's receipt carries every field of issue 12, and its Markdown and SVG are readable."""

import json
import signal
import stat
import subprocess
import sys
import threading

import pytest

from trnwatch.ledger.boundary import BOUNDARY_FIELDS
from tests.waiting import wait_until


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo's receipt once its job has made a few steady steps: compile (10 ticks) and warm-up
    (10 ticks) come first, which a loaded machine stretches, so the demo runs until its headless
    progress line (every 10 s) said "job steady" and then one more, and is ended by Ctrl-C."""
    path = tmp_path_factory.mktemp("demo") / "demo.json"
    command = [sys.executable, "-m", "trnwatch", "demo", "--headless", "--receipt", str(path)]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    said: list[str] = []
    threading.Thread(target=lambda: said.extend(proc.stderr), daemon=True).start()

    def steady_then_one_more_line() -> bool:
        lines = [line for line in list(said) if " lines folded" in line]
        first = next((i for i, line in enumerate(lines) if line.rstrip().endswith("job steady")), None)
        return first is not None and len(lines) > first + 1

    try:
        wait_until(
            lambda: steady_then_one_more_line() or proc.poll() is not None,
            "two progress lines saying job steady",
            300,
            detail=lambda: "".join(said)[-2000:],
        )
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=300) == 0, "".join(said)[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return path


@pytest.mark.slow
def test_demo_receipt_has_every_field_of_the_contract(demo):
    r = json.loads(demo.read_text())
    b = r["boundary"]
    assert {k for k in BOUNDARY_FIELDS if b[k] is None} == set()
    assert (b["scope"], b["ranks"], b["ultraservers"], b["fabric"]) == (
        "job",
        r["job"]["ranks"]["world_size"],
        1,
        "NeuronSwitch-v1",
    )
    seg = r["segments"]
    assert seg["cold_compile"]["seconds"] > 0 and seg["cold_compile"]["cache_hits"] == 0
    steady = seg["steady"]
    assert steady["steps"] >= 3 and steady["tokens_per_s"] > 0 and steady["inferred"] is False
    assert steady["step_time_s"]["p99"] is not None and len(steady["step_time_samples_s"]) >= steady["steps"] - 1
    assert steady["tokens_per_s"] == r["job"]["throughput"]["tokens_per_s"]  # the job section's segment
    assert seg["restarts"] == []  # the healthy demo never restarts
    g = r["goodput"]
    parts = g["productive_s"] + sum(g["badput_s"].values())
    assert parts == pytest.approx(g["window"]["seconds"], abs=1e-5)
    assert g["badput_s"]["compile"] > 0 and g["productive_s"] > 0
    assert r["failure_rate"]["rank_failures"] == 0 and r["failure_rate"]["execution_errors_per_1000"] is not None
    assert r["sequence_lengths"]["p50"] == 4096
    for chip in r["chips"]:
        assert chip["device_latency_s"]["p99"] is not None
        assert chip["flops_mean_per_s"] > 0 and 0 < chip["mfu_pct"] < 100
    assert any(p["tokens_per_s"] for p in r["timeline"]["points"])


@pytest.mark.slow
def test_demo_markdown_leads_with_the_headline_and_links_its_svg(demo):
    md = demo.with_suffix(".md").read_text()
    svg = demo.with_suffix(".svg")
    assert "None" not in md
    head = md.split("## Boundary")[0]
    for words in (
        "Verdict: STEADY",
        "Steady throughput:",
        "Goodput:",
        "Evidence: simulated",
        "Boundary**: the whole job",
    ):
        assert words in head
    assert f"]({svg.name})" in md
    assert md.index("## Job") < md.index("## Sources")
    assert md.count("\n| job |") == 1  # job rank files summarised in one row, not one row each
    text = svg.read_text()
    assert text.startswith("<svg") and "<script" not in text and "compile" in text
    assert stat.S_IMODE(svg.stat().st_mode) == 0o600
