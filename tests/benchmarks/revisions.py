"""Another commit's code beside this tree's, for benchmarks that compare them side by side.

`package_tree(source, into)` lays a checkout's trnwatch out as it installs (from that checkout's
own package-dir table, so it cannot drift; folders linked whole, so package data such as the
stylesheet comes along), and a child process run with PYTHONPATH=into imports that code ahead of
the editable install. Run such a child from a folder with no `trnwatch/` in it: `python -m
trnwatch` puts its working directory first on the path. `rev_package_tree(rev, work)` does the
same for commit `rev` of this repository (`git archive`).
"""

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def package_tree(source: Path, into: Path) -> Path:
    """`source`'s trnwatch laid out as it installs, under `into` (returned), for PYTHONPATH."""
    package_dir = tomllib.loads((source / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    package = into / "trnwatch"
    package.mkdir(parents=True)
    for entry in (source / package_dir["trnwatch"]).iterdir():
        (package / entry.name).symlink_to(entry.resolve())
    for name, folder in package_dir.items():
        if name.count(".") == 1:  # trnwatch.X (deeper packages are folders inside these)
            (package / name.split(".")[1]).symlink_to((source / folder).resolve())
    return into


def rev_package_tree(rev: str, work: Path) -> Path:
    """Commit `rev`'s trnwatch as it installs, under `work` (exits saying why if git cannot)."""
    source = work / "rev-src"
    source.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True, check=False)
    if archive.returncode:
        sys.exit(f"--against {rev}: {archive.stderr.decode(errors='replace').strip()}")
    subprocess.run(["tar", "-x", "-C", str(source)], input=archive.stdout, check=True)
    return package_tree(source, work / "rev")
