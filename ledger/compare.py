"""`trnwatch compare`: two receipts, compared only at a matching boundary.

Pure functions over two parsed receipts (JSON objects). Receipts written before the `boundary`,
`segments` and `goodput` fields existed are still read: their boundary is derived from the fields
they have, and whatever cannot be derived reads as unknown.

Boundary rule: every field of BOUNDARY_FIELDS known on both sides must be equal; any difference
refuses the comparison unless the field is allowed (`--allow-mismatch`), and then the whole
result is labelled "not like for like" with those fields. A field unknown on either side cannot be
checked: it is listed as unverified, never silently taken as equal.

Noise (NOISE_METHOD): step-time figures and steady tokens/s get a 95% bootstrap interval of their
percent change, resampling each receipt's steady step-time samples (segments.steady.
step_time_samples_s) BOOTSTRAP_RESAMPLES times with a fixed seed, so the same two receipts always
give the same answer. A change "exceeds noise" when 0 lies outside that interval. Other figures
carry no samples: their noise is unknown (null).
"""

import math
import random
from dataclasses import asdict, dataclass, field
from statistics import fmean

from trnwatch.ledger.boundary import (
    BOUNDARY_FIELDS,
    COMPILER_KEYS,
    FRAMEWORK_KEYS,
    hosts_lnc,
    one_value,
    parallel_text,
    version_of,
)

# names people may type for a field (`--allow-mismatch world_size`)
FIELD_ALIASES = {
    "world_size": "ranks",
    "world": "ranks",
    "chip_count": "chips",
    "seq": "seq_len",
    "sequence_length": "seq_len",
    "parameters": "params",
    "compiler": "compiler_version",
    "framework": "framework_version",
}
BOOTSTRAP_RESAMPLES = 1000
# Samples of each receipt the bootstrap resamples, at most (a fixed-seed draw from them): its
# cost grows with their number, and 100,000 samples took minutes. Fewer samples give a wider
# interval, never a narrower one.
BOOTSTRAP_MAX_SAMPLES = 2000
MIN_SAMPLES = 5
# A receipt of 4,096 Trn3 hosts (16,384 chips, their runtimes, 32,768 ranks) is about 30 MB; a
# file past this is no receipt trnwatch wrote, and parsing it whole costs about 8 x its size.
MAX_RECEIPT_BYTES = 64 << 20
RECEIPT_SCHEMA = "trnwatch.receipt/1"  # the only receipt schema there is; compare reads no other
CONFIDENCE = 0.95
NOISE_METHOD = (
    f"95% percentile-bootstrap interval of the percent change ({BOOTSTRAP_RESAMPLES} resamples of each "
    "receipt's steady step-time samples, at most 2,000 drawn with a fixed seed); tokens/s from the ratio of mean step times "
    "(tokens per step taken as equal); needs at least 5 samples per receipt, else noise unknown"
)


class CompareError(ValueError):
    """A receipt that cannot be compared at all (not a trnwatch receipt); the message says why."""


@dataclass
class Figure:
    name: str
    unit: str
    better: str  # "higher" or "lower"
    baseline: float | None
    candidate: float | None
    change: float | None = None
    change_pct: float | None = None
    noise_pct: tuple[float, float] | None = None  # interval of the percent change
    exceeds_noise: bool | None = None


@dataclass
class IncidentCount:
    kind: str
    baseline: int
    candidate: int


def incident_counts(baseline: dict, candidate: dict) -> list[IncidentCount]:
    """Incidents by kind on each side, kinds in the order first seen (baseline, then candidate)."""
    counts: dict[str, list[int]] = {}
    for side, receipt in enumerate((baseline, candidate)):
        for incident in receipt.get("incidents") or []:
            counts.setdefault(str(incident["kind"]), [0, 0])[side] += 1
    return [IncidentCount(kind, b, c) for kind, (b, c) in counts.items()]


@dataclass
class Comparison:
    refused: bool
    like_for_like: bool
    mismatched: list[tuple[str, object, object]]  # (field, baseline, candidate)
    allowed: list[str]
    unverified: list[tuple[str, object, object]]
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # Incidents by kind on each side (receipts before `incidents[]` existed count none).
    incidents: list[IncidentCount] = field(default_factory=list)
    # The scheduler job of each side in words (boundary.scheduler; None: outside an allocation, or
    # a receipt before the field): information, never a mismatch, as two runs are two jobs.
    scheduler_jobs: tuple[str | None, str | None] = (None, None)

    def to_json(self) -> dict:
        out = asdict(self)
        out["mismatched"] = [{"field": f, "baseline": b, "candidate": c} for f, b, c in self.mismatched]
        out["unverified"] = [{"field": f, "baseline": b, "candidate": c} for f, b, c in self.unverified]
        out["noise_method"] = NOISE_METHOD
        return out


def field_name(name: str) -> str:
    """A boundary field from what a user typed; raises CompareError for an unknown name."""
    key = FIELD_ALIASES.get(name.strip().lower().replace("-", "_"), name.strip().lower().replace("-", "_"))
    if key not in BOUNDARY_FIELDS:
        raise CompareError(f"unknown boundary field {name!r}; fields: {', '.join(BOUNDARY_FIELDS)}")
    return key


def _check_receipt(r: object, which: str) -> dict:
    if not isinstance(r, dict) or not str(r.get("schema", "")).startswith("trnwatch.receipt/"):
        raise CompareError(f"{which} is not a trnwatch receipt (no 'schema': 'trnwatch.receipt/...')")
    if r["schema"] != RECEIPT_SCHEMA:
        raise CompareError(
            f"{which} is a {str(r['schema'])[:40]!r} receipt; this trnwatch compares {RECEIPT_SCHEMA} receipts only"
        )
    return r


def boundary_of(receipt: dict) -> dict[str, object]:
    """The boundary fields of a receipt: its `boundary` section, or for a receipt written before
    it existed, what its other fields say (None where they say nothing)."""
    b = receipt.get("boundary")
    if isinstance(b, dict):
        return {f: b.get(f) for f in BOUNDARY_FIELDS}
    job = receipt.get("job") or {}
    hosts = receipt.get("hosts") or []
    model = job.get("model") or {}
    parallel = job.get("parallel")
    ranks = job.get("ranks") or {}
    lnc = job.get("lnc")
    if lnc is None:
        lnc = hosts_lnc(h.get("lnc") for h in hosts)
    scope: str | None
    if job:
        scope, chips, n_hosts, ultraservers = "job", None, ranks.get("hosts"), None
    else:
        us = receipt.get("ultraservers") or []
        scope = "none" if not hosts else "host" if len(hosts) == 1 else None
        chips, n_hosts, ultraservers = len(receipt.get("chips") or []) or None, len(hosts), len(us)
    return {
        "scope": scope,
        "chips": chips,
        "hosts": n_hosts,
        "ultraservers": ultraservers,
        "ranks": ranks.get("world_size"),
        "fabric": None,
        "instance_type": one_value(h.get("instance_type") for h in hosts),
        "device_type": one_value(h.get("device_type") for h in hosts),
        "lnc": lnc,
        "compiler_version": version_of(job.get("versions"), COMPILER_KEYS),
        "framework_version": version_of(job.get("versions"), FRAMEWORK_KEYS),
        "model": model.get("name"),
        "params": model.get("params"),
        "precision": job.get("precision"),
        "global_batch": job.get("global_batch"),
        "micro_batch": job.get("micro_batch"),
        "seq_len": job.get("seq_len"),
        "sequence_lengths": None,
        "parallel": parallel_text(parallel),
        "evidence": receipt.get("evidence"),
    }


# ---- figures --------------------------------------------------------------------------------------


def _steady(r: dict) -> dict:
    """tokens/s, step-time percentiles and samples: the steady segment, else the old job throughput."""
    seg = (r.get("segments") or {}).get("steady")
    if seg:
        return {
            "tokens_per_s": seg.get("tokens_per_s"),
            "step_time_s": seg.get("step_time_s") or {},
            "samples": seg.get("step_time_samples_s") or [],
        }
    t = (r.get("job") or {}).get("throughput") or {}
    return {"tokens_per_s": t.get("tokens_per_s"), "step_time_s": t.get("step_time_s") or {}, "samples": []}


def _nearest_rank(ordered: list[float], q: float) -> float:
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def _interval(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    tail = (1 - CONFIDENCE) / 2 * 100
    return round(_nearest_rank(ordered, tail), 3), round(_nearest_rank(ordered, 100 - tail), 3)


def bootstrap_pct_change(
    baseline: list[float], candidate: list[float], statistic, invert: bool = False, resamples: int = BOOTSTRAP_RESAMPLES
) -> tuple[float, float] | None:
    """95% bootstrap interval of the percent change of `statistic` from baseline to candidate (of
    its reciprocal with `invert`, e.g. throughput from step time); None with too few samples."""
    if len(baseline) < MIN_SAMPLES or len(candidate) < MIN_SAMPLES:
        return None
    baseline, candidate = _bounded(baseline), _bounded(candidate)
    rng = random.Random(0)
    changes = []
    for _ in range(resamples):
        b = statistic(rng.choices(baseline, k=len(baseline)))
        c = statistic(rng.choices(candidate, k=len(candidate)))
        if b <= 0 or c <= 0:
            continue
        changes.append(100 * ((b / c) if invert else (c / b)) - 100)
    return _interval(changes) if changes else None


def _bounded(samples: list[float]) -> list[float]:
    """At most BOOTSTRAP_MAX_SAMPLES of `samples`, drawn without replacement with a fixed seed (not
    evenly spaced: a run with a period, e.g. gradient accumulation, would alias)."""
    if len(samples) <= BOOTSTRAP_MAX_SAMPLES:
        return samples
    return random.Random(1).sample(samples, BOOTSTRAP_MAX_SAMPLES)


def _percentile_of(q: float):
    return lambda values: _nearest_rank(sorted(values), q)


def _figure(name: str, unit: str, better: str, baseline, candidate, noise: tuple[float, float] | None = None) -> Figure:
    f = Figure(name, unit, better, baseline, candidate)
    if baseline is None or candidate is None:
        return f
    f.change = round(candidate - baseline, 6)
    f.change_pct = round(100 * (candidate - baseline) / baseline, 3) if baseline else None
    if noise is not None:
        f.noise_pct = noise
        f.exceeds_noise = not noise[0] <= 0 <= noise[1]
    return f


def _collectives(r: dict) -> dict[str, dict]:
    coll = (r.get("job") or {}).get("collectives")
    return coll if isinstance(coll, dict) else {}


def _cold_compile_s(r: dict) -> float | None:
    cold = (r.get("segments") or {}).get("cold_compile")
    if cold is not None:
        return cold.get("seconds")
    return (r.get("job") or {}).get("cold_compile_s")


def _restart_s(r: dict) -> float | None:
    seg = r.get("segments")
    if seg is not None:
        times = [x.get("time_to_first_step_s") for x in seg.get("restarts") or []]
    else:
        times = [x.get("restart_to_first_step_s") for x in (r.get("job") or {}).get("restarts") or []]
    times = [t for t in times if t is not None]
    return fmean(times) if times else None


def _chip_figures(r: dict) -> tuple[float | None, float | None]:
    chips = r.get("chips") or []
    peaks = [c.get("hbm_peak_bytes") for c in chips if c.get("hbm_peak_bytes") is not None]
    utils = [c.get("util_mean_pct") for c in chips if c.get("util_mean_pct") is not None]
    return (max(peaks) / 2**30 if peaks else None), (fmean(utils) if utils else None)


def figures(baseline: dict, candidate: dict) -> tuple[list[Figure], list[str]]:
    """Every figure of both receipts with its change, and notes on what could not be compared."""
    notes: list[str] = []
    b, c = _steady(baseline), _steady(candidate)
    out = [
        _figure(
            "steady tokens/s",
            "tokens/s",
            "higher",
            b["tokens_per_s"],
            c["tokens_per_s"],
            bootstrap_pct_change(b["samples"], c["samples"], fmean, invert=True),
        )
    ]
    for q in (50, 90, 99):
        key = f"p{q}"
        out.append(
            _figure(
                f"step time {key}",
                "s",
                "lower",
                b["step_time_s"].get(key),
                c["step_time_s"].get(key),
                bootstrap_pct_change(b["samples"], c["samples"], _percentile_of(q)),
            )
        )
    if len(b["samples"]) < MIN_SAMPLES or len(c["samples"]) < MIN_SAMPLES:
        notes.append("step-time noise unknown: a receipt carries fewer than 5 steady step-time samples")
    cb, cc = _collectives(baseline), _collectives(candidate)
    for op in sorted(set(cb) | set(cc)):
        for key in ("p50", "p99"):
            out.append(
                _figure(
                    f"collective {op} latency {key}",
                    "s",
                    "lower",
                    ((cb.get(op) or {}).get("latency_s") or {}).get(key),
                    ((cc.get(op) or {}).get("latency_s") or {}).get(key),
                )
            )
    out.append(_figure("cold compile", "s", "lower", _cold_compile_s(baseline), _cold_compile_s(candidate)))
    out.append(_figure("restart to first step (mean)", "s", "lower", _restart_s(baseline), _restart_s(candidate)))
    gb, gc = baseline.get("goodput") or {}, candidate.get("goodput") or {}
    out.append(_figure("goodput", "%", "higher", gb.get("goodput_pct"), gc.get("goodput_pct")))
    out.append(_figure("productive step time", "s", "higher", gb.get("productive_s"), gc.get("productive_s")))
    for cause in sorted(set(gb.get("badput_s") or {}) | set(gc.get("badput_s") or {})):
        out.append(
            _figure(
                f"badput {cause.replace('_', ' ')}",
                "s",
                "lower",
                (gb.get("badput_s") or {}).get(cause),
                (gc.get("badput_s") or {}).get(cause),
            )
        )
    fb, fc = baseline.get("failure_rate") or {}, candidate.get("failure_rate") or {}
    for key, name in (
        ("rank_failures_per_hour", "rank failures per hour"),
        ("restarts_per_hour", "restarts per hour"),
        ("execution_errors_per_1000", "execution errors per 1,000 executions"),
    ):
        out.append(_figure(name, "", "lower", fb.get(key), fc.get(key)))
    chips_b, chips_c = len(baseline.get("chips") or []), len(candidate.get("chips") or [])
    if chips_b and chips_b == chips_c:
        (hb, ub), (hc, uc) = _chip_figures(baseline), _chip_figures(candidate)
        out.append(_figure("per-chip HBM peak (max over chips)", "GiB", "lower", hb, hc))
        out.append(_figure("per-chip utilisation (mean of chip means)", "%", "higher", ub, uc))
    else:
        notes.append(f"per-chip HBM and utilisation not compared: chip scopes differ ({chips_b} vs {chips_c} chips)")
    return out, notes


def compare(baseline: dict, candidate: dict, allow: set[str] | None = None) -> Comparison:
    """Check the boundary first; compute the figures only when it matches (or the differing
    fields are all allowed)."""
    _check_receipt(baseline, "the baseline")
    _check_receipt(candidate, "the candidate")
    allow = {field_name(name) for name in allow or set()}
    try:
        return _compare(baseline, candidate, allow)
    except (AttributeError, TypeError, ValueError, KeyError, ZeroDivisionError) as exc:
        # A receipt edited by hand or cut short: say so rather than crash.
        raise CompareError(f"a receipt has a malformed field ({type(exc).__name__}: {exc})") from None


def scheduler_job(receipt: dict) -> str | None:
    """The receipt's scheduler job in words, None when it has none."""
    boundary = receipt.get("boundary")
    job = boundary.get("scheduler") if isinstance(boundary, dict) else None
    if job is None:
        return None
    from trnwatch.collectors.scheduler import SCHEDULER_JOB, job_words  # pydantic: only for a receipt with a job

    return job_words(SCHEDULER_JOB.validate_python(job))


def _compare(baseline: dict, candidate: dict, allow: set[str]) -> Comparison:
    bb, bc = boundary_of(baseline), boundary_of(candidate)
    mismatched, unverified = [], []
    for key in BOUNDARY_FIELDS:
        vb, vc = bb[key], bc[key]
        if vb is None or vc is None:
            unverified.append((key, vb, vc))
        elif vb != vc:
            mismatched.append((key, vb, vc))
    allowed = [key for key, _, _ in mismatched if key in allow]
    refused = len(allowed) < len(mismatched)
    result = Comparison(
        refused=refused,
        like_for_like=not mismatched,
        mismatched=mismatched,
        allowed=allowed,
        unverified=unverified,
        scheduler_jobs=(scheduler_job(baseline), scheduler_job(candidate)),
    )
    if not refused:
        result.figures, result.notes = figures(baseline, candidate)
        result.incidents = incident_counts(baseline, candidate)
    return result


def slower_beyond(result: Comparison, pct: float) -> bool:
    """True when steady tokens/s fell by more than `pct` percent beyond noise: the whole noise
    interval lies below -pct (without samples, the point change does)."""
    tps = next((f for f in result.figures if f.name == "steady tokens/s"), None)
    if tps is None or tps.change_pct is None:
        return False
    upper = tps.noise_pct[1] if tps.noise_pct is not None else tps.change_pct
    return upper < -pct


# ---- rendering ------------------------------------------------------------------------------------


def _show(value: object) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return "".join(ch for ch in str(value) if ch.isprintable()).replace("|", "\\|")


def _with_unit(value: float | None, unit: str) -> str:
    """A figure with its unit; seconds under one second in milliseconds."""
    if value is None:
        return "unknown"
    if unit == "s" and abs(value) < 1:
        return f"{value * 1e3:.4g} ms"
    return f"{_show(value)} {unit}".rstrip()


def refusal_message(result: Comparison) -> str:
    """Why the comparison was refused: every mismatched field with both values."""
    lines = ["trnwatch compare: refused: the receipts are not at the same boundary:"]
    for key, vb, vc in result.mismatched:
        if key not in result.allowed:
            lines.append(f"  {key}: baseline {_show(vb)}, candidate {_show(vc)}")
    lines.append(
        "Compare like with like, or name the fields that may differ: --allow-mismatch FIELD[,FIELD] "
        "(the output is then labelled 'not like for like')."
    )
    return "\n".join(lines)


def _noise(f: Figure) -> str:
    if f.exceeds_noise is None or f.noise_pct is None:
        return "unknown"
    lo, hi = f.noise_pct
    return f"{'yes' if f.exceeds_noise else 'no'} ({lo:+.2f}% to {hi:+.2f}%)"


def render_markdown(result: Comparison, baseline_name: str, candidate_name: str) -> str:
    lines = ["# trnwatch compare", ""]
    if result.like_for_like:
        lines.append("**Like for like**: every boundary field known on both sides matches.")
    else:
        fields = ", ".join(f"{k} ({_show(b)} vs {_show(c)})" for k, b, c in result.mismatched)
        lines.append(
            f"**NOT LIKE FOR LIKE**: allowed to differ: {fields}. These figures do not support a like-for-like claim."
        )
    if result.unverified:
        lines.append("")
        lines.append(
            "Boundary fields unknown on one or both sides (not verified): "
            + ", ".join(f"{k} ({_show(b)} vs {_show(c)})" for k, b, c in result.unverified)
        )
    job_b, job_c = result.scheduler_jobs
    if job_b is not None or job_c is not None:
        lines.append("")
        lines.append(
            f"Scheduler jobs ({'the same' if job_b == job_c else 'different'}; information, not a boundary field): "
            f"baseline {_show(job_b or 'none')}, candidate {_show(job_c or 'none')}."
        )
    lines += [
        "",
        f"Baseline: `{_show(baseline_name)}`; candidate: `{_show(candidate_name)}`.",
        "",
        "| figure | baseline | candidate | change | change % | exceeds noise |",
        "|---|---|---|---|---|---|",
    ]
    for f in result.figures:
        pct = "n/a" if f.change_pct is None else f"{f.change_pct:+.2f}%"
        # A change of a percentage is in percentage points, told apart from the relative change %.
        change_unit = "pp" if f.unit == "%" else f.unit
        change = "n/a" if f.change is None else ("+" if f.change >= 0 else "-") + _with_unit(abs(f.change), change_unit)
        lines.append(
            f"| {_show(f.name)} ({f.better} is better) | {_with_unit(f.baseline, f.unit)} | "
            f"{_with_unit(f.candidate, f.unit)} | {change} | {pct} | {_noise(f)} |"
        )
    lines += ["", "| incidents by kind | baseline | candidate |", "|---|---|---|"]
    lines += [f"| {_show(c.kind)} | {c.baseline} | {c.candidate} |" for c in result.incidents]
    if not result.incidents:
        lines.append("| none | 0 | 0 |")
    lines += [""] + [f"- {note}" for note in result.notes]
    if any(f.unit == "%" and f.change is not None for f in result.figures):
        lines.append("- pp: percentage points, the change of a figure that is itself a percentage.")
    lines += [f"- Noise: {NOISE_METHOD}.", ""]
    return "\n".join(lines)
