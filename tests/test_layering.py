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


def test_workload_modules_import_in_one_direction():
    """No cycle among workloads/ modules, and none imports the torchrun entry script."""
    package = "trnwatch.workloads"
    graph = {
        f"{package}.{path.stem}": {m for m in imported_modules(path) if m.startswith(package + ".")}
        for path in sorted((ROOT / "workloads").glob("*.py"))
    }
    graph = {module: {m for m in imports if m in graph and m != module} for module, imports in graph.items()}
    assert not [module for module, imports in graph.items() if f"{package}.train" in imports]

    def reachable(start: str) -> set[str]:
        seen, stack = set(), list(graph[start])
        while stack:
            module = stack.pop()
            if module not in seen:
                seen.add(module)
                stack.extend(graph[module])
        return seen

    assert [module for module in graph if module in reachable(module)] == []
