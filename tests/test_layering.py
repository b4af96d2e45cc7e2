"""The product's import direction: sources, ledger and views never import the workloads.

The simulator and the reference training job are what trnwatch watches; only the command
line's assembly (trnwatch/cli.py, for `demo` and `--sim`) may join them to the product.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


@pytest.mark.parametrize("folder", ["collectors", "ledger", "tui"])
def test_product_folder_imports_no_workload(folder):
    offenders = {
        str(path.relative_to(ROOT)): sorted(m for m in imported_modules(path) if m.startswith("trnwatch.workloads"))
        for path in sorted((ROOT / folder).glob("*.py"))
    }
    assert {path: mods for path, mods in offenders.items() if mods} == {}
