"""Benchmark: the CPU of one judgement of the findings at 1,152 hosts (32 simulated Gen2 UltraServers).

    python tests/benchmarks/bench_judgement.py [--ultraservers 32] [--judgements 10]
    python tests/benchmarks/bench_judgement.py --against OTHER/.venv/bin/python [--rounds 3]

What the session does once a second (`Session.observe`): `Ledger.read(now_s).findings` after
every host folded one more report, so every per-report figure is computed anew, as at scale
where every host reports every second. The ledger first folds HISTORY_TICKS reports of every
host (1 s apart, the simulator's steady training), so each chip's windows are full; then each
judgement follows one more report of every host (the fold timed apart) and is timed by this
process's CPU time (`time.process_time`), so the figure holds on a loaded machine better than
wall time does. Prints the median and range per judgement and per fold of one report of every
host.

With `--against PYTHON`, a Python whose `trnwatch` is other code (another checkout's venv, e.g.
`git worktree add ../base REV` and its own `.venv`), both run in alternating fresh child
processes (`--rounds` each, the side that goes first alternating) and the ratio is printed per
round. Imports nothing but `trnwatch`, so each child measures its own interpreter's code.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time

HISTORY_TICKS = 32  # the HBM trend's 30 s window, full, at 1 report a second
START_TICK = 25  # steady training: every core busy
TICKS_GENERATED = 4  # distinct report lines per host, cycled (generating them costs ~1 s per tick)


def measure(ultraservers: int, judgements: int) -> dict:
    """Fold the fleet's history, then time `judgements` judgements and the folds before them."""
    from trnwatch.collectors.lines import Line
    from trnwatch.ledger.ledger import Ledger
    from trnwatch.workloads.sim.exporter import fleet

    hosts = fleet("trn3-gen2-us", ultraservers, 0, "healthy", 1.0)
    ledger = Ledger("live", {h.report(0)["instance_info"]["instance_id"]: f"us-{h.seed:02d}" for h in hosts})
    ticks = [[h.report_line(START_TICK + k) for h in hosts] for k in range(TICKS_GENERATED)]
    t0 = 1_800_000_000.0

    def fold(tick: int) -> None:
        for i, text in enumerate(ticks[tick % TICKS_GENERATED]):
            ledger.ingest(Line(f"h{i}", "neuron-monitor", t0 + tick, text))

    for tick in range(HISTORY_TICKS):
        fold(tick)
    judge_s, fold_s, findings = [], [], 0
    for k in range(judgements):
        tick = HISTORY_TICKS + k
        start = time.process_time()
        fold(tick)
        fold_s.append(time.process_time() - start)
        read = ledger.read(t0 + tick + 0.5)
        start = time.process_time()
        findings = len(read.findings)
        judge_s.append(time.process_time() - start)
    return {"hosts": len(hosts), "judge_s": judge_s, "fold_s": fold_s, "findings": findings}


def _ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.1f} ms ({min(values) * 1000:.1f}-{max(values) * 1000:.1f})"


def against(python: str, ultraservers: int, judgements: int, rounds: int) -> None:
    sides = {"this tree": sys.executable, "other": python}
    found: dict[str, list[dict]] = {side: [] for side in sides}
    for r in range(rounds):
        order = list(sides) if r % 2 == 0 else list(sides)[::-1]
        for side in order:
            child = subprocess.run(
                [
                    sides[side],
                    __file__,
                    "--child",
                    "--ultraservers",
                    str(ultraservers),
                    "--judgements",
                    str(judgements),
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            if child.returncode:
                sys.exit(f"{side} ({sides[side]}): exit {child.returncode}: {child.stderr.strip()[-2000:]}")
            found[side].append(json.loads(child.stdout))
        this, other = found["this tree"][-1], found["other"][-1]
        print(
            f"round {r + 1}: judgement this tree {_ms(this['judge_s'])}, other {_ms(other['judge_s'])}, "
            f"ratio {statistics.median(this['judge_s']) / statistics.median(other['judge_s']):.3f}; fold of one "
            f"report per host this tree {_ms(this['fold_s'])}, other {_ms(other['fold_s'])}; findings "
            f"{this['findings']} / {other['findings']}",
            flush=True,
        )
    for side in sides:
        runs = found[side]
        print(
            f"{side}: judgement median {_ms([s for run in runs for s in run['judge_s']])}, fold {_ms([s for run in runs for s in run['fold_s']])} "
            f"({runs[0]['hosts']} hosts, {judgements} judgements x {rounds} rounds)"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--ultraservers", type=int, default=32, help="simulated Gen2 UltraServers, 36 hosts each (default 32)"
    )
    p.add_argument("--judgements", type=int, default=10, help="judgements timed per run (default 10)")
    p.add_argument("--against", metavar="PYTHON", help="also this Python's trnwatch, side by side, alternating")
    p.add_argument("--rounds", type=int, default=3, help="with --against: runs of each side (default 3)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(measure(args.ultraservers, args.judgements)))
    elif args.against:
        against(args.against, args.ultraservers, args.judgements, args.rounds)
    else:
        run = measure(args.ultraservers, args.judgements)
        print(
            f"{run['hosts']} hosts: one judgement {_ms(run['judge_s'])} of CPU (median, range of {args.judgements}); "
            f"the fold of one report of every host before it {_ms(run['fold_s'])}; {run['findings']} findings"
        )


if __name__ == "__main__":
    main()
