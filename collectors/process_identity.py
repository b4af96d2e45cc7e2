"""Which process a pid is: a pid plus its start time, so a dead rank's pid that another process
now holds is never taken for the rank.

A pid is free for reuse once its process has died. So a rank's process is identified by its pid
and its start time as the kernel counts it: clock ticks after boot, field 22 of /proc/PID/stat
(Linux). The in-job emitter puts it in `run_start` (`start_ticks`) where it can read it; when a
`run_start` has none, it is read when the pid is first seen (`start_ticks`), and it is accepted
only from a process that started no later than its `run_start` said it was running (plus
ANNOUNCE_SLACK_S): a process started after the rank announced itself is someone else's.

`check_local` is run here before and after every capture on this machine; `remote_command`
wraps the capture's command on another host in the same two checks (POSIX sh over ssh). A
process that is not the rank is never read: the capture is refused, and the refusal says only
its pid and start time, never its command line.
"""

import os
import shlex
from dataclasses import dataclass
from typing import Literal

# Seconds a process's start, as the kernel's boot time (whole seconds) plus its ticks gives it, may
# read later than the `run_start` it wrote: the boot time is truncated to a second, and a clock
# stepped since boot moves it.
ANNOUNCE_SLACK_S = 2
REMOTE_OTHER_STATUS = 86  # the remote check's exit status: the pid is another process now
REMOTE_GONE_STATUS = 87  # the remote check's exit status: nothing runs under the pid
REMOTE_MARK = "trnwatch-identity: "

Match = Literal["same", "other", "gone"]


@dataclass(frozen=True)
class ProcessIdentity:
    """A rank's process: its pid, its start (clock ticks after boot) when known, and when its
    `run_start` said it was running (unix s), which bounds its start when the ticks are not known."""

    pid: int
    start_ticks: int | None
    announced_s: float | None

    def known(self) -> bool:
        return self.start_ticks is not None or self.announced_s is not None


@dataclass(frozen=True)
class Checked:
    """What a check found: `same` (the rank's process), `other` or `gone`, and why."""

    match: Match
    reason: str = ""


def start_ticks(pid: int) -> int | None:
    """The process's start in clock ticks after boot (/proc/PID/stat field 22), or None when no
    such process runs or there is no /proc (not Linux)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold anything, ')' and spaces too.
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def _boot_s() -> int | None:
    try:
        with open("/proc/stat", "rb") as f:
            for line in f:
                if line.startswith(b"btime "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def _started_s(ticks: int) -> int | None:
    """A start in ticks after boot as unix s: the boot time plus the ticks, whole seconds (as the
    remote check's shell arithmetic gives it)."""
    boot = _boot_s()
    return None if boot is None else boot + ticks // os.sysconf("SC_CLK_TCK")


def first_seen(pid: int, announced_s: float | None) -> int | None:
    """The start ticks of the process that holds `pid` now, if it can be the one that announced
    itself at `announced_s` (it started no later); None when it cannot, or none runs."""
    ticks = start_ticks(pid)
    if ticks is None:
        return None
    started = _started_s(ticks)
    if announced_s is not None and (started is None or started > announced_s + ANNOUNCE_SLACK_S):
        return None
    return ticks


def check_local(identity: ProcessIdentity) -> Checked:
    """Is the process under `identity.pid` on this machine the one `identity` names? (Linux:
    without /proc nothing can be told, and nothing is taken for the rank.)"""
    ticks = start_ticks(identity.pid)
    if ticks is None:
        if not os.path.isdir("/proc/self"):
            return Checked("other", f"pid {identity.pid}: which process it is cannot be told here (no /proc)")
        return Checked("gone", f"pid {identity.pid} is not running here")
    if identity.start_ticks is not None:
        if ticks != identity.start_ticks:
            said = f"started at tick {ticks} after boot; the rank's at tick {identity.start_ticks}"
            return Checked("other", _other(identity, said))
        return Checked("same")
    started = _started_s(ticks)
    assert identity.announced_s is not None  # known(), checked by the caller
    if started is None or started > identity.announced_s + ANNOUNCE_SLACK_S:
        late = "at an unknown time" if started is None else f"{started - identity.announced_s:.0f} s"
        return Checked("other", _other(identity, f"started {late} after the rank's run_start"))
    return Checked("same")


def _other(identity: ProcessIdentity, what: str) -> str:
    return f"pid {identity.pid} is another process now ({what}): not read"


# $1 pid, $2 start ticks or "", $3 latest start in unix s or "", then the command. The command
# name in /proc/PID/stat is in parentheses and may hold ') ', so everything up to the last ') '
# goes; field 22 is then the 20th word.
_REMOTE_CHECK = (
    "pid=$1 want=$2 latest=$3; shift 3\n"
    "check() {\n"
    '  s=$(cat "/proc/$pid/stat" 2>/dev/null) || {\n'
    f'    echo "{REMOTE_MARK}gone: pid $pid is not running on $(uname -n)" >&2; exit {REMOTE_GONE_STATUS}; }}\n'
    '  s=${s##*") "}; set -f; set -- $s; set +f; t=${20}\n'
    '  if [ -n "$want" ]; then\n'
    '    [ "$t" = "$want" ] && return 0\n'
    '    why="started at tick $t after boot; the rank\'s at tick $want"\n'
    "  else\n"
    "    b=$(sed -n 's/^btime //p' /proc/stat); hz=$(getconf CLK_TCK)\n"
    '    [ $((b + t / hz)) -le "$latest" ] && return 0\n'
    '    why="started at unix time $((b + t / hz)), after the rank\'s run_start"\n'
    "  fi\n"
    f'  echo "{REMOTE_MARK}other: pid $pid is another process now ($why): not read" >&2; exit {REMOTE_OTHER_STATUS}\n'
    "}\n"
    # The output is held until the second check: what a process that replaced the rank during the
    # capture printed is never sent.
    'check; out=$("$@"); status=$?; check; [ -z "$out" ] || printf \'%s\\n\' "$out"; exit $status\n'
)


def remote_command(identity: ProcessIdentity, words: list[str]) -> str:
    """The remote shell's command line: `words` run between two identity checks of the pid on
    that host; a failed check prints `trnwatch-identity: gone|other: WHY` and exits
    REMOTE_GONE_STATUS / REMOTE_OTHER_STATUS, with nothing of the process read."""
    want = "" if identity.start_ticks is None else str(identity.start_ticks)
    latest = "" if identity.announced_s is None else str(int(identity.announced_s) + ANNOUNCE_SLACK_S)
    return shlex.join(["sh", "-c", _REMOTE_CHECK, "trnwatch-identity", str(identity.pid), want, latest, *words])


def remote_refusal(exit_status: int | None, stderr: str) -> Checked | None:
    """The remote check's refusal in a capture's exit status and stderr, or None."""
    if exit_status not in (REMOTE_OTHER_STATUS, REMOTE_GONE_STATUS):
        return None
    said = [ln for ln in stderr.splitlines() if ln.startswith(REMOTE_MARK)]
    if not said:
        return None
    match, _, reason = said[-1].removeprefix(REMOTE_MARK).partition(": ")
    if match not in ("other", "gone"):
        return None
    return Checked("other" if match == "other" else "gone", reason)
