"""Benchmark: python-hostlist against collectors/hostlist.py on the same expressions, side by side.

    .venv/bin/python -m pip download -q --no-deps python-hostlist==2.3.0 -d /tmp/hl
    .venv/bin/python tests/benchmarks/bench_hostlist.py /tmp/hl/python_hostlist-2.3.0.tar.gz [--memory]

python-hostlist is not a dependency (docs/hostlist.md says why): this command imports its
`hostlist.py` from the sdist given. Each row shows what each `expand_hostlist` returned or
raised and its wall time; with --memory, also its peak traced memory from a second run under
tracemalloc (minutes: tracemalloc slows the big expansions about tenfold). Measured on a shared
2-core machine: compare the two columns of a row, not rows across runs.
"""

import importlib.util
import sys
import tarfile
import tempfile
import time
import tracemalloc
from pathlib import Path

from trnwatch.collectors.hostlist import expand_hostlist

CASES = {
    "trn3-[001-036]": "trn3-[001-036]",
    "trn3-[001-002], trn3-010": "trn3-[001-002], trn3-010",
    "x[0-99999]": "x[0-99999]",
    "x[0-99999 x20 in one bracket]": "x[" + ",".join(["0-99999"] * 20) + "]",
    "h0[0-99999],...,h19[0-99999]": ",".join(f"h{i}[0-99999]" for i in range(20)),
    "x + [1] x 2000": "x" + "[1]" * 2000,
    "good,-oProxyCommand=x": "good,-oProxyCommand=x",
    "trn[1-2];reboot": "trn[1-2];reboot",
}


def load_python_hostlist(sdist: Path, into: Path):
    with tarfile.open(sdist) as archive:
        member = next(m for m in archive.getmembers() if m.name.endswith("/hostlist.py"))
        archive.extract(member, into, filter="data")
    spec = importlib.util.spec_from_file_location("python_hostlist", into / member.name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def outcome(expand, expression: str) -> str:
    try:
        hosts = expand(expression)
    except Exception as exc:  # the point is to show what each one raises
        return f"{type(exc).__name__}: {str(exc)[:50]}"
    return f"{len(hosts)} hosts" if len(hosts) > 3 else repr(hosts)


def measure(expand, expression: str, memory: bool) -> str:
    start_s = time.perf_counter()
    result = outcome(expand, expression)
    elapsed_ms = (time.perf_counter() - start_s) * 1e3
    if not memory:
        return f"{result} ({elapsed_ms:.1f} ms)"
    tracemalloc.start()
    outcome(expand, expression)
    peak_mib = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return f"{result} ({elapsed_ms:.1f} ms, {peak_mib:.1f} MiB)"


def main() -> int:
    args = sys.argv[1:]
    memory = "--memory" in args
    paths = [a for a in args if a != "--memory"]
    if len(paths) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as folder:
        theirs = load_python_hostlist(Path(paths[0]), Path(folder))
        print(f"| expression | python-hostlist {theirs.__version__} | collectors/hostlist.py |\n|---|---|---|")
        for label, expression in CASES.items():
            print(
                f"| `{label}` | {measure(theirs.expand_hostlist, expression, memory)} | {measure(expand_hostlist, expression, memory)} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
