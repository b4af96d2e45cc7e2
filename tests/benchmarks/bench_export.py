"""Benchmark: `trnwatch export` against `replay --headless` of the same recording, and its memory
against the recording's length.

    python tests/benchmarks/bench_export.py [--demo-s 60] [--rounds 3] [--ticks 60,600] [--formats ...]
    python tests/benchmarks/bench_export.py --skip-demo --recording R   # every format of an existing recording

1. A `--demo-s` recording of the demo (`trnwatch demo --headless --record`: 36 hosts, 144 chips,
   576 ranks, the simulated sysfs). In `--rounds` alternating rounds, each in a fresh child
   process: `trnwatch export R --scope chip --format csv -o FILE` and `trnwatch replay R
   --headless --receipt FILE`, wall time, CPU (user + sys, wait4) and peak RSS of each. Target:
   the export's wall time <= 1/50 of the recording's span.
2. Memory against length: the demo scenario's lines (tests/recordings.py write_scenario_recording,
   the same 36 hosts and 576 ranks without the wall clock) for each of `--ticks`, exported to
   each of `--formats` (chip scope; trace draws every scope): peak RSS, wall, CPU and output size.
   Streaming means the peak stays flat as the recording grows.

The machine is shared (2 cores, 8 engineers): its load is printed before and after; ratios of
figures taken side by side are what mean something.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # for tests.* helpers when run as a script
from tests.recordings import write_scenario_recording

TRNWATCH = [sys.executable, "-m", "trnwatch"]


def measured(args: list[str]) -> dict:
    """Run a child to its end: wall s, CPU s (user + sys), peak RSS MiB; raises if it fails."""
    start = time.perf_counter()
    child = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    err = child.stderr.read().decode() if child.stderr else ""
    if child.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({child.returncode}): {err}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "rss_mib": usage.ru_maxrss / 1024}


def span_of(path: Path) -> float:
    from trnwatch.collectors.recording_reader import Recording

    recording = Recording(path)
    first, last = recording.span()
    recording.close()
    return last - first


def demo_recording(folder: Path, seconds: float) -> Path:
    path = folder / "demo.trnrec"
    subprocess.run(
        [
            *TRNWATCH,
            "demo",
            "--headless",
            "--duration",
            str(seconds),
            "--record",
            str(path),
            "--receipt",
            str(folder / "demo.json"),
        ],
        check=True,
        capture_output=True,
        timeout=seconds + 300,
    )
    return path


def export_vs_replay(folder: Path, demo_s: float, rounds: int) -> None:
    path = demo_recording(folder, demo_s)
    span = span_of(path)
    exports, replays = [], []
    for i in range(rounds):
        out = folder / f"chips-{i}.csv"
        exports.append(measured([*TRNWATCH, "export", str(path), "--scope", "chip", "-o", str(out)]))
        replays.append(
            measured([*TRNWATCH, "replay", str(path), "--headless", "--receipt", str(folder / f"r-{i}.json")])
        )
        out.unlink()
    print(f"demo recording: {span:.1f} s span, {path.stat().st_size / 1e6:.1f} MB")
    for name, runs in (("export --scope chip (csv)", exports), ("replay --headless", replays)):
        wall = statistics.median(r["wall_s"] for r in runs)
        cpu = statistics.median(r["cpu_s"] for r in runs)
        rss = max(r["rss_mib"] for r in runs)
        walls = ", ".join(f"{r['wall_s']:.2f}" for r in runs)
        print(
            f"  {name:28s} wall {wall:6.2f} s ({walls}) = 1/{span / wall:.0f} of the span, cpu {cpu:6.2f} s, peak {rss:.0f} MiB"
        )
    ratio = statistics.median(e["wall_s"] / r["wall_s"] for e, r in zip(exports, replays, strict=True))
    print(f"  export / replay wall, median of rounds: {ratio:.3f}")


def each_format(path: Path, folder: Path, formats: list[str]) -> None:
    print(f"{path.name}: {span_of(path):.0f} s span, {path.stat().st_size / 1e6:.1f} MB recorded")
    for fmt in formats:
        out = folder / f"out-{path.stem}.{fmt}"
        r = measured([*TRNWATCH, "export", str(path), "--format", fmt, "-o", str(out)])
        size = out.stat().st_size
        out.unlink()
        print(
            f"  {fmt:12s} {size / 1e6:9.1f} MB  wall {r['wall_s']:7.2f} s  cpu {r['cpu_s']:7.2f} s  "
            f"peak {r['rss_mib']:5.0f} MiB",
            flush=True,
        )


def memory_by_length(folder: Path, ticks: list[int], formats: list[str]) -> None:
    for n in ticks:
        path = folder / f"scenario-{n}.trnrec"
        write_scenario_recording(path, "healthy", n)
        each_format(path, folder, formats)
        path.unlink()
        Path(f"{path}.idx").unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--demo-s", type=float, default=60.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ticks", default="60,600", help="recording lengths for the memory part, comma-separated")
    parser.add_argument("--formats", default="csv,jsonl,parquet,openmetrics,trace")
    parser.add_argument("--skip-demo", action="store_true", help="only the memory part")
    parser.add_argument("--recording", type=Path, help="measure every format on this recording instead of part 2's")
    args = parser.parse_args()
    print("load before:", os.getloadavg())
    with tempfile.TemporaryDirectory(prefix="bench-export-") as tmp:
        folder = Path(tmp)
        if not args.skip_demo:
            export_vs_replay(folder, args.demo_s, args.rounds)
        if args.recording is not None:
            each_format(args.recording, folder, args.formats.split(","))
        else:
            memory_by_length(folder, [int(t) for t in args.ticks.split(",")], args.formats.split(","))
    print("load after:", os.getloadavg())


if __name__ == "__main__":
    main()
