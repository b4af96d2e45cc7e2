"""Benchmark: how long `py-spy dump` pauses the process it reads (what a stack capture costs a job).

    python tests/benchmarks/bench_stacks.py [--dumps 20] [--py-spy PATH]

A target Python process spins on `time.monotonic()` and prints every gap between two turns of
its loop longer than 1 ms, with when it began (CLOCK_MONOTONIC is one clock for every process).
The benchmark runs `py-spy dump --pid` (then `--native`) at it `--dumps` times, each waited for
and 0.3 s apart, noting when each ran; a dump's pause is the longest gap that overlaps it. The
same measure outside every dump is the machine's own noise (the scheduler preempting the spinning
process), printed beside it: on a shared 2-core machine read the pause against that baseline.
Also printed: how long each py-spy command took from start to exit (the capture's latency).
"""

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET = """
import time
def spin():
    last = time.monotonic()
    print("ready", flush=True)
    while True:
        now = time.monotonic()
        if now - last > 0.001:
            print(f"{last:.6f} {now - last:.6f}", flush=True)
        last = now
spin()
"""


def run(py_spy: str, dumps: int, native: bool) -> dict:
    target = subprocess.Popen([sys.executable, "-c", TARGET], stdout=subprocess.PIPE, text=True)
    assert target.stdout is not None and target.stdout.readline().strip() == "ready"
    windows, latencies = [], []
    time.sleep(0.5)
    for _ in range(dumps):
        begin = time.monotonic()
        done = subprocess.run(
            [py_spy, "dump", "--pid", str(target.pid), *(["--native"] if native else [])], capture_output=True
        )
        end = time.monotonic()
        assert done.returncode == 0, done.stderr.decode()
        windows.append((begin, end))
        latencies.append(end - begin)
        time.sleep(0.3)
    target.terminate()
    out, _ = target.communicate()
    gaps = [(float(a), float(b)) for a, b in (line.split() for line in out.splitlines() if line.strip())]

    def overlaps(start: float, gap: float, window: tuple[float, float]) -> bool:
        return start < window[1] and start + gap > window[0]

    outside = [gap for start, gap in gaps if not any(overlaps(start, gap, w) for w in windows)]
    per_dump = [max((gap for start, gap in gaps if overlaps(start, gap, w)), default=0.0) for w in windows]
    return {"per_dump": per_dump, "outside": outside, "latencies": latencies, "span_s": windows[-1][1] - windows[0][0]}


def ms(values: list[float]) -> str:
    if not values:
        return "none"
    return f"median {statistics.median(values) * 1e3:.1f} ms, max {max(values) * 1e3:.1f} ms (n={len(values)})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dumps", type=int, default=20)
    parser.add_argument("--py-spy", default=str(Path(sys.executable).with_name("py-spy")))
    args = parser.parse_args()
    for native in (False, True):
        r = run(args.py_spy, args.dumps, native)
        label = "py-spy dump --native" if native else "py-spy dump"
        print(f"{label}: pause per dump {ms(r['per_dump'])}; command took {ms(r['latencies'])}")
        print(f"  gaps > 1 ms outside the dumps over {r['span_s']:.1f} s: {ms(r['outside'])}")


if __name__ == "__main__":
    main()
