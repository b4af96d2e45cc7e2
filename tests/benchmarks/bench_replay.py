"""Benchmark: `trnwatch replay R --headless` of a demo recording, end to end, this tree beside
another commit (issue 32 item 4: 100,000 lines a second or more; the 60 s demo in 1.5 s).

    python tests/benchmarks/bench_replay.py [--recording R | --demo-s 60] [--against REV] [--rounds 3]

Without --recording, `trnwatch demo --headless --record` makes one (36 hosts, 576 ranks) first.
Each round runs this tree's replay, then REV's (tests/benchmarks/revisions.py stages its code), as
fresh processes from an empty folder, after one unmeasured run of each that writes the bytecode
(as an install has it; PYTHONDONTWRITEBYTECODE is dropped for the children): wall time from exec
to exit (Python start, imports, the replay, the receipt), and the child's CPU time beside it
(less moved by a busy machine than the wall; the target is the wall). Each side's receipt says
how many lines it folded: a commit older than the recording's format may skip what it does not know, and then
the two figures do not compare (said). Lines are the recording's lines; lines/s = lines / wall time. The machine
is shared: `uptime` is printed, and only the two sides taken side by side compare.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from trnwatch.collectors.lines import Line  # noqa: E402
from trnwatch.collectors.recording_reader import Recording  # noqa: E402
from tests.benchmarks.revisions import package_tree, rev_package_tree  # noqa: E402

TARGET_LINES_PER_S = 100_000
TARGET_DEMO_S = 1.5


def demo_recording(folder: Path, seconds: float) -> Path:
    path = folder / "demo.trnrec"
    subprocess.run(
        [sys.executable, "-m", "trnwatch", "demo", "--headless", "--duration", str(seconds), "--record", str(path)]
        + ["--receipt", str(folder / "demo.json")],
        check=True,
        capture_output=True,
        timeout=seconds + 120,
    )
    return path


def replay_s(recording: Path, env: dict, receipt: Path) -> tuple[float, float]:
    """Wall time and CPU time (user + system) of one replay; exits if it wrote no receipt."""
    work = receipt.parent
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "trnwatch", "replay", str(recording), "--headless", "--receipt", str(receipt)],
        env=env,
        cwd=work,
        check=False,
        capture_output=True,
        timeout=600,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    if not receipt.exists():  # a new path each run: an existing one is refused (exit 2)
        sys.exit(f"no receipt from {env.get('PYTHONPATH')}")
    return wall, cpu


def folded(receipt: Path) -> int:
    """Lines the replay folded (its receipt's sources' reports): a commit that reads less of a
    newer recording (one that skips entries it does not know) is not doing the same work."""
    return sum(source.get("reports", 0) for source in json.loads(receipt.read_text())["sources"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--recording", type=Path, help="a recording to replay (default: a new demo recording)")
    p.add_argument("--demo-s", type=float, default=60.0, help="length of the demo recording made (default 60)")
    p.add_argument("--against", metavar="REV", help="also this commit's code, side by side, alternating")
    p.add_argument("--rounds", type=int, default=3, help="runs of each side (default 3)")
    args = p.parse_args()
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        recording = args.recording.resolve() if args.recording else demo_recording(work, args.demo_s)
        rec = Recording(recording)
        try:
            lines = sum(1 for item in rec.items(None, None) if isinstance(item, Line))
        finally:
            rec.close()
        # Bytecode is written (and read) as a user's install has it: the first round's imports
        # compile, the later ones do not.
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
        sides = {"this tree": {**env, "PYTHONPATH": str(package_tree(ROOT, work / "this"))}}
        if args.against:
            sides[args.against] = {**env, "PYTHONPATH": str(rev_package_tree(args.against, work))}
        times: dict[str, list[float]] = {name: [] for name in sides}
        cpus: dict[str, list[float]] = {name: [] for name in sides}
        lines_folded: dict[str, int] = {}
        run = work / "run"
        run.mkdir()
        for k, side_env in enumerate(sides.values()):  # unmeasured: writes the bytecode
            replay_s(recording, side_env, run / f"side{k}-warm.json")
        for n in range(args.rounds):
            for k, (name, side_env) in enumerate(sides.items()):
                receipt = run / f"side{k}-round{n}.json"
                wall, cpu = replay_s(recording, side_env, receipt)
                times[name].append(wall)
                cpus[name].append(cpu)
                lines_folded[name] = folded(receipt)
        print(f"{recording.name}: {lines:,} lines")
        for name, walls in times.items():
            best = min(walls)
            print(
                f"{name:>12}: best {best:.2f} s ({lines / best:,.0f} lines/s), all "
                + ", ".join(f"{w:.2f}" for w in walls)
                + f"; CPU best {min(cpus[name]):.2f} s, all "
                + ", ".join(f"{c:.2f}" for c in cpus[name])
                + f"; {lines_folded[name]:,} lines folded"
                + f"; target {TARGET_LINES_PER_S:,} lines/s, the 60 s demo in {TARGET_DEMO_S} s"
            )
        if len(set(lines_folded.values())) > 1:
            print(
                "the sides folded different numbers of lines: their times do not compare (a recording newer than a side)"
            )
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
