"""Benchmark: SSH fan-out to 36 hosts against a local OpenSSH server.

    python tests/benchmarks/bench_ssh.py [--hosts 36] [--period 1] [--steady 20]

Starts the tests' throwaway sshd (tests/sshd.py: every ssh_config alias plays one simulated
host) and `trnwatch watch --hosts 'trn-[00-35]' --headless` as a child process, then measures:

- time to all live: from starting trnwatch to its "36 of 36 up" progress line (and to the first);
- steady CPU over --steady seconds once all are live, all in the same window: trnwatch itself,
  its ssh clients, and the remote side split into sshd sessions (the transport's cost on each
  training host) and the simulators (standing in for neuron-monitor);
- trnwatch's CPU per report against the bare in-process ingest of the same reports
  (`Ledger.ingest`, best of 3, measured right after): the ratio is what the transport (pipes,
  line splitting, 36 readers on one event loop) adds on top of parsing and folding;
- trnwatch's resident memory.

Needs /usr/sbin/sshd and ssh (apt-get install openssh-server openssh-client). This machine is
noisy: compare the side-by-side figures of one run, not figures across runs.
"""

import argparse
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # for tests.* helpers when run as a script

from trnwatch.collectors.lines import Line
from trnwatch.ledger.ledger import Ledger
from trnwatch.workloads.sim.fleet import SimHost
from trnwatch.workloads.sim.topology import get_topology
from tests.sshd import MISSING, SIM_REMOTE_COMMAND, LocalSshd


def cpu_s(processes: list[psutil.Process]) -> float:
    total = 0.0
    for p in processes:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def ingest_s_per_report(hosts: int) -> float:
    """Bare in-process ingest of steady-state reports of the same simulated hosts."""
    topology = get_topology("trn3-gen2-us")
    texts = [SimHost(topology, h, 0, "healthy", 1.0).report_line(25 + r) for r in range(3) for h in range(hosts)]
    best = float("inf")
    for _ in range(3):
        ledger = Ledger("live")
        start = time.perf_counter()
        for i, text in enumerate(texts):
            ledger.ingest(Line(f"h{i % hosts}", "neuron-monitor", 1000.0 + i, text))
        best = min(best, (time.perf_counter() - start) / len(texts))
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hosts", type=int, default=36, help="simulated hosts, one ssh alias each (default 36)")
    p.add_argument("--period", type=float, default=1.0, help="neuron-monitor period, s (default 1)")
    p.add_argument("--steady", type=float, default=20.0, help="seconds of steady state measured (default 20)")
    args = p.parse_args()
    if MISSING:
        sys.exit(MISSING)
    # SIGTERM unwinds like Ctrl-C, so the servers this starts are stopped on the way out.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(1))
    n = args.hosts
    with tempfile.TemporaryDirectory(prefix="trnwatch-bench-") as tmp:
        sshd = LocalSshd.start(Path(tmp) / "sshd", n)
        hostlist = f"trn-[00-{n - 1:02d}]"
        started = time.monotonic()
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "trnwatch",
                "watch",
                "--hosts",
                hostlist,
                "--ssh-config",
                str(sshd.ssh_config),
                "--remote-command",
                SIM_REMOTE_COMMAND,
                "--period",
                str(args.period),
                "--headless",
                "--duration",
                str(args.steady + 120),
                "--receipt",
                str(Path(tmp) / "r.json"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        marks: dict[str, float] = {}

        def read_progress() -> None:
            for line in proc.stderr:
                now = time.monotonic() - started
                if " of " in line and " up" in line:
                    up = int(line.split("trnwatch: ", 1)[1].split(" of ", 1)[0])
                    if up >= 1:
                        marks.setdefault("first", now)
                    if up == n:
                        marks.setdefault("all", now)

        threading.Thread(target=read_progress, daemon=True).start()
        try:
            while "all" not in marks:
                if proc.poll() is not None or time.monotonic() - started > 120:
                    sys.exit(f"not all {n} hosts came up (first: {marks.get('first')})")
                time.sleep(0.05)
            time.sleep(2 * args.period)  # let connection set-up finish before measuring
            monitor = psutil.Process(proc.pid)
            clients = [c for c in monitor.children() if c.name() == "ssh"]
            remote = psutil.Process(sshd.proc.pid).children(recursive=True)
            sessions = [r for r in remote if r.name() == "sshd"]
            sims = [r for r in remote if r.name() != "sshd"]
            before = [cpu_s([monitor]), cpu_s(clients), cpu_s(sessions), cpu_s(sims)]
            t0 = time.monotonic()
            time.sleep(args.steady)
            window_s = time.monotonic() - t0
            after = [cpu_s([monitor]), cpu_s(clients), cpu_s(sessions), cpu_s(sims)]
            rss_mb = monitor.memory_info().rss / 2**20
        finally:
            proc.terminate()
            proc.wait(30)
            sshd.stop()
    share = [(a - b) / window_s * 100 for a, b in zip(after, before, strict=True)]
    reports = n * window_s / args.period
    per_report_ms = (after[0] - before[0]) / reports * 1000
    bare_ms = ingest_s_per_report(n) * 1000
    print(
        f"{n} hosts over ssh, period {args.period:g} s: first host live after {marks['first']:.1f} s, "
        f"all {n} live after {marks['all']:.1f} s"
    )
    print(
        f"steady CPU over {window_s:.0f} s (% of one core): trnwatch {share[0]:.1f}%, its {len(clients)} ssh clients "
        f"{share[1]:.1f}%; remote side: sshd sessions {share[2]:.1f}% ({share[2] / n:.2f}% per host), "
        f"simulators {share[3]:.1f}%"
    )
    print(
        f"trnwatch per report: {per_report_ms:.2f} ms vs bare ingest {bare_ms:.2f} ms "
        f"({per_report_ms / bare_ms:.2f}x); resident memory {rss_mb:.0f} MiB"
    )


if __name__ == "__main__":
    main()
