"""SSH fan-out: neuron-monitor on many hosts, each through its own system `ssh` process.

The system OpenSSH client is used (an asyncio subprocess per host, never a Python SSH library) so
that users' ~/.ssh/config, jump hosts, agents, certificates and ControlMaster all work as they do
in a terminal. Every host is its own source with the same source id for the whole session; a host
that drops is retried with backoff (collectors/backoff.py) while the others go on untouched.

The command line, per host (nothing goes through a local shell):

    ssh [-F CONFIG] -o BatchMode=yes -o ConnectTimeout=10 -o ServerAliveInterval=5
        -o ServerAliveCountMax=3 -o ClearAllForwardings=yes -o ForwardAgent=no -o ForwardX11=no
        -T -- HOST REMOTE_COMMAND

- BatchMode: never prompt (a prompt on 36 hosts would hang the monitor); a host that wants a
  password or an unknown host key fails with ssh's own message, shown as that host's error.
- ServerAlive*: a dead network path is noticed in ~15 s even without a TCP reset.
- ClearAllForwardings / ForwardAgent=no / ForwardX11=no: a monitor needs none of them; forwards
  from a user's config would collide 36 times, and the agent is not lent to remote hosts.
- `--` before the host, and the host name is checked first (collectors/hostlist.py), so no
  name can be read as an option.

The remote command (default `DEFAULT_REMOTE_COMMAND`) runs neuron-monitor with the generated
config read from its stdin (`-c /dev/stdin`). Any drop-in works the same way (`--remote-command`),
e.g. the simulator: `python3 -m trnwatch.workloads.sim --host 3 -c /dev/stdin`.

The remote command dies with its session. `ssh -T` gives it no terminal, so nothing ends it when
the connection goes: a command that never writes (a hung neuron-monitor) would run on for good.
So it runs under `REMOTE_WRAPPER` (POSIX sh, `remote_argv`): the wrapper reads the config line
from ssh's stdin, starts a watcher on the rest of that stdin, and execs `sh -c COMMAND` (same
pid) with the config as its stdin. trnwatch keeps ssh's stdin open for the whole session; when
it closes (the session ends, ssh is stopped or killed, trnwatch itself is killed, the connection
drops), sshd closes the command's stdin, the watcher reads EOF and sends the command's process
group SIGTERM, then SIGKILL if it is still there 5 s later. The watcher holds none of the
channel's output, so a command that ends on its own ends the channel as before.

Link events: "connecting" before each attempt, "down" with the error when the attempt ends. The
error is the last line ssh wrote on stderr (ssh's own message, or the remote command's last
words), or a sentence saying how it ended when there was none.
"""

import asyncio
import json
import os
import random
import shlex
import signal
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

from trnwatch.collectors.backoff import Backoff
from trnwatch.collectors.hostlist import HostEntry, check_host_name
from trnwatch.collectors.lines import Line, LineKind, SourceEvent
from trnwatch.collectors.streams import CHUNK_BYTES, SourceLost, neuron_monitor_config, split_lines

# Neuron tools install to /opt/aws/neuron/bin, which non-interactive SSH sessions usually do not
# have on PATH (the DLAMI adds it in /etc/profile.d, read by login shells only).
DEFAULT_REMOTE_COMMAND = "sh -c 'PATH=\"$PATH:/opt/aws/neuron/bin\"; export PATH; exec neuron-monitor -c /dev/stdin'"
# $1 is the remote command. fd 3 keeps ssh's stdin for the watcher (a background list of a
# non-interactive shell would get /dev/null); the command gets the config line as its stdin. sshd
# makes the session's process a group leader (setsid), so the watcher signals the command's whole
# group (itself ignoring SIGTERM), or the command alone where it leads none.
REMOTE_WRAPPER = (
    "IFS= read -r config || exit 1; pid=$$; exec 3<&0; "
    "(trap '' TERM; cat >/dev/null; "
    "kill -TERM -$pid 2>/dev/null || kill -TERM $pid 2>/dev/null || exit 0; n=0; "
    "while kill -0 $pid 2>/dev/null && [ $n -lt 5 ]; do sleep 1; n=$((n+1)); done; "
    "kill -KILL -$pid 2>/dev/null || kill -KILL $pid 2>/dev/null) <&3 >/dev/null 2>&1 & "
    'exec 3<&-; exec sh -c "$1" trnwatch-remote <<TRNWATCH_CONFIG\n$config\nTRNWATCH_CONFIG\n'
)
KIND: LineKind = "neuron-monitor"
STDERR_KEEP_BYTES = 4096
ERROR_MAX_CHARS = 300
STOP_WAIT_S = 3.0


@dataclass(frozen=True, slots=True)
class SshOptions:
    """How to reach the hosts: `config_file` maps to `ssh -F`, the rest to `-o` options."""

    config_file: Path | None = None
    remote_command: str = DEFAULT_REMOTE_COMMAND
    connect_timeout_s: int = 10
    server_alive_interval_s: int = 5
    server_alive_count_max: int = 3
    executable: str = "ssh"


def ssh_argv(host: str, options: SshOptions) -> list[str]:
    """The argv that runs the remote command on `host`; raises HostNameError for an unsafe name."""
    check_host_name(host)
    argv = [options.executable]
    if options.config_file is not None:
        argv += ["-F", str(options.config_file)]
    for option in (
        "BatchMode=yes",
        f"ConnectTimeout={options.connect_timeout_s}",
        f"ServerAliveInterval={options.server_alive_interval_s}",
        f"ServerAliveCountMax={options.server_alive_count_max}",
        "ClearAllForwardings=yes",
        "ForwardAgent=no",
        "ForwardX11=no",
    ):
        argv += ["-o", option]
    return argv + ["-T", "--", host, remote_argv(options.remote_command)]


def remote_argv(command: str) -> str:
    """The command line the remote shell runs: `command` under REMOTE_WRAPPER, so it ends when
    ssh's stdin closes."""
    return f"sh -c {shlex.quote(REMOTE_WRAPPER)} trnwatch-remote {shlex.quote(command)}"


def exit_message(status: int | None, last_stderr_line: str) -> str:
    """Why one ssh run ended, in ssh's words where it gave any (`status` None: it was killed and
    its exit was not seen)."""
    said = f": {last_stderr_line}" if last_stderr_line else ""
    if status is None:
        return f"ssh was stopped (SIGKILL) and did not report its exit{said}"
    if status == 255:
        return last_stderr_line or (
            "ssh exited with status 255 and no message (connection closed, or the remote command was killed)"
        )
    if status < 0:
        return f"ssh was killed by signal {-status}{said}"
    if status == 0:
        return f"remote command ended{said}"
    return f"remote command exited with status {status}{said}"


async def _last_stderr_line(stream: asyncio.StreamReader) -> str:
    """Read stderr to EOF (so the child never blocks on it), keeping its last non-empty line."""
    tail = b""
    while chunk := await stream.read(CHUNK_BYTES):
        tail = (tail + chunk)[-STDERR_KEEP_BYTES:]
    lines = [ln.strip() for ln in tail.decode("utf-8", "replace").splitlines() if ln.strip()]
    return lines[-1][:ERROR_MAX_CHARS] if lines else ""


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """End a still-running ssh and everything in its process group (it runs in a session of its
    own): close its stdin (the remote wrapper ends the remote command, the channel closes, ssh
    exits), then SIGTERM, then SIGKILL. Returns after at most 3 x STOP_WAIT_S even if a
    descendant that left the group still holds one of its pipes (asyncio's `wait()` waits for the
    pipes too): the session's end never waits on it."""
    if proc.stdin is not None and not proc.stdin.is_closing():
        proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), STOP_WAIT_S)
            return
        except TimeoutError:
            pass
    for signum in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            return
        try:
            await asyncio.wait_for(proc.wait(), STOP_WAIT_S)
            return
        except TimeoutError:
            continue


async def _exit_status(proc: asyncio.subprocess.Process) -> int | None:
    """The status of an ssh whose stdout has closed. It normally exits at once; one still running
    after STOP_WAIT_S is stopped; one that exited while a descendant holds its stderr is not
    waited for."""
    try:
        return await asyncio.wait_for(proc.wait(), STOP_WAIT_S)
    except TimeoutError:
        if proc.returncode is None:
            await _stop(proc)
        return proc.returncode


async def ssh_run_lines(
    argv: list[str], stdin_bytes: bytes, source_id: str, kind: LineKind = KIND
) -> AsyncIterator[Line]:
    """Run one ssh process, feed it `stdin_bytes`, yield its stdout lines as `kind`; always ends
    by raising `SourceLost` with the reason (a remote monitor is never expected to finish)."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            # Own process group: Ctrl-C in the terminal reaches trnwatch, which then stops each
            # ssh in order, instead of 36 ssh processes dying under it at once.
            start_new_session=True,
        )
    except OSError as exc:
        raise SourceLost(f"cannot run {argv[0]}: {exc.strerror or exc}") from None
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None  # PIPE, above
    stderr_task = asyncio.create_task(_last_stderr_line(proc.stderr))
    try:
        try:  # stdin stays open: its end is what ends the remote command (REMOTE_WRAPPER)
            proc.stdin.write(stdin_bytes)
            await proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # ssh already gave up; its exit status and stderr say why
        async for line in split_lines(proc.stdout.read, source_id, kind):
            yield line
        status = await _exit_status(proc)
    finally:
        if proc.returncode is None:
            await _stop(proc)
        if not proc.stdin.is_closing():
            proc.stdin.close()  # ssh exited on its own: its stdin pipe is closed here
        if not stderr_task.done():
            try:
                await asyncio.wait_for(stderr_task, STOP_WAIT_S)
            except TimeoutError:
                stderr_task.cancel()  # stderr held open by a lingering descendant; the message is optional
    raise SourceLost(exit_message(status, stderr_task.result() if stderr_task.done() else ""))


async def ssh_host_lines(
    entry: HostEntry,
    options: SshOptions,
    period_s: float,
    backoff: Backoff = Backoff(),
    rng: random.Random | None = None,
) -> AsyncIterator[Line | SourceEvent]:
    """One host's neuron-monitor stream over SSH, for the whole session (`ssh_stream`)."""
    config = (json.dumps(neuron_monitor_config(period_s)) + "\n").encode()
    async for item in ssh_stream(entry.host, entry.label, KIND, options, config, backoff, rng):
        yield item


async def ssh_stream(
    host: str,
    source_id: str,
    kind: LineKind,
    options: SshOptions,
    stdin_line: bytes | Callable[[], bytes],
    backoff: Backoff = Backoff(),
    rng: random.Random | None = None,
) -> AsyncIterator[Line | SourceEvent]:
    """The remote command's lines (as `kind`) from `host`, for the whole session; `stdin_line` is
    the first line its stdin gets (REMOTE_WRAPPER hands it to the command), or what makes it
    when each attempt starts (after "connecting": a command that resumes where the last ended).

    Yields "connecting" before each attempt, the lines, and "down" with ssh's error when an
    attempt ends; then waits out the backoff and tries again, under the same source id.
    """
    argv = ssh_argv(host, options)
    rng = rng or random.Random()
    failures = 0
    while True:
        yield SourceEvent(source_id, kind, time.time(), "connecting")
        started_s = time.monotonic()
        try:
            first_line = stdin_line() if callable(stdin_line) else stdin_line
            async for line in ssh_run_lines(argv, first_line, source_id, kind):
                yield line
        except SourceLost as exc:
            error = str(exc)
        failures = backoff.failures_after(failures, time.monotonic() - started_s)
        yield SourceEvent(source_id, kind, time.time(), "down", error)
        await asyncio.sleep(backoff.delay_s(failures, rng))
