"""The SSH fan-out without a server: the ssh command line, refusals, exit messages, backoff, and the
link states the ledger keeps for a host that drops and comes back."""

import asyncio
import json
import random
import stat
import sys
import textwrap
from pathlib import Path

import pytest

from trnwatch.cli import main
from trnwatch.collectors.backoff import Backoff
from trnwatch.collectors.hostlist import HostEntry, HostNameError
from trnwatch.collectors.lines import Line, SourceEvent
from trnwatch.collectors.ssh import SshOptions, exit_message, remote_argv, ssh_argv, ssh_host_lines, ssh_run_lines
from trnwatch.collectors.streams import SourceLost, neuron_monitor_config
from trnwatch.ledger.ledger import Ledger
from tests import reports as R


def test_host_comes_after_a_double_dash_and_the_remote_command_is_one_argument():
    argv = ssh_argv("trn3-001", SshOptions(config_file=Path("/tmp/cfg"), remote_command="neuron-monitor -c /dev/stdin"))
    assert argv[:3] == ["ssh", "-F", "/tmp/cfg"]
    assert argv[-4:] == ["-T", "--", "trn3-001", remote_argv("neuron-monitor -c /dev/stdin")]
    options = [argv[i + 1] for i, a in enumerate(argv) if a == "-o"]
    assert "BatchMode=yes" in options
    assert any(o.startswith("ConnectTimeout=") for o in options)
    assert any(o.startswith("ServerAliveInterval=") for o in options)
    assert any(o.startswith("ServerAliveCountMax=") for o in options)
    assert "ForwardAgent=no" in options and "ClearAllForwardings=yes" in options


@pytest.mark.parametrize("name", ["-oProxyCommand=x", "a;rm -rf /", "$(id)", "a b", "a\nb"])
def test_hostile_names_never_become_an_ssh_command_line(name):
    with pytest.raises(HostNameError):
        ssh_argv(name, SshOptions())


@pytest.mark.parametrize(
    "status, stderr, expected",
    [
        (
            255,
            "ssh: connect to host 10.0.0.5 port 22: Connection refused",
            "ssh: connect to host 10.0.0.5 port 22: Connection refused",
        ),
        (255, "", "ssh exited with status 255 and no message"),
        (
            1,
            "neuron-monitor: command not found",
            "remote command exited with status 1: neuron-monitor: command not found",
        ),
        (0, "", "remote command ended"),
        (-9, "", "ssh was killed by signal 9"),
    ],
)
def test_exit_message_uses_the_last_thing_ssh_said(status, stderr, expected):
    assert exit_message(status, stderr).startswith(expected)


def test_backoff_is_exponential_capped_and_jittered():
    backoff = Backoff(first_s=1.0, max_s=8.0, stable_s=60.0)
    rng = random.Random(1)
    for failures, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 8.0), (40, 8.0)]:
        delays = [backoff.delay_s(failures, rng) for _ in range(50)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert len(set(delays)) > 1  # jittered, so hosts that dropped together do not retry together
    assert backoff.failures_after(3, up_for_s=5.0) == 4  # flapping: keep backing off
    assert backoff.failures_after(3, up_for_s=120.0) == 1  # was stable: retry soon


def _fake_ssh(tmp_path: Path, body: str) -> str:
    """An executable standing in for ssh: ignores its arguments, runs `body` (Python)."""
    path = tmp_path / "fake-ssh"
    path.write_text(f"#!{sys.executable}\nimport sys\n" + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_one_ssh_run_feeds_the_config_on_stdin_yields_lines_and_ends_with_sshs_error(tmp_path):
    report = R.line(R.report([R.runtime(10, "r", [0], util={0: 50.0})]))
    fake = _fake_ssh(
        tmp_path,
        f"""
        import json, select
        config = sys.stdin.readline()
        still_open = not select.select([sys.stdin], [], [], 0)[0]  # no EOF: the session holds it open
        open({str(tmp_path / "stdin.json")!r}, 'w').write(json.dumps([config, still_open]))
        print({report!r}); print({report!r}); sys.stdout.flush()
        print('Warning: Permanently added host', file=sys.stderr)
        print('Permission denied (publickey).', file=sys.stderr)
        sys.exit(255)
    """,
    )
    config = (json.dumps(neuron_monitor_config(0.5)) + "\n").encode()

    async def run():
        lines = []
        with pytest.raises(SourceLost) as lost:
            async for line in ssh_run_lines(ssh_argv("h1", SshOptions(executable=fake)), config, "h1"):
                lines.append(line)
        return lines, str(lost.value)

    lines, error = asyncio.run(run())
    assert [line.text for line in lines] == [report, report]
    assert all(line.source_id == "h1" and line.kind == "neuron-monitor" for line in lines)
    assert error == "Permission denied (publickey)."
    config_line, still_open = json.loads((tmp_path / "stdin.json").read_text())
    assert json.loads(config_line) == neuron_monitor_config(0.5) and config_line.endswith("\n") and still_open


def test_a_failing_host_is_retried_under_the_same_source_id(tmp_path):
    fake = _fake_ssh(
        tmp_path,
        """
        print('ssh: connect to host 10.9.9.9 port 22: No route to host', file=sys.stderr)
        sys.exit(255)
    """,
    )

    async def first_events(n):
        events = []
        source = ssh_host_lines(
            HostEntry("10.9.9.9", "rack-a"), SshOptions(executable=fake), 1.0, Backoff(first_s=0.01, max_s=0.02)
        )
        async for item in source:
            events.append(item)
            if len(events) == n:
                await source.aclose()
                return events

    events = asyncio.run(first_events(6))
    assert [e.event for e in events] == ["connecting", "down"] * 3
    assert {e.source_id for e in events} == {"rack-a"}
    assert events[1].error == "ssh: connect to host 10.9.9.9 port 22: No route to host"


def test_ledger_tracks_link_states_and_counts_a_short_outage_as_a_gap():
    ledger = Ledger("live")
    line = R.line(R.report([R.runtime(10, "r", [0], util={0: 50.0})]))

    def state(t):
        return ledger.source_states(t)["trn-b"]

    ledger.source("trn-b", "neuron-monitor")
    assert state(0.0) == "waiting"
    ledger.link_event(SourceEvent("trn-b", "neuron-monitor", 100.0, "connecting"))
    assert state(100.0) == "connecting"
    for t in (101.0, 102.0):
        ledger.ingest(Line("trn-b", "neuron-monitor", t, line))
    assert state(102.5) == "connected"
    ledger.link_event(SourceEvent("trn-b", "neuron-monitor", 102.8, "down", "Connection reset by peer"))
    stats = ledger.sources["trn-b"]
    assert state(103.0) == "lost" and stats.link_error == "Connection reset by peer"
    ledger.link_event(SourceEvent("trn-b", "neuron-monitor", 103.5, "connecting"))
    assert state(103.5) == "reconnecting"
    ledger.ingest(Line("trn-b", "neuron-monitor", 104.0, line))  # 2 s outage: under the 5 s stale threshold
    assert state(104.0) == "connected"
    assert (stats.gaps, stats.gap_s, stats.downs, stats.connects) == (1, pytest.approx(2.0), 1, 2)
    ledger.ingest(Line("trn-b", "neuron-monitor", 105.0, line))
    assert stats.gaps == 1  # counted once


@pytest.mark.parametrize(
    "argv",
    [
        ["--hosts", "-oProxyCommand=touch {marker}"],
        ["--hosts", "good,a;touch {marker}"],
        ["--hosts", "$(touch {marker})"],
        ["--hosts-file", "{hostile_file}"],
    ],
)
def test_cli_refuses_hostile_hosts_before_running_anything(tmp_path, monkeypatch, capsys, argv):
    marker = tmp_path / "ssh-ran"
    fake = _fake_ssh(tmp_path, f"open({str(marker)!r}, 'w').close()\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").symlink_to(fake)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    hostile_file = tmp_path / "hosts"
    hostile_file.write_text("trn3-001 us-a\n-oProxyCommand=sh us-a\n")
    args = [a.format(marker=marker, hostile_file=hostile_file) for a in argv]
    status = main(["watch", *args, "--headless", "--duration", "1", "--receipt", str(tmp_path / "r.json")])
    assert status == 2
    err = capsys.readouterr().err
    assert "host name" in err and ("'-'" in err or "metacharacter" in err)
    assert not marker.exists()
    assert not (tmp_path / "r.json").exists()
