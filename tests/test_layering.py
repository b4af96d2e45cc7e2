"""The product's import direction: sources, ledger and views never import the workloads.

The simulator and the reference training job are what trnwatch watches; only the command
line's assembly (trnwatch/cli.py, for `demo` and `--sim`) may join them to the product.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from trnwatch.ledger import __all__ as LEDGER_FACE

ROOT = Path(__file__).resolve().parent.parent
LEDGER = "trnwatch.ledger"


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


# The collectors modules the model may import: the line, the typed records and their decoders, and
# the input bounds. None of them reads a file, pipe, process or socket.
LEDGER_MAY_IMPORT = {
    "trnwatch.collectors.decode",
    "trnwatch.collectors.job_events",
    "trnwatch.collectors.job_records",  # the msgspec records of trnwatch.job/1 the ledger folds
    "trnwatch.collectors.kernel_log",
    "trnwatch.collectors.limits",
    "trnwatch.collectors.lines",
    "trnwatch.collectors.neuron_monitor",
    "trnwatch.collectors.prometheus",
    "trnwatch.collectors.prometheus_text",
    "trnwatch.collectors.rank_process_records",  # the msgspec record of a rank-process pass
    "trnwatch.collectors.stack_records",
    "trnwatch.collectors.sysfs_sample",
    "trnwatch.collectors.topology",
    "trnwatch.collectors.scheduler",  # the SchedulerJob record; its reader takes the environment passed in
    # The sampler's constants: standard library only, so it also runs alone on a remote host;
    # the ledger calls none of its functions.
    "trnwatch.collectors.sysfs_reader",
}


def test_ledger_loads_no_io_and_no_textual():
    """Importing every ledger module, in a fresh interpreter, loads no Textual, no event loop or
    child-process machinery, no view, session or output module, and only the record and decoder
    modules of collectors/: the model folds typed records and never does I/O."""
    modules = sorted(f"trnwatch.ledger.{path.stem}" for path in (ROOT / "ledger").glob("*.py"))
    code = "".join(f"import {m}\n" for m in modules) + "import sys\nprint('\\n'.join(sorted(sys.modules)))\n"
    loaded = set(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    )
    assert "trnwatch.ledger.ledger" in loaded  # the walk imported the model
    assert sorted(m for m in loaded if m.split(".")[0] in ("textual", "asyncio", "subprocess")) == []
    product = {m for m in loaded if m.startswith("trnwatch.") and not m.startswith("trnwatch.ledger")}
    # outside.py sanitises strings and redacts secrets (redaction.py): pure functions, no I/O.
    assert sorted(product - LEDGER_MAY_IMPORT - {"trnwatch.collectors", "trnwatch.outside", "trnwatch.redaction"}) == []


def test_views_import_only_the_ledgers_face():
    """tui/ reads the model through `trnwatch.ledger` (ledger/__init__.py: the fold, its read model
    and the typed pieces the views lay out), never a ledger module by name; and the face names
    only what some view uses."""
    face = {f"{LEDGER}.{name}" for name in LEDGER_FACE}
    imports = {str(path.relative_to(ROOT)): imported_modules(path) for path in sorted((ROOT / "tui").glob("*.py"))}
    behind_the_face = {
        path: sorted(m for m in modules if m.startswith(LEDGER + ".") and m not in face)
        for path, modules in imports.items()
    }
    assert {path: modules for path, modules in behind_the_face.items() if modules} == {}
    assert sorted(face - set().union(*imports.values())) == []


def test_ledger_face_imports_each_name_on_first_use_from_its_module():
    """ledger/__init__.py's names come from their modules on first use (`_FACE`, what runs) and
    from the imports mypy reads (under TYPE_CHECKING): both say the same module for each name, the
    face resolves to the module's own object, and importing the package alone loads no ledger module."""
    import importlib

    import trnwatch.ledger as face

    tree = ast.parse((ROOT / "ledger" / "__init__.py").read_text())
    typed = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(LEDGER):
            for alias in node.names:
                typed[alias.name] = node.module.removeprefix(LEDGER).lstrip(".") or alias.name
    assert typed == face._FACE
    assert sorted(typed) == sorted(LEDGER_FACE)
    for name, module in typed.items():
        defined = importlib.import_module(f"{LEDGER}.{module}")
        assert getattr(face, name) is (defined if name == module else getattr(defined, name))
    code = "import sys, trnwatch.ledger\nprint(sorted(m for m in sys.modules if m.startswith('trnwatch.ledger.')))"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"
