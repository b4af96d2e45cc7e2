"""mypy over trnwatch as it installs: the package-dir layout staged as a symlink tree.

pyproject's `[tool.setuptools.package-dir]` maps trnwatch.collectors to collectors/, trnwatch.ledger
to ledger/ and so on, and mypy has no such mapping: run over the folders it would call them
`collectors.*`, and every `from trnwatch.collectors import ...` would not resolve. The editable
install does not help either: it maps them with an import hook, which mypy does not run. So this
builds the tree the wheel would install (trnwatch/collectors/... as symlinks to the repository's
files, read from that same package-dir table, so it cannot drift from it), runs mypy on it with
pyproject's `[tool.mypy]`, and prints the errors against the repository's paths.

    .venv/bin/python .ci/typecheck.py      # exit status is mypy's
"""

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# A fixed place (not a new temporary folder per run), so mypy's cache stays valid between runs.
STAGE = ROOT / ".mypy_cache" / "package-tree"


def stage(root: Path, stage_dir: Path) -> dict[str, str]:
    """Build the installed layout under `stage_dir` from pyproject's package table; returns each
    staged folder (relative, with a trailing slash) -> its folder in the repository."""
    setuptools = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    package_dir: dict[str, str] = setuptools["package-dir"]
    shutil.rmtree(stage_dir, ignore_errors=True)
    folders = {}
    for package in setuptools["packages"]:
        source = root / package_dir.get(package, package.replace(".", "/"))
        target = stage_dir / package.replace(".", "/")
        target.mkdir(parents=True, exist_ok=True)
        for module in sorted(source.glob("*.py")):
            (target / module.name).symlink_to(module)
        folders[f"{target.relative_to(stage_dir)}/"] = f"{source.relative_to(root)}/"
    return folders


def repository_path(line: str, folders: dict[str, str]) -> str:
    """A mypy output line with its staged path turned back into the repository's."""
    for staged, source in sorted(folders.items(), key=lambda item: -len(item[0])):
        if line.startswith(staged):
            return source + line[len(staged) :]
    return line


def main() -> int:
    folders = stage(ROOT, STAGE)
    command = [
        sys.executable,
        "-m",
        "mypy",
        "--config-file",
        str(ROOT / "pyproject.toml"),
        "--cache-dir",
        str(ROOT / ".mypy_cache"),
        "-p",
        "trnwatch",
    ]
    env = {**os.environ, "MYPYPATH": str(STAGE)}
    done = subprocess.run(command, cwd=STAGE, env=env, capture_output=True, text=True)
    for line in done.stdout.splitlines():
        print(repository_path(line, folders))
    sys.stderr.write(done.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
