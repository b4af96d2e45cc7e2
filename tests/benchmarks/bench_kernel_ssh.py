"""Benchmark: one host's kernel log over SSH (collectors/kernel_source.py `ssh_kernel_log_lines`).

    python tests/benchmarks/bench_kernel_ssh.py [--lines 20000] [--quiet 30]

Writes a burst of --lines generated Neuron kernel lines (workloads/sim/kernel_log.py: the driver's
detach line, one hardware error in 100) into a journal with systemd-journal-remote, then follows
it over the tests' throwaway sshd (tests/sshd.py) with the real journalctl follow command
(JOURNAL_FOLLOW) and measures: the burst's lines/s and bytes/line as delivered to trnwatch, the
CPU of the ssh client and of the remote side (sshd session and journalctl) for the burst, then
the same CPU and the bytes over --quiet seconds of a quiet kernel log (ssh's keep-alives only).

Needs /usr/sbin/sshd, ssh, journalctl and /lib/systemd/systemd-journal-remote.
"""

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # for tests.* helpers when run as a script

from trnwatch.collectors.kernel_source import JOURNAL_FOLLOW, ssh_kernel_log_lines
from trnwatch.collectors.lines import Line
from trnwatch.collectors.ssh import SshOptions
from trnwatch.workloads.sim.kernel_log import driver_message, guide_example_message
from tests.benchmarks.bench_ssh import cpu_s
from tests.kernel_journal import write_kernel_journal
from tests.sshd import MISSING, LocalSshd, alias


def _sides(sshd: LocalSshd) -> tuple[list[psutil.Process], list[psutil.Process]]:
    """(trnwatch's ssh clients, the remote side: sshd sessions and what they run)."""
    me = psutil.Process()
    clients = [c for c in me.children(recursive=True) if c.name() == "ssh"]
    return clients, psutil.Process(sshd.proc.pid).children(recursive=True)


async def run(n_lines: int, quiet_s: float, tmp: Path) -> None:
    sshd = LocalSshd.start(tmp / "sshd", n_aliases=1)
    try:
        t0 = time.time() - 600
        entries = [
            (t0 + i * 0.01, 3, guide_example_message(i % 16, 0))
            if i % 100 == 0
            else (t0 + i * 0.01, 6, driver_message(i, 0))
            for i in range(n_lines)
        ]
        (tmp / "journal").mkdir()
        write_kernel_journal(tmp / "journal" / "system.journal", entries, "trn3-a07")
        command = f"read -r since; exec {JOURNAL_FOLLOW} --directory {tmp}/journal"
        options = SshOptions(config_file=sshd.ssh_config, remote_command=command)
        stream = ssh_kernel_log_lines(alias(0), "kernel-log:bench", options, time.time())
        got, n_bytes, started = 0, 0, time.monotonic()
        async for item in stream:
            if isinstance(item, Line):
                got += 1
                n_bytes += len(item.text.encode()) + 1
                if got == n_lines:
                    break
        burst_s = time.monotonic() - started
        clients, remote = _sides(sshd)
        client_cpu, remote_cpu = cpu_s(clients), cpu_s(remote)
        print(f"burst: {got} lines in {burst_s:.2f} s = {got / burst_s:,.0f} lines/s, {n_bytes / got:.0f} bytes/line")
        print(f"burst CPU: ssh client {client_cpu:.2f} s, remote (sshd + journalctl) {remote_cpu:.2f} s")
        io_before = sum(c.io_counters().read_chars for c in clients)  # what ssh read (socket) so far
        await asyncio.sleep(quiet_s)
        clients, remote = _sides(sshd)
        io_after = sum(c.io_counters().read_chars for c in clients)
        print(
            f"quiet {quiet_s:g} s: ssh client {cpu_s(clients) - client_cpu:.3f} s CPU, "
            f"remote {cpu_s(remote) - remote_cpu:.3f} s CPU, ssh read {io_after - io_before} bytes"
        )
        await stream.aclose()
    finally:
        sshd.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=20000)
    parser.add_argument("--quiet", type=float, default=30.0)
    args = parser.parse_args()
    if MISSING:
        sys.exit(MISSING)
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(run(args.lines, args.quiet, Path(tmp)))


if __name__ == "__main__":
    main()
