"""The demo's receipt carries every field of issue 12, and its Markdown and SVG are readable."""

import json
import stat
import subprocess
import sys

import pytest

from trnwatch.ledger.boundary import BOUNDARY_FIELDS

# compile (10 ticks) and warm-up (10 ticks) come first: a few steady steps need about 26 s.
DEMO_SECONDS = 26


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    path = tmp_path_factory.mktemp("demo") / "demo.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "trnwatch",
            "demo",
            "--headless",
            "--duration",
            str(DEMO_SECONDS),
            "--receipt",
            str(path),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
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
