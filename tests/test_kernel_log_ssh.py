"""Each host's kernel log over the SSH fan-out (`--hosts`/`--hosts-file` with `--kernel-log`).

The lines are the simulator generator's (workloads/sim/kernel_log.py: the layouts of aws-neuron-sdk's
nrt-troubleshoot.rst), rendered by the real tools: journalctl reading a journal systemd-journal-remote
wrote (tests/kernel_journal.py), dmesg's own capture (tests/fixtures/kernel). The fan-out runs
through a real OpenSSH server (tests/sshd.py); the denied host is denied by the real kernel
(kernel.dmesg_restrict=1 and an unprivileged user) and the real REMOTE_COMMAND.
"""

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from trnwatch.collectors.kernel_log import remote_source_id
from trnwatch.collectors.kernel_source import JOURNAL_FOLLOW, LOOKBACK_S, REMOTE_COMMAND, Resume
from trnwatch.collectors.lines import Line, SourceEvent
from trnwatch.collectors.sysfs_reader import sample_sysfs
from trnwatch.collectors.sysfs_sample import remote_source_id as sysfs_source_id
from trnwatch.ledger.ledger import Ledger
from trnwatch.ledger.receipt import build_receipt
from trnwatch.workloads.sim.kernel_log import driver_message, guide_example_message, short_iso_line
from trnwatch.workloads.sim.sysfs_tree import write_host_tree
from tests import reports
from tests.kernel_journal import JOURNAL_REMOTE, write_kernel_journal
from tests.sshd import MISSING, SIM_REMOTE_COMMAND, LocalSshd, alias
from tests.waiting import wait_until

HAVE_JOURNAL = JOURNAL_REMOTE.exists() and shutil.which("journalctl") is not None
NEEDS_JOURNAL = pytest.mark.skipif(not HAVE_JOURNAL, reason="journalctl and systemd-journal-remote not installed")
# The guide's example line: its instance id and hostname are no simulated host's, so only the
# source it was read from can place it.
GUIDE_ERROR = guide_example_message(device=2, core=1)
T0 = 1_764_700_000.0


def _journalctl(directory: Path, stdin_line: bytes) -> list[str]:
    """What the remote follow command prints of `directory` for one connection (without -f)."""
    since = stdin_line.decode().strip()
    argv = shlex.split(JOURNAL_FOLLOW.replace("$since", since).replace(" -f ", " "))
    out = subprocess.run([*argv, "--directory", str(directory)], capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


@NEEDS_JOURNAL
def test_a_reconnection_asks_journalctl_from_the_last_second_and_repeats_no_line(tmp_path):
    journal = tmp_path / "journal"
    journal.mkdir()
    t = time.time() - 100
    first = [(t - 2 * LOOKBACK_S, 6, driver_message(1, 0)), (t, 3, GUIDE_ERROR), (t + 10, 6, driver_message(2, 0))]
    first.append((t + 10, 6, driver_message(3, 0)))  # the same second as the last line received
    write_kernel_journal(journal / "system.journal", first, "trn3-a07")
    resume = Resume(time.time() - LOOKBACK_S)
    got = [line for line in _journalctl(journal, resume.stdin_line()) if resume.fresh(line)]
    assert got == [short_iso_line(t_s, "trn3-a07", msg) for t_s, _, msg in first[1:]]  # the window only
    assert resume.stdin_line() == f"{int(t + 10)}\n".encode()
    # The connection drops; the kernel logs more (one line in that same second, one later).
    later = [(t + 10, 6, driver_message(4, 0)), (t + 20, 3, GUIDE_ERROR)]
    write_kernel_journal(journal / "system@later.journal", later, "trn3-a07", seqnum=len(first) + 1)
    resume.reconnecting()
    again = _journalctl(journal, resume.stdin_line())
    assert len(again) == 4  # --since is inclusive: the last second's two lines come again
    assert [line for line in again if resume.fresh(line)] == [short_iso_line(t_s, "trn3-a07", m) for t_s, _, m in later]


def test_a_reconnection_to_dmesg_drops_the_ring_buffer_already_read():
    """dmesg prints its whole ring buffer at each connection: what was read is dropped by its
    stamp, the continuation lines of a dropped record with it (dmesg's own capture)."""
    lines = (Path(__file__).parent / "fixtures" / "kernel" / "dmesg_oom_report.log").read_text().splitlines()
    cut = next(i for i in range(40, len(lines)) if lines[i].startswith("["))
    assert any(line[:1].isspace() for line in lines[:cut])  # continuation lines before the cut
    resume = Resume(T0)
    assert all(resume.fresh(line) for line in lines[:cut])
    resume.reconnecting()
    assert [line for line in lines if resume.fresh(line)] == lines[cut:]


def _sysfs_line(tmp_path: Path, instance_id: str) -> str:
    write_host_tree(tmp_path / "sys", instance_id, {}, {0: ""}, {})
    return sample_sysfs(tmp_path / "sys")


@pytest.mark.parametrize("joined_by", ["device stream", "sysfs sampler"])
def test_a_line_from_a_hosts_kernel_log_is_that_hosts_whatever_it_names(tmp_path, joined_by):
    """Over SSH, `kernel-log:<label>` is the host whose neuron-monitor stream (`<label>`) or sysfs
    sampler (`sysfs:<label>`, beside --scrape) has the same label; the line's own ids name no host."""
    ledger = Ledger("live")
    for n, instance_id in enumerate(["i-0a", "i-0b"]):
        label = f"trn-{n:02d}"
        source = label if joined_by == "device stream" else f"http://exporter-{n}:9000/metrics"
        report = reports.report(
            [], reports.hardware_trn3(chips=4), reports.system(chips=4), reports.instance(instance_id)
        )
        ledger.ingest(Line(source, "neuron-monitor", T0, reports.line(report)))
        if joined_by == "sysfs sampler":
            ledger.ingest(Line(sysfs_source_id(label), "sysfs", T0, _sysfs_line(tmp_path / label, instance_id)))
    ledger.ingest(Line(remote_source_id("trn-01"), "kernel-log", T0 + 1, short_iso_line(T0, "trn-01", GUIDE_ERROR)))
    [error] = build_receipt(ledger, "eof", written_at_s=T0 + 2).kernel_log.hardware_errors
    assert (error.host, error.chip, error.nc_id, error.instance_id) == ("i-0b", 2, 1, "i-0592464924bd45322")
    assert [c.hw_errors for c in ledger.read(T0 + 2).chips_of(ledger.hosts["i-0b"])] == [0, 0, 1, 0]
    [finding] = [f for f in ledger.read(T0 + 2).findings if f.kind == "hw-error"]
    assert (finding.severity, finding.site.host_id, finding.site.chip) == ("critical", "i-0b", 2)


def test_an_error_read_before_its_hosts_first_report_waits_for_it_unless_the_host_is_down():
    """One incident on the host, not one on a name then one on the host; a host whose stream went
    down before any report shows the fault under its label."""
    ledger = Ledger("live")
    for label in ("trn-00", "trn-01"):
        ledger.link_event(SourceEvent(label, "neuron-monitor", T0, "connecting"))
        line = short_iso_line(T0, label, GUIDE_ERROR)
        ledger.ingest(Line(remote_source_id(label), "kernel-log", T0 + 1, line))
    assert not [f for f in ledger.read(T0 + 2).findings if f.kind == "hw-error"]
    report = reports.report([], reports.hardware_trn3(chips=4), reports.system(chips=4), reports.instance("i-0a"))
    ledger.ingest(Line("trn-00", "neuron-monitor", T0 + 3, reports.line(report)))
    ledger.link_event(SourceEvent("trn-01", "neuron-monitor", T0 + 3, "down", "ssh: connect to host trn-01: timed out"))
    sites = {(f.site.host_id, f.site.host, f.site.chip) for f in ledger.read(T0 + 4).findings if f.kind == "hw-error"}
    assert sites == {(None, "trn-01", 2), ("i-0a", "trn-00", 2)}


@pytest.mark.parametrize(
    "args, said",
    [
        (["--stdin", "--remote-kernel-log-command", "cat"], "--remote-kernel-log-command goes with"),
        (["--hosts", "h1", "--remote-kernel-log-command", "cat"], "--remote-kernel-log-command goes with"),
        (["--hosts", "h1", "--kernel-log", "--remote-kernel-log-command", " "], "must be a non-empty single line"),
    ],
)
def test_the_remote_kernel_log_command_without_its_sources_is_refused_in_words(args, said):
    run = subprocess.run(
        [sys.executable, "-m", "trnwatch", "watch", "--headless", *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert run.returncode == 2 and said in run.stderr, run.stderr


def _dmesg_restricted_for_nobody() -> str | None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return "needs root and setpriv to run the remote command as an unprivileged user"
    if Path("/proc/sys/kernel/dmesg_restrict").read_text().strip() != "1":
        return "needs kernel.dmesg_restrict=1 for a real denial"
    return None


@pytest.fixture
def sshd(tmp_path):
    server = LocalSshd.start(tmp_path / "sshd", n_aliases=3)
    yield server
    server.stop()


def _remote_journalctl(sshd: LocalSshd, directory: Path) -> list[psutil.Process]:
    found = []
    for child in psutil.Process(sshd.proc.pid).children(recursive=True):
        try:
            cmd = child.cmdline()
        except psutil.NoSuchProcess:
            continue
        if cmd[:1] == ["journalctl"] and str(directory) in cmd:
            found.append(child)
    return found


@pytest.mark.slow
@NEEDS_JOURNAL
@pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
@pytest.mark.skipif(_dmesg_restricted_for_nobody() is not None, reason=_dmesg_restricted_for_nobody() or "")
def test_each_hosts_kernel_log_over_ssh_places_its_error_and_says_which_host_is_denied(tmp_path, sshd):
    """Three hosts, neuron-monitor (the simulator) and the kernel log over SSH: trn-00 logs driver
    lines, trn-01 the guide's hardware error, trn-02 runs the real REMOTE_COMMAND as `nobody` and
    is denied. trn-01's follow is killed mid-session: it reconnects and repeats no line."""
    t = time.time() - 60
    journals = {
        0: [(t, 6, driver_message(4100, 0)), (t + 1, 6, driver_message(4101, 1))],
        1: [(t + 2, 3, GUIDE_ERROR), (t + 2, 6, driver_message(4200, 2))],
    }
    for h, entries in journals.items():
        (tmp_path / f"journal-{h}").mkdir()
        write_kernel_journal(tmp_path / f"journal-{h}" / "system.journal", entries, alias(h))
    # Each alias plays host $TRNWATCH_SIM_HOST (tests/sshd.py): 0 and 1 follow their journal with
    # the real follow command (a `-- ` note first says it follows), 2 runs REMOTE_COMMAND as nobody.
    command = (
        f'if [ "$TRNWATCH_SIM_HOST" = 2 ]; then exec setpriv --reuid 65534 --regid 65534 --clear-groups '
        f"sh -c {shlex.quote(REMOTE_COMMAND)}; fi; read -r since; "
        f'echo "-- following journal-$TRNWATCH_SIM_HOST"; '
        f"exec {JOURNAL_FOLLOW} --directory {tmp_path}/journal-$TRNWATCH_SIM_HOST"
    )
    receipt = tmp_path / "r.json"
    argv = [sys.executable, "-m", "trnwatch", "watch", "--headless", "--period", "0.5", "--hosts", "trn-[00-02]"]
    argv += ["--ssh-config", str(sshd.ssh_config), "--remote-command", SIM_REMOTE_COMMAND, "--kernel-log"]
    argv += ["--remote-kernel-log-command", command, "--receipt", str(receipt)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    said: list[str] = []
    threading.Thread(target=lambda: said.extend(proc.stderr), daemon=True).start()

    def saw(text: str) -> bool:
        return any(text in line for line in said) or proc.poll() is not None

    try:
        wait_until(lambda: saw("dmesg denied to nobody"), "trn-02's denial", detail=lambda: "".join(said))
        wait_until(lambda: saw("5 of 6 up"), "the other five sources up", detail=lambda: "".join(said))
        followers = wait_until(lambda: _remote_journalctl(sshd, tmp_path / "journal-1"), "trn-01's journalctl")
        for follower in followers:
            follower.kill()
        wait_until(lambda: saw("kernel-log:trn-01 up again"), "trn-01's reconnection", detail=lambda: "".join(said))
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, "".join(said)
    r = json.loads(receipt.read_text())
    host_of = {h["source"]: h["host"] for h in r["hosts"]}
    [error] = r["kernel_log"]["hardware_errors"]
    assert (error["host"], error["chip"], error["nc_id"], error["source"]) == (
        host_of["trn-01"],
        2,
        1,
        "kernel-log:trn-01",
    )
    assert error["lines"] == 1  # read again after the reconnection, and dropped
    assert r["kernel_log"]["driver_lines"] == {"kernel-log:trn-00": 2, "kernel-log:trn-01": 1}
    [incident] = [i for i in r["incidents"] if i["kind"] == "hw-error"]
    assert (incident["severity"], incident["site"]["instance_id"], incident["site"]["chip"]) == (
        "critical",
        host_of["trn-01"],
        2,
    )
    sources = {s["id"]: s for s in r["sources"]}
    assert sources["kernel-log:trn-01"]["reports"] == 4  # two lines and a note on each of two connections
    denied = sources["kernel-log:trn-02"]
    assert denied["reports"] == 0 and "dmesg denied to nobody (kernel.dmesg_restrict=1" in denied["failed"]
    assert "no journald" in denied["failed"] or "not readable by nobody" in denied["failed"]
    assert all(sources[label]["failed"] is None for label in ("trn-00", "trn-01", "trn-02"))
