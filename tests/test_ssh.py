"""SSH fan-out against a real OpenSSH server on 127.0.0.1 (tests/sshd.py): each ssh_config alias
plays one simulated host; tests kill a host's remote side and watch it come back."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from trnwatch.collectors.backoff import Backoff
from trnwatch.collectors.hostlist import HostEntry
from trnwatch.collectors.ssh import SshOptions, ssh_host_lines
from trnwatch.ledger.ledger import Ledger
from trnwatch.session import Session, SourceSpec
from tests.sshd import MISSING, SIM_REMOTE_COMMAND, LocalSshd, alias, free_port
from tests.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.skipif(MISSING is not None, reason=MISSING or "")]

PERIOD_S = 0.25


@pytest.fixture
def sshd(tmp_path):
    server = LocalSshd.start(tmp_path / "sshd", n_aliases=36)
    yield server
    server.stop()


async def _until(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.05)


def test_lost_host_reconnects_while_the_others_keep_flowing(sshd):
    dead_port = free_port()  # nothing listens there
    config = sshd.ssh_config
    config.write_text(f"Host trn-dead\n  HostName 127.0.0.1\n  Port {dead_port}\n" + config.read_text())
    options = SshOptions(config_file=config, remote_command=SIM_REMOTE_COMMAND)
    names = [alias(0), alias(1), alias(2), "trn-dead"]
    ledger = Ledger("live")
    backoff = Backoff(first_s=0.4, max_s=1.0)
    session = Session(
        ledger,
        [
            SourceSpec(n, "neuron-monitor", lambda n=n: ssh_host_lines(HostEntry(n, n), options, PERIOD_S, backoff))
            for n in names
        ],
    )

    def reports(name):
        stats = ledger.sources.get(name)  # registered once the session task has started
        return stats.reports if stats else 0

    async def scenario():
        run = asyncio.create_task(session.run())
        await _until(lambda: all(reports(n) >= 3 for n in names[:3]), 60, "three hosts live")
        assert sshd.kill_remote(1) == 1
        await _until(lambda: ledger.sources[alias(1)].downs == 1, 30, f"{alias(1)} to go down")
        during = {n: reports(n) for n in names[:3]}
        await _until(lambda: reports(alias(1)) > during[alias(1)], 45, f"{alias(1)} to reconnect")
        # The others kept delivering while trn-01 was away (how many depends on the machine's load).
        for n in (alias(0), alias(2)):
            assert reports(n) > during[n]
        states = ledger.source_states(time.time())
        session.stop("quit")
        await run
        return states

    states = asyncio.run(scenario())
    lost = ledger.sources[alias(1)]
    assert lost.gaps == 1 and lost.gap_s > 0 and lost.connects == 2
    assert lost.link_error  # what ssh said, e.g. "ssh exited with status 255 and no message ..."
    assert all(ledger.sources[n].gaps == 0 for n in (alias(0), alias(2)))
    assert states[alias(1)] == "connected" and states[alias(0)] == "connected"
    dead = ledger.sources["trn-dead"]
    assert states["trn-dead"] in ("lost", "reconnecting")
    assert dead.reports == 0 and dead.connects >= 2  # retried with backoff
    assert "Connection refused" in dead.link_error
    # Same host ids as the simulator's own streams: hosts 0-2 of one UltraServer.
    assert len(ledger.hosts) == 3 and sum(len(h.chips) for h in ledger.hosts.values()) == 12


def _read_stderr(proc: subprocess.Popen, lines: list[str]) -> None:
    for raw in proc.stderr:
        lines.append(raw.rstrip("\n"))


def test_receipt_of_36_hosts_over_ssh_is_one_ultraserver_with_the_gap_on_the_lost_host(sshd, tmp_path):
    hosts_file = tmp_path / "hosts"
    hosts_file.write_text(
        "# 36 aliases of one simulated Trn3 Gen2 UltraServer\n"
        + "".join(f"{alias(i)} us-test rack-{i:02d}\n" for i in range(36))
    )
    receipt = tmp_path / "receipt.json"
    recording = tmp_path / "session.trnrec"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trnwatch",
            "watch",
            "--hosts-file",
            str(hosts_file),
            "--ssh-config",
            str(sshd.ssh_config),
            "--remote-command",
            SIM_REMOTE_COMMAND,
            "--period",
            "0.5",
            "--headless",
            "--receipt",
            str(receipt),
            "--record",
            str(recording),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=_read_stderr, args=(proc, lines), daemon=True)
    reader.start()

    def wait_for(text: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not any(text in line for line in lines):
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise AssertionError(f"no {text!r} on stderr within {timeout_s} s:\n" + "\n".join(lines))
            time.sleep(0.05)

    try:
        # Deadlines bound a broken test only (36 ssh sessions start slowly on a loaded machine);
        # the watch has no --duration: it ends on the SIGINT, whenever the steps are done.
        wait_for("36 of 36 up", 180)
        assert sshd.kill_remote(7) == 1
        wait_for("rack-07 lost", 120)
        wait_for("rack-07 up again", 120)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, "\n".join(lines)
    assert "receipt:" in out
    doc = json.loads(receipt.read_text())
    assert doc["exit_reason"] == "interrupt"
    assert [(u["id"], u["hosts"], u["chips"]) for u in doc["ultraservers"]] == [("us-test", 36, 144)]
    sources = {s["id"]: s for s in doc["sources"]}
    assert sorted(sources) == [f"rack-{i:02d}" for i in range(36)]
    assert sources["rack-07"]["gaps"] == 1 and sources["rack-07"]["gap_seconds"] > 0
    assert all(s["gaps"] == 0 for sid, s in sources.items() if sid != "rack-07")
    assert {h["ultraserver_from"] for h in doc["hosts"]} == {"config"}
    # The recording replays to the same figures, the reconnection included.
    replayed = tmp_path / "replayed.json"
    result = subprocess.run(
        [sys.executable, "-m", "trnwatch", "replay", str(recording), "--headless", "--receipt", str(replayed)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    again = json.loads(replayed.read_text())
    assert again["sources"] == doc["sources"] and again["ultraservers"] == doc["ultraservers"]
    assert again["chips"] == doc["chips"]


def test_sshd_fixture_runs_one_simulator_per_connection(sshd):
    """The fixture itself: an alias reaches the server and plays its host (guards the other tests)."""
    result = subprocess.run(
        [
            "ssh",
            "-F",
            str(sshd.ssh_config),
            "-o",
            "BatchMode=yes",
            "-T",
            "--",
            alias(5),
            SIM_REMOTE_COMMAND + " --count 1",
        ],
        input='{"period": "100ms", "system_metrics": [{"type": "memory_info"}]}',
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["trnwatch_simulator"]["host"] == 5


def _remote_left(marker: str) -> list[int]:
    """Remote commands anywhere on this machine (the "remote" side is this machine) whose last
    argument is `marker`: one that outlived its session is reparented away from sshd."""
    return [p.pid for p in psutil.process_iter(["cmdline"]) if (p.info["cmdline"] or [""])[-1] == marker]


@pytest.mark.parametrize("ending", ["duration", "sigkill"])
def test_a_remote_command_that_never_writes_dies_with_the_session(sshd, tmp_path, ending):
    """A hung remote monitor (it never writes a byte) over the real sshd: when the session ends
    (its --duration, or trnwatch killed with SIGKILL), nothing is left running on the remote side,
    and a clean exit prints nothing after the receipt line."""
    marker = f"trnwatch-hung-{ending}-{tmp_path.name}"
    hosts_file = tmp_path / "hosts"
    hosts_file.write_text(f"{alias(0)}\n{alias(1)}\n")
    remote = f"exec {sys.executable} -c 'import time; time.sleep(100000)' {marker}"
    argv = [sys.executable, "-m", "trnwatch", "watch", "--hosts-file", str(hosts_file)]
    argv += ["--ssh-config", str(sshd.ssh_config), "--remote-command", remote, "--headless"]
    argv += ["--receipt", str(tmp_path / "r.json")]
    try:
        if ending == "duration":
            proc = subprocess.Popen(
                argv + ["--duration", "4"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            wait_until(lambda: len(_remote_left(marker)) == 2, "both remote commands running")
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 5, err  # the hung monitors delivered nothing: nothing was measured
            assert out.rstrip("\n").splitlines()[-1].startswith("receipt: ") and "Traceback" not in err
            assert "Event loop is closed" not in err and err.rstrip("\n").splitlines()[-1].startswith("trnwatch:")
        else:
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wait_until(lambda: len(_remote_left(marker)) == 2, "both remote commands running")
            proc.kill()
            proc.wait()
        wait_until(lambda: not _remote_left(marker), "no remote command left", timeout_s=60)
    finally:
        for pid in _remote_left(marker):
            os.kill(pid, signal.SIGKILL)
