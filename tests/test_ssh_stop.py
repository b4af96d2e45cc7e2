"""SSH readers end with the session (issue 9.6): an ssh that ignores SIGTERM and leaves a child
holding its stderr is stopped with everything in its process group, and the session's end
waits on neither."""

import asyncio
import os
import time

from trnwatch.collectors.hostlist import HostEntry
from trnwatch.collectors.ssh import SshOptions, ssh_host_lines
from trnwatch.ledger.ledger import Ledger
from trnwatch.session import Session, SourceSpec
from tests import reports as R
from tests.test_ssh_command import _fake_ssh


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by its parent) is not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_stubborn_ssh_and_its_children_end_with_the_session(tmp_path):
    report = R.line(R.report([R.runtime(10, "r", [0], util={0: 50.0})]))
    pids = tmp_path / "pids"
    fake = _fake_ssh(
        tmp_path,
        f"""
        import os, signal, subprocess, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # an ssh stuck in a blocking write
        child = subprocess.Popen(["sleep", "1000"], stderr=sys.stderr)  # holds stderr open
        open({str(pids)!r}, "w").write(f"{{os.getpid()}} {{child.pid}}")
        print({report!r}, flush=True)
        while True:
            time.sleep(1)
    """,
    )
    ledger = Ledger("live")
    source = SourceSpec(
        "h1", "neuron-monitor", lambda: ssh_host_lines(HostEntry("h1", "h1"), SshOptions(executable=fake), 1.0)
    )
    session = Session(ledger, [source])

    async def run():
        task = asyncio.create_task(session.run())
        while not ("h1" in ledger.sources and ledger.sources["h1"].reports and pids.exists()):
            await asyncio.sleep(0.02)
        session.stop("quit")
        return await task

    assert asyncio.run(run()) == "quit"
    ssh_pid, child_pid = map(int, pids.read_text().split())
    deadline = time.monotonic() + 30
    while (alive(ssh_pid) or alive(child_pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(ssh_pid), "the ssh process outlived the session"
    assert not alive(child_pid), "a child of ssh outlived the session"
