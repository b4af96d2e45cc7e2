"""`trnwatch compare`: like-for-like figures, refusals naming the field, labelled exceptions, and
receipts written before the boundary existed (ledger/compare.py, trnwatch/cli.py)."""

import json

import pytest

from trnwatch import cli
from trnwatch.collectors.lines import Line
from trnwatch.ledger.compare import BOOTSTRAP_MAX_SAMPLES, bootstrap_pct_change, compare
from trnwatch.ledger.compare import render_markdown as compare_markdown
from trnwatch.ledger.ledger import Ledger
from trnwatch.ledger.receipt import build_receipt
from trnwatch.ledger.receipt_markdown import render_markdown
from tests import job_story as js
from tests import reports as R

T0 = 1000.0
STEPS = 30


def device_lines(chips: int, seconds: int, host: str = "trn-a") -> list[Line]:
    """One neuron-monitor stream for `host` with `chips` chips (LNC=2: 4 logical cores each)."""
    out = []
    for t in range(seconds):
        cores = range(4 * chips)
        report = R.report(
            [R.runtime(7, "train", list(cores), util={c: 80.0 for c in cores}, executions=R.executions())],
            hardware=R.hardware_trn3(chips=chips),
            system_data=R.system(chips=chips),
            instance_info=R.instance(instance_id=host),
        )
        out.append(Line("local", "neuron-monitor", T0 + t, R.line(report)))
    return out


def jittered(step_s: float, n: int = STEPS) -> list[float]:
    """Step times with a little deterministic spread, as real steps have."""
    return [round(step_s * (1 + 0.01 * ((i * 7) % 5 - 2)), 6) for i in range(n)]


def receipt_of(step_times: list[float], mode: str = "live", ranks: int = 2, chips: int = 2, **start) -> dict:
    ledger = Ledger(mode)
    events = js.steady_run(step_times, t0=T0, ranks=ranks, chips=chips, **start)
    seconds = int(max(e["ts"] for e in events) - T0) + 1
    for line in sorted(device_lines(chips, seconds) + js.lines(events), key=lambda line: line.received_s):
        ledger.ingest(line)
    return json.loads(build_receipt(ledger, "eof", written_at_s=0.0).to_json())


def run_cli(tmp_path, capsys, baseline: dict, candidate: dict, *options: str) -> tuple[int, str, str]:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(baseline))
    b.write_text(json.dumps(candidate))
    code = cli.main(["compare", str(a), str(b), *options])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def base() -> dict:
    return receipt_of(jittered(1.0))


def test_two_runs_differing_only_in_step_time_compare_with_the_right_percent_change(tmp_path, capsys, base):
    slower = receipt_of(jittered(1.1))
    result = compare(base, slower)
    assert not result.refused and result.like_for_like
    figures = {f.name: f for f in result.figures}
    p50 = figures["step time p50"]
    assert p50.change_pct == pytest.approx(10.0, abs=1e-6)
    assert p50.exceeds_noise is True
    tps = figures["steady tokens/s"]
    assert tps.change_pct == pytest.approx(100 * (1 / 1.1 - 1), abs=1e-3)
    assert tps.exceeds_noise is True and tps.noise_pct[1] < 0
    code, out, _ = run_cli(tmp_path, capsys, base, slower)
    assert code == 0 and "Like for like" in out and "| step time p50 (lower is better) | 1 s | 1.1 s |" in out
    assert run_cli(tmp_path, capsys, base, slower, "--fail-if-slower", "5")[0] == 1
    assert run_cli(tmp_path, capsys, base, slower, "--fail-if-slower", "15")[0] == 0


def test_the_same_run_twice_is_within_noise(base):
    result = compare(base, base)
    for f in result.figures:
        assert f.exceeds_noise in (None, False), f.name


@pytest.mark.parametrize(
    "field, candidate_args, shown",
    [
        ("precision", {"precision": "fp32"}, "precision: baseline bf16, candidate fp32"),
        ("ranks", {"ranks": 4, "chips": 2}, "ranks: baseline 2, candidate 4"),
        ("chips", {"chips": 1}, "chips: baseline 2, candidate 1"),
        ("evidence", {"mode": "replayed"}, "evidence: baseline live, candidate replayed"),
    ],
)
def test_a_mismatched_boundary_is_refused_naming_the_field(tmp_path, capsys, base, field, candidate_args, shown):
    other = receipt_of(jittered(1.0), **candidate_args)
    code, out, err = run_cli(tmp_path, capsys, base, other)
    assert code == 3
    assert shown in err
    assert out == ""  # no figures are printed for a refused comparison
    assert field in {key for key, _, _ in compare(base, other).mismatched}


def test_allow_mismatch_precision_compares_and_labels_the_output(tmp_path, capsys, base):
    fp32 = receipt_of(jittered(2.0), precision="fp32")
    code, out, _ = run_cli(tmp_path, capsys, base, fp32, "--allow-mismatch", "precision")
    assert code == 0
    assert "NOT LIKE FOR LIKE" in out and "precision (bf16 vs fp32)" in out
    code, out, _ = run_cli(tmp_path, capsys, base, fp32, "--allow-mismatch", "precision", "--json")
    data = json.loads(out)
    assert data["like_for_like"] is False and data["allowed"] == ["precision"]
    assert {f["name"] for f in data["figures"]} >= {"steady tokens/s", "goodput", "step time p99"}


def test_an_unknown_field_name_is_a_usage_error(tmp_path, capsys, base):
    code, _, err = run_cli(tmp_path, capsys, base, base, "--allow-mismatch", "colour")
    assert code == 2 and "unknown boundary field 'colour'" in err


def test_a_receipt_written_before_the_boundary_existed_is_still_compared(tmp_path, capsys, base):
    """A /1 receipt without the fields this change added: its boundary is derived from the job
    section and hosts; what cannot be derived (fabric, chips of the job) reads as unknown."""
    old = {
        k: v
        for k, v in base.items()
        if k not in ("boundary", "segments", "goodput", "failure_rate", "sequence_lengths", "timeline")
    }
    old["chips"] = [
        {k: v for k, v in c.items() if k not in ("device_latency_s", "flops_mean_per_s", "peak_flops_per_s", "mfu_pct")}
        for c in base["chips"]
    ]
    result = compare(old, base)
    assert not result.refused
    unverified = {key for key, _, _ in result.unverified}
    assert {"fabric", "chips"} <= unverified
    tps = next(f for f in result.figures if f.name == "steady tokens/s")
    assert tps.baseline is not None and tps.exceeds_noise is None  # the old receipt carries no samples
    code, out, _ = run_cli(tmp_path, capsys, old, base)
    assert code == 0 and "not verified" in out and "fabric (unknown vs" in out
    assert "None" not in out


def test_bootstrap_interval_is_deterministic_and_brackets_zero_for_equal_samples():
    a = jittered(1.0)
    assert bootstrap_pct_change(a, a, max) == bootstrap_pct_change(a, a, max)
    lo, hi = bootstrap_pct_change(a, list(reversed(a)), lambda v: sorted(v)[len(v) // 2])
    assert lo <= 0 <= hi
    assert bootstrap_pct_change(a[:3], a, max) is None


def test_receipt_markdown_never_prints_python_none(base):
    ledger = Ledger("live")  # device-only, no job: many absent figures
    for line in device_lines(1, 3):
        ledger.ingest(line)
    for receipt in (
        build_receipt(ledger, "eof", written_at_s=0.0),
        build_receipt(Ledger("live"), "eof", written_at_s=0.0),
    ):
        md = render_markdown(receipt, "r.svg")
        assert "None" not in md
    ledger = Ledger("live")
    for line in js.lines(js.steady_run(jittered(1.0), t0=T0)):
        ledger.ingest(line)
    assert "None" not in render_markdown(build_receipt(ledger, "eof", written_at_s=0.0), "r.svg")


def test_a_receipt_from_before_the_boundary_existed_compares_with_unknowns_named(tmp_path, capsys):
    """The fixture was written by the code of commit 1df22c6 (tests/fixtures/receipts/README.md)."""
    from pathlib import Path

    old = json.loads((Path(__file__).parent / "fixtures" / "receipts" / "receipt-v1-before-boundary.json").read_text())
    assert "boundary" not in old
    result = compare(old, old)
    assert not result.refused and result.like_for_like
    assert {"fabric", "chips", "sequence_lengths"} <= {key for key, _, _ in result.unverified}
    tps = next(f for f in result.figures if f.name == "steady tokens/s")
    assert tps.baseline == pytest.approx(1013.86, abs=0.01) and tps.exceeds_noise is None
    code, out, _ = run_cli(tmp_path, capsys, old, old)
    assert code == 0 and "fabric (unknown vs unknown)" in out and "None" not in out
    other = dict(old, evidence="live")
    code, _, err = run_cli(tmp_path, capsys, old, other)
    assert code == 3 and "evidence: baseline simulated, candidate live" in err


def test_a_malformed_receipt_is_a_clear_error_not_a_crash(tmp_path, capsys, base):
    broken = dict(base, job=["not", "an", "object"], segments={"steady": {"step_time_samples_s": ["x"] * 9}})
    code, out, err = run_cli(tmp_path, capsys, broken, base)
    assert code == 2 and "malformed field" in err and out == ""


def test_a_change_of_a_percentage_is_said_in_percentage_points():
    result = compare(receipt_of(jittered(1.0)), receipt_of(jittered(1.2)))
    goodput = next(f for f in result.figures if f.name == "goodput")
    markdown = compare_markdown(result, "a.json", "b.json")
    row = next(line for line in markdown.splitlines() if line.startswith("| goodput "))
    points = goodput.candidate - goodput.baseline
    # The points (73.47 - 69.77) and the relative change (+5.31%) side by side, told apart.
    assert f"| {points:+.4g} pp | {goodput.change_pct:+.2f}% |" in row
    assert "- pp: percentage points" in markdown


def test_a_receipt_of_another_schema_version_is_refused_not_taken_as_like_for_like(tmp_path, capsys, base):
    code, out, err = run_cli(tmp_path, capsys, dict(base, schema="trnwatch.receipt/9"), base)
    assert code == 2 and out == ""
    assert "'trnwatch.receipt/9' receipt; this trnwatch compares trnwatch.receipt/1 receipts only" in err


def test_a_deeply_nested_receipt_is_a_clear_error_not_a_traceback(tmp_path, capsys, base):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text('{"schema": "trnwatch.receipt/1", "x": ' + "[" * 200_000 + "]" * 200_000 + "}")
    b.write_text(json.dumps(base))
    code = cli.main(["compare", str(a), str(b)])
    err = capsys.readouterr().err
    assert code == 2 and "nested deeper than the reader goes" in err and "Traceback" not in err


def test_the_bootstrap_resamples_at_most_its_bound_of_a_huge_sample_list():
    """100,000 samples took minutes: each resample now draws from at most 2,000, evenly spaced."""
    samples = jittered(1.0, 100_000)

    def mean_of_bounded(values: list[float]) -> float:
        assert len(values) <= BOOTSTRAP_MAX_SAMPLES, len(values)
        return sum(values) / len(values)

    lo, hi = bootstrap_pct_change(samples, list(reversed(samples)), mean_of_bounded)
    assert lo <= 0 <= hi


def test_incidents_are_counted_by_kind(tmp_path, capsys, base):
    from trnwatch.ledger.findings import Finding, Site
    from trnwatch.ledger.incidents import IncidentLog

    log = IncidentLog()
    ecc = Site(host_id="i-1", host="trn-a", chip=0)
    log.update([Finding("critical", "ecc-uncorrected", "chip", "ECC", ecc, "1 uncorrected ECC error", "")], T0)
    log.update([Finding("error", "host-lost", "host", "LOST", Site(host_id="i-2", host="trn-b"), "gone", "")], T0 + 1)
    incidents = [json.loads(i.model_dump_json()) for i in log.incidents()]
    code, out, _ = run_cli(tmp_path, capsys, base, {**base, "incidents": incidents})
    assert code == 0
    assert "| ecc-uncorrected | 0 | 1 |" in out and "| host-lost | 0 | 1 |" in out
    code, out, _ = run_cli(tmp_path, capsys, base, base, "--json")
    assert json.loads(out)["incidents"] == []


def test_a_receipt_over_the_size_bound_is_refused_before_it_is_parsed(tmp_path, capsys, base):
    """400,000 chips took 1.3 GB to compare: a receipt over MAX_RECEIPT_BYTES (a 4,096-host Trn3
    receipt is about 30 MB) is refused in words, read no further than the bound."""
    from trnwatch.ledger.compare import MAX_RECEIPT_BYTES

    a, b = tmp_path / "a.json", tmp_path / "b.json"
    text = json.dumps(base)
    with open(a, "w") as f:  # a valid receipt, padded past the bound with JSON whitespace
        f.write(text[:-1] + " " * (MAX_RECEIPT_BYTES + 1) + "}")
    b.write_text(text)
    code = cli.main(["compare", str(a), str(b)])
    err = capsys.readouterr().err
    assert code == 2 and f"{a} is over 64 MiB: larger than any receipt trnwatch writes" in err
    assert "Traceback" not in err
