"""Benchmark: time to name the fault, per demo scenario, as a person sees it in tmux at 80x24.

    python tests/benchmarks/bench_fault.py [--scenarios S ...] [--timeout S]

Starts `trnwatch demo --scenario S` in a detached tmux session of 80x24 for every scenario at
once (`tmux new -d -x 80 -y 24`), presses nothing, and reads the screen with `capture-pane -p`
every 0.25 s. The fault is named when the fault line (the screen's second line) starts with the
scenario's label and names its site (host 7 chip 2, rank 120 where a rank is named; host 7 for
host-loss). Onset is the
scenario's onset tick after the first screen (the demo's tick 0 starts as its session starts, one
report per second). Reported per scenario: seconds from onset until the fault line named it, and
the line itself. Not a test: it runs for up to `--timeout` seconds and prints figures.
"""

import argparse
import shutil
import subprocess
import sys
import tempfile
import time

TRNWATCH = [sys.executable, "-m", "trnwatch"]
# scenario -> (onset tick, labels the fault line may start with, the site it must name, target s)
SITE = "sim-trn3-gen2-us-07"
SCENARIOS = {
    "hang": (30, ("LATE rank 120", "STALLED rank 120"), f"{SITE}/2", 10),
    "host-loss": (45, ("STALE", "LOST", "DEAD", "LATE", "STALLED"), SITE, 10),
    "ecc": (50, ("ECC",), f"{SITE}/2", 10),
    "hbm-leak": (20, ("LEAK",), f"{SITE}/2", 40),
    "straggler": (30, ("SLOW rank 120",), f"{SITE}/2", 40),
}


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=False).stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=list(SCENARIOS))
    parser.add_argument("--timeout", type=float, default=120.0, help="give up on a scenario after this (s)")
    args = parser.parse_args()
    if shutil.which("tmux") is None:
        print("tmux is not installed", file=sys.stderr)
        return 2
    sessions = {s: f"trnwatch-bench-{s}" for s in args.scenarios}
    first_screen: dict[str, float] = {}
    named: dict[str, tuple[float, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        command = " ".join(TRNWATCH)
        for scenario, name in sessions.items():
            tmux(
                "new",
                "-d",
                "-x",
                "80",
                "-y",
                "24",
                "-s",
                name,
                f"{command} demo --scenario {scenario} --duration {args.timeout + 30:.0f} --receipt {tmp}/{scenario}.json",
            )
        start = time.monotonic()
        try:
            while len(named) < len(sessions) and time.monotonic() - start < args.timeout:
                for scenario, name in sessions.items():
                    if scenario in named:
                        continue
                    lines = tmux("capture-pane", "-p", "-t", name).splitlines()
                    now = time.monotonic()
                    if scenario not in first_screen and lines and "ULTRASERVER" in lines[0]:
                        first_screen[scenario] = now
                    onset, labels, site, _ = SCENARIOS[scenario]
                    fault = lines[1].strip() if len(lines) > 1 else ""
                    if scenario in first_screen and fault.startswith(labels) and site in fault:
                        named[scenario] = (now - first_screen[scenario] - onset, lines[1].strip())
                time.sleep(0.25)
        finally:
            for name in sessions.values():
                tmux("kill-session", "-t", name)
    print("time to name the fault: trnwatch demo in tmux 80x24, no key pressed, screen read every 0.25 s")
    print(f"{'scenario':<10} {'onset':>6} {'named after':>12} {'target':>7}  fault line")
    for scenario in sessions:
        onset, _, _, target = SCENARIOS[scenario]
        if scenario in named:
            after, line = named[scenario]
            verdict = "met" if after <= target else "NOT met"
            print(f"{scenario:<10} {onset:>5}s {after:>11.1f}s {target:>6}s  {line}  [{verdict}]")
        else:
            print(f"{scenario:<10} {onset:>5}s {'never':>12} {target:>6}s  (not named within {args.timeout:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
