"""Benchmark: how long the commands that draw no screen take from exec to exit (issue 32 item 4:
at most 0.2 s each), this tree beside another commit, as a user's install runs them.

    python tests/benchmarks/bench_startup.py [--against REV] [--rounds 15] [--editable]

Commands: `--version`, `schema job`, `compare R R` (two copies of one receipt), `replay --info F`
and `snapshot --replay F` (F: a 2 s demo recording of one trn2.48xlarge host, made first, so the
snapshot's own work is small and its figure is mostly the start).

A side is a normal install, not the editable one: a venv made here without pip, whose
site-packages holds that tree's trnwatch laid out as it installs (tests/benchmarks/revisions.py)
and reaches the dependencies through a path file naming this interpreter's site-packages; the
other path files of that folder are copied (setuptools' distutils shim costs every Python start
in a 3.11 venv), the editable install's finder is not. `--editable` adds this interpreter as it
is, with the editable finder (this tree only). Each round runs every command on every side,
alternating, after one unmeasured run of each (bytecode written). The figure is the median wall
time of the rounds; `python -c pass` of the same interpreter is printed as the floor. The
machine is shared: `uptime` is printed before and after, and only sides taken side by side compare.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from tests.benchmarks.revisions import package_tree, rev_package_tree

TARGET_S = 0.2


def installed_python(tree: Path, into: Path) -> Path:
    """A venv at `into` with `tree`'s trnwatch in its site-packages, the dependencies from this
    interpreter's; returns its python."""
    venv.create(into, with_pip=False, symlinks=True)
    python = into / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    deps = Path(sysconfig.get_path("purelib"))
    (site / "trnwatch").symlink_to(tree / "trnwatch")
    for pth in deps.glob("*.pth"):
        if not pth.name.startswith("__editable__"):
            shutil.copy(pth, site / pth.name)
    (site / "00-trnwatch-deps.pth").write_text(f"{deps}\n")
    return python


def make_fixtures(work: Path) -> tuple[Path, Path]:
    recording, receipt = work / "small.trnrec", work / "small.json"
    subprocess.run(
        [sys.executable, "-m", "trnwatch", "demo", "--headless", "--topology", "trn2.48xlarge", "--duration", "2"]
        + ["--record", str(recording), "--receipt", str(receipt)],
        cwd=work,
        check=True,
        capture_output=True,
        timeout=120,
    )
    return recording, receipt


def wall_s(argv: list[str], cwd: Path) -> float:
    # Bytecode is written and read, as an install has it (this shell may set PYTHONDONTWRITEBYTECODE).
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, timeout=120, check=False)
    wall = time.perf_counter() - start
    if done.returncode:
        sys.exit(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.decode(errors='replace')[-500:]}")
    return wall


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--against", metavar="REV", help="also this commit's code, side by side, alternating")
    p.add_argument("--rounds", type=int, default=15, help="measured runs of each command on each side (default 15)")
    p.add_argument("--editable", action="store_true", help="also this interpreter with the editable install")
    args = p.parse_args()
    print("before:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        recording, receipt = make_fixtures(work)
        sides = {"this tree": installed_python(package_tree(ROOT, work / "this"), work / "venv-this")}
        if args.against:
            sides[args.against] = installed_python(rev_package_tree(args.against, work), work / "venv-rev")
        if args.editable:
            sides["editable"] = Path(sys.executable)
        commands = {
            "python -c pass": ["-c", "pass"],
            "--version": ["-m", "trnwatch", "--version"],
            "schema job": ["-m", "trnwatch", "schema", "job"],
            "compare": ["-m", "trnwatch", "compare", str(receipt), str(receipt)],
            "replay --info": ["-m", "trnwatch", "replay", "--info", str(recording)],
            "snapshot": ["-m", "trnwatch", "snapshot", "--replay", str(recording)],
        }
        run = work / "run"  # no trnwatch/ here: `python -m` puts the working folder first on the path
        run.mkdir()
        times: dict[tuple[str, str], list[float]] = {}
        for n in range(args.rounds + 1):
            for command, argv in commands.items():
                for side, python in sides.items():
                    wall = wall_s([str(python), *argv], run)
                    if n:  # the first round writes the bytecode
                        times.setdefault((command, side), []).append(wall)
        print(f"median of {args.rounds} runs (best), s; target {TARGET_S} s for each command")
        print(f"{'':>16}" + "".join(f"{side:>22}" for side in sides))
        for command in commands:
            cells = []
            for side in sides:
                walls = times[(command, side)]
                cells.append(f"{statistics.median(walls):.3f} ({min(walls):.3f})")
            print(f"{command:>16}" + "".join(f"{cell:>22}" for cell in cells))
    print("after: ", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
