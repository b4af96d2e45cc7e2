"""Benchmark: ingest cost per host report, as a ratio to bare `json.loads` of the same bytes.

    python tests/benchmarks/bench_ingest.py [--reports N] [--rounds R] [--process-reports M]  # ~2 min
    python tests/benchmarks/bench_ingest.py --against REV   # and commit REV's whole process beside it

Two measurements, each side by side with `json.loads` in the same run (this machine is shared
and noisy, so a ratio measured side by side is the figure that means something):

1. In process, per topology: decode (msgspec, typed, with every bound) and ingest
   (`Ledger.ingest(line)`: decode + fold) against `json.loads` of the same report texts
   (simulated steady-state hosts, different ticks), interleaved in rounds, best round of each,
   timed in CPU time of this process.
2. Whole process, Trn3 Gen2 host reports: `trnwatch watch --stdin --headless` reading M reports
   on stdin, from a file and through a pipe (`cat FILE |`, as `neuron-monitor |` would), against
   a bare Python process doing `json.loads` on each line of the same input. Each process is timed
   by its own CPU time (user + system, from wait4; `cat` is not counted); the cost per report is
   the difference between a run of M reports and a run of 10 (start-up, imports and the receipt
   cancel out). Each round runs both sides back to back; the figure is the median over R rounds
   of each round's ratio, with the range (a run's start-up varies by tens of milliseconds, which
   moved a single round's ratio by up to 0.4x at 1,000 reports). The in-process `json.loads`
   figure is shown too. With `--against REV`, commit REV's `trnwatch watch` runs in each round
   beside this tree's (both imported from their own staged package trees, tests/benchmarks/
   revisions.py), and the median of the rounds' this/REV ratios says which side costs more.

The projected CPU share is best-round ingest time x hosts x 1 report/s, as a share of one core.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trnwatch.collectors.lines import Line
from trnwatch.collectors.neuron_monitor import decode_report
from trnwatch.ledger.ledger import Ledger
from trnwatch.workloads.sim.fleet import SimHost
from trnwatch.workloads.sim.topology import get_topology

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # for tests.* helpers when run as a script
from tests.benchmarks.revisions import ROOT, package_tree, rev_package_tree  # noqa: E402

STEADY_TICK = 25  # past compile and warmup: every core busy, models loaded
SMALL_RUN = 10  # reports in the run whose cost is subtracted (start-up, receipt)
PROCESS_TARGET = 1.0  # issue 10: whole process <= 1.0x json.loads per Gen2 report


def _texts(topology_name: str, reports: int) -> list[str]:
    host = SimHost(get_topology(topology_name), 0, seed=0, scenario="healthy")
    return [host.report_line(STEADY_TICK + i) for i in range(reports)]


def _per_report_s(fn, texts) -> float:
    """CPU time per text (process time: time this process was not scheduled does not count)."""
    start = time.process_time()
    fn(texts)
    return (time.process_time() - start) / len(texts)


def measure(topology_name: str, reports: int, rounds: int) -> dict:
    texts = _texts(topology_name, reports)

    def loads(batch):
        for t in batch:
            json.loads(t)

    def decode(batch):
        for t in batch:
            decode_report(t)

    def ingest(batch):
        ledger = Ledger("simulated")
        for i, t in enumerate(batch):
            ledger.ingest(Line("bench", "neuron-monitor", 1000.0 + i, t))

    results = {"loads": [], "decode": [], "ingest": []}
    for _ in range(rounds):  # interleave so drift on a noisy machine hits all three alike
        results["loads"].append(_per_report_s(loads, texts))
        results["decode"].append(_per_report_s(decode, texts))
        results["ingest"].append(_per_report_s(ingest, texts))
    best = {k: min(v) for k, v in results.items()}
    return {"topology": topology_name, "report_bytes": sum(len(t) for t in texts) // len(texts), **best}


LOADS_PROCESS = "import json, sys\nfor line in sys.stdin.buffer:\n    json.loads(line)\n"


def _process_cpu_s(argv: list[str], stdin_path: Path, pipe: bool, env: dict[str, str]) -> float:
    """CPU time (user + system) of one child process reading `stdin_path` (through `cat` if `pipe`),
    run in the input's folder: `python -m trnwatch` puts its working directory first on the path,
    so from this checkout's root it would import this checkout's `trnwatch/` whatever PYTHONPATH says."""
    with open(stdin_path, "rb") as stdin:
        cat = subprocess.Popen(["cat"], stdin=stdin, stdout=subprocess.PIPE) if pipe else None
        proc = subprocess.Popen(
            argv,
            stdin=cat.stdout if cat else stdin,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=stdin_path.parent,
        )
        if cat:
            cat.stdout.close()
        _, status, usage = os.wait4(proc.pid, 0)
        if cat:
            cat.wait()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{argv[:4]} exited with {proc.returncode}")
    return usage.ru_utime + usage.ru_stime


def measure_process(reports: int, rounds: int, against: str | None) -> dict:
    texts = _texts("trn3-gen2-us", reports)
    with tempfile.TemporaryDirectory(prefix="trnwatch-bench-") as tmp:
        work = Path(tmp)
        big, small = work / "big.jsonl", work / "small.jsonl"
        big.write_text("\n".join(texts) + "\n")
        small.write_text("\n".join(texts[:SMALL_RUN]) + "\n")
        # each run's receipt gets a name of its own under $XDG_STATE_HOME (an existing path is
        # refused); not the children's working folder itself, whose trnwatch/receipts would be the
        # `trnwatch` that `python -m trnwatch` imports from there (it failed: ImportError, exit 1)
        env = {**os.environ, "XDG_STATE_HOME": str(work / "state")}
        watch = [sys.executable, "-m", "trnwatch", "watch", "--stdin", "--headless"]
        sides = {"watch": (watch, env), "loads": ([sys.executable, "-c", LOADS_PROCESS], env)}
        if against:  # both trees staged alike, so neither side pays for the editable install's import hook
            sides["watch"] = (watch, {**env, "PYTHONPATH": str(package_tree(ROOT, work / "this"))})
            sides["against"] = (watch, {**env, "PYTHONPATH": str(rev_package_tree(against, work))})
        per_report: dict[str, list[float]] = {f"{name}_{how}": [] for name in sides for how in ("file", "pipe")}
        per_report["loads"] = []
        for _ in range(rounds):
            for name, (argv, side_env) in sides.items():
                for how in ("file", "pipe"):
                    pipe = how == "pipe"
                    cost = _process_cpu_s(argv, big, pipe, side_env) - _process_cpu_s(argv, small, pipe, side_env)
                    per_report[f"{name}_{how}"].append(cost / (reports - SMALL_RUN))
            start = time.process_time()
            for t in texts:
                json.loads(t)
            per_report["loads"].append((time.process_time() - start) / reports)
    ratios = {
        f"{name}_{how}": [w / j for w, j in zip(per_report[f"{name}_{how}"], per_report[f"loads_{how}"], strict=True)]
        for name in sides
        if name != "loads"
        for how in ("file", "pipe")
    }
    median = {k: statistics.median(v) for k, v in per_report.items()}
    return {"report_bytes": sum(len(t) for t in texts) // len(texts), "ratios": ratios, **median}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reports", type=int, default=200, help="report texts per in-process round (default 200)")
    p.add_argument(
        "--rounds", type=int, default=7, help="interleaved rounds; the best of each side is kept (default 7)"
    )
    p.add_argument(
        "--process-reports",
        type=int,
        default=3000,
        help="Gen2 reports per whole-process run (default 3000; 0 skips it)",
    )
    p.add_argument("--against", metavar="REV", help="also run commit REV's whole process in each round, side by side")
    args = p.parse_args()
    print("In process: decode = msgspec typed decode with bounds; ingest = decode + fold (Ledger.ingest)")
    print(
        f"{'topology':<16}{'bytes':>8}{'json.loads':>12}{'decode':>10}{'ingest':>10}{'ingest/loads':>14}"
        f"{'CPU 36 hosts':>14}{'CPU 1152 hosts':>16}"
    )
    for name in ("trn3-gen2-us", "trn3-gen1-us", "trn2.48xlarge"):
        m = measure(name, args.reports, args.rounds)
        ratio = m["ingest"] / m["loads"]
        print(
            f"{name:<16}{m['report_bytes']:>8}{m['loads'] * 1e6:>10.0f}us{m['decode'] * 1e6:>8.0f}us"
            f"{m['ingest'] * 1e6:>8.0f}us{ratio:>13.2f}x{m['ingest'] * 36 * 100:>13.2f}%{m['ingest'] * 1152 * 100:>15.1f}%"
        )
    if args.process_reports:
        m = measure_process(args.process_reports, args.rounds, args.against)
        print(
            f"\nWhole process, {args.process_reports} Trn3 Gen2 reports of {m['report_bytes']} bytes on stdin, "
            f"CPU per report (run of N minus run of {SMALL_RUN}), medians of {args.rounds} rounds:"
        )
        for how in ("file", "pipe"):
            watch_s, loads_s, ratios = m[f"watch_{how}"], m[f"loads_{how}"], m["ratios"][f"watch_{how}"]
            ratio = statistics.median(ratios)
            print(
                f"  stdin from a {how}: trnwatch watch --stdin --headless {watch_s * 1e6:5.0f}us, "
                f"python json.loads per line {loads_s * 1e6:5.0f}us: {ratio:.2f}x "
                f"(rounds {min(ratios):.2f}-{max(ratios):.2f}x; target <= {PROCESS_TARGET:.1f}x: "
                f"{'met' if ratio <= PROCESS_TARGET else 'NOT met'}; "
                f"{watch_s / m['loads']:.2f}x json.loads in this process, {m['loads'] * 1e6:.0f}us)"
            )
            if args.against:
                rev_ratios = m["ratios"][f"against_{how}"]
                this_over_rev = statistics.median(
                    a / b for a, b in zip(m["ratios"][f"watch_{how}"], rev_ratios, strict=True)
                )
                print(
                    f"    {args.against}: {m[f'against_{how}'] * 1e6:5.0f}us, {statistics.median(rev_ratios):.2f}x "
                    f"json.loads (rounds {min(rev_ratios):.2f}-{max(rev_ratios):.2f}x); this tree / {args.against}, "
                    f"median of the rounds: {this_over_rev:.2f}"
                )
        print(f"  load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
