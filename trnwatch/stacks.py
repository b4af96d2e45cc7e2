"""Stack captures in a session: on demand (the job view's key, the palette) and, with
`--capture-stacks`, once when a stall is confirmed.

Each capture is an asyncio task running `py-spy dump` with a deadline (collectors/stacks.py), at
most MAX_PARALLEL at a time and one per rank at a time; its result is handed to the session as a
"stack" line, recorded and folded like any other (so the ledger, the screen, the receipt and a
replay all see the same capture). Nothing waits for a capture: a key returns at once, and the
line arrives when py-spy (or ssh) has answered or the deadline has passed.

Automatic captures (`--capture-stacks`): every CHECK_EVERY_S the job's verdict is read; when it
is STALLED (no progress, or a pause past its bound: a stuck checkpoint, compile or start-up) or
DEAD (a rank silent before the run ended), that confirmed stall, identified by its verdict, its
cause and the time of the job's last progress, gets its captures once: the suspects' stacks
(at most SUSPECTS_PER_INCIDENT) and, for contrast, those of a sample of the ranks waiting at the
majority's position (at most CONTRAST_PER_INCIDENT): never more than STACKS_PER_INCIDENT per
stall. A stall that ends and a new one that begins later is a new one.
"""

import argparse
import asyncio
import shlex
import time
from collections.abc import Callable
from dataclasses import replace

from trnwatch.collectors.lines import Line
from trnwatch.collectors.process_identity import first_seen
from trnwatch.collectors.ssh import SshOptions
from trnwatch.collectors.stack_records import StackCapture, decode_stack_line
from trnwatch.collectors.stacks import (
    DEFAULT_PY_SPY,
    StackOptions,
    StackRequest,
    capture_stack,
    is_local,
    stack_line,
)
from trnwatch.ledger.job_suspects import majority, positions
from trnwatch.ledger.ledger import Ledger
from trnwatch.scaleout import OptionError

MAX_PARALLEL = 8
CHECK_EVERY_S = 2.0
SUSPECTS_PER_INCIDENT = 4
CONTRAST_PER_INCIDENT = 2
STACKS_PER_INCIDENT = SUSPECTS_PER_INCIDENT + CONTRAST_PER_INCIDENT
SUSPECTS_PER_REQUEST = 8  # the palette's "stacks of the suspects"
AUTO_VERDICTS = ("stalled", "dead")
INCIDENTS_REMEMBERED = 256


def suspect_requests(
    ledger: Ledger, now_s: float, trigger: str, native: bool = False, ranks: list[int] | None = None
) -> list[StackRequest]:
    """Requests for the current suspects (or only `ranks` among them), first suspect first."""
    job = ledger.job
    diagnosis = ledger.job_diagnosis(now_s)
    if job is None or diagnosis is None:
        return []
    chosen = [s.rank for s in diagnosis.suspects if ranks is None or s.rank in ranks]
    return [_request(ledger, rank, trigger, native) for rank in chosen[:SUSPECTS_PER_REQUEST]]


def rank_request(ledger: Ledger, rank: int, trigger: str, native: bool = False) -> StackRequest | None:
    """A request for one rank the job ledger knows, or None."""
    if ledger.job is None or rank not in ledger.job.ranks:
        return None
    return _request(ledger, rank, trigger, native)


def _request(ledger: Ledger, rank: int, trigger: str, native: bool) -> StackRequest:
    assert ledger.job is not None
    state = ledger.job.ranks[rank]
    return StackRequest(
        rank=rank,
        host=state.host,
        pid=state.pid,
        trigger=trigger,
        native=native,
        start_ticks=state.start_ticks,
        announced_s=state.pid_ts,
    )


def incident_requests(ledger: Ledger, now_s: float) -> tuple[str, list[StackRequest]] | None:
    """For a confirmed stall at `now_s`: its identity and its captures (suspects, then a sample of
    the waiting ranks for contrast); None when the job is not stalled or dead."""
    job = ledger.job
    diagnosis = ledger.job_diagnosis(now_s)
    if job is None or diagnosis is None or diagnosis.verdict not in AUTO_VERDICTS:
        return None
    since = job.last_progress_ts
    incident = diagnosis.verdict if diagnosis.cause == "no-progress" else f"{diagnosis.verdict} ({diagnosis.cause})"
    incident += f" since {_utc(since)}" if since is not None else ""
    suspects = [s.rank for s in diagnosis.suspects][:SUSPECTS_PER_INCIDENT]
    found = positions(job.ranks, set(job.dead_ranks(now_s)))
    most = majority(found)
    waiting = [r for r in found.get(most, []) if r not in suspects] if most is not None and len(found) > 1 else []
    stride = max(1, len(waiting) // CONTRAST_PER_INCIDENT)
    contrast = waiting[::stride][:CONTRAST_PER_INCIDENT]
    requests = [replace(_request(ledger, r, "stall", False), incident=incident) for r in suspects]
    requests += [replace(_request(ledger, r, "stall", False), incident=incident, contrast=True) for r in contrast]
    return incident, requests


def capture_summary(capture: StackCapture) -> str:
    """One line for people: whose stack, and what came of it (its innermost frame when read)."""
    head = f"stack of rank {capture.rank} on {capture.host or '?'} (pid {capture.pid}): {capture.outcome}"
    main = capture.main_thread()
    if main is not None and main.frames:
        top = main.frames[0]
        return f"{head}, {main.name or main.thread} in {top.function} ({top.file}:{top.line})"
    return f"{head}: {capture.message}"


def _utc(t: float) -> str:
    """ISO-8601 UTC to the millisecond: when the job last made progress, in an incident's name."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


class StackCapturer:
    """Runs captures for one session and hands each result to `deliver` as a "stack" line."""

    def __init__(
        self,
        ledger: Ledger,
        options: StackOptions,
        deliver: Callable[[Line], None],
        auto: bool = False,
        clock: Callable[[], float] = time.time,
    ):
        self.ledger = ledger
        self.clock = clock  # the session's (`Session.now_s`): stalls judged when the session judges them
        self.options = options
        self.deliver = deliver
        self.auto = auto
        self.in_flight: set[int] = set()  # ranks being captured now
        # Says each capture's outcome in one line (stderr headless, a notification on the screen).
        self.notice: Callable[[str], None] | None = None
        self._tasks: set[asyncio.Task] = set()
        self._limit = asyncio.Semaphore(MAX_PARALLEL)
        self._incidents: dict[str, None] = {}  # confirmed stalls already captured, oldest first
        # rank -> (pid, its run_start's ts, start ticks or None): read here when a rank on this
        # machine whose run_start gave no start time is first seen (process_identity.first_seen).
        self._first_seen: dict[int, tuple[int, float | None, int | None]] = {}

    def learn_identities(self) -> None:
        """Read the start time of each new process of a rank on this machine whose run_start
        did not carry one, so a later capture can tell the rank's process from a successor of
        its pid."""
        job = self.ledger.job
        if job is None:
            return
        for state in job.ranks.values():
            if state.pid is not None and state.start_ticks is None and state.host is not None:
                self._learn(state.rank, state.pid, state.pid_ts, state.host)

    def _learn(self, rank: int, pid: int, pid_ts: float | None, host: str) -> int | None:
        known = self._first_seen.get(rank)
        if known is not None and known[:2] == (pid, pid_ts):
            return known[2]
        if not is_local(host, self.options):
            return None
        ticks = first_seen(pid, pid_ts)
        self._first_seen[rank] = (pid, pid_ts, ticks)
        return ticks

    def _identified(self, request: StackRequest) -> StackRequest:
        if request.start_ticks is not None or request.pid is None or request.host is None:
            return request
        return replace(request, start_ticks=self._learn(request.rank, request.pid, request.announced_s, request.host))

    def request(self, requests: list[StackRequest]) -> list[StackRequest]:
        """Start the captures (each on its own task); return those started (a rank already being
        captured is left out)."""
        started = []
        for request in requests:
            if request.rank in self.in_flight:
                continue
            self.in_flight.add(request.rank)
            task = asyncio.create_task(self._capture(self._identified(request)))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            started.append(request)
        return started

    async def _capture(self, request: StackRequest) -> None:
        try:
            async with self._limit:
                captured = await capture_stack(request, self.options)
            line = stack_line(captured, time.time())
            self.deliver(line)
            if self.notice is not None:
                self.notice(capture_summary(decode_stack_line(line.text)))
        finally:
            self.in_flight.discard(request.rank)

    def check_stall(self, now_s: float) -> str | None:
        """Capture a newly confirmed stall's stacks (once per stall); return its identity if it
        was captured now."""
        found = incident_requests(self.ledger, now_s)
        if found is None or found[0] in self._incidents:
            return None
        incident, requests = found
        self._incidents[incident] = None
        if len(self._incidents) > INCIDENTS_REMEMBERED:
            del self._incidents[next(iter(self._incidents))]
        self.request(requests[:STACKS_PER_INCIDENT])
        return incident

    async def run(self) -> None:
        """Beside the session's sources until it ends: the automatic captures, if asked; at the
        end, captures still running are stopped (their children killed)."""
        try:
            while True:
                await asyncio.sleep(CHECK_EVERY_S)
                self.learn_identities()
                if self.auto:
                    self.check_stall(self.clock())
        finally:
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


def add_stack_options(parser: argparse.ArgumentParser) -> None:
    """`--capture-stacks` and `--py-spy` (`watch`, `record`)."""
    g = parser.add_argument_group("stack captures (py-spy)")
    g.add_argument(
        "--capture-stacks",
        action="store_true",
        help=f"when the job is confirmed STALLED (a pause past its bound too) or DEAD, take the suspects' Python "
        "stacks with py-spy, and a "
        f"sample of the waiting ranks' for contrast (at most {STACKS_PER_INCIDENT} per stall); the job view's k "
        "key takes one on demand either way",
    )
    g.add_argument(
        "--py-spy",
        default=DEFAULT_PY_SPY,
        metavar="COMMAND",
        help="how to run py-spy on the ranks' hosts (here, or over ssh with the --hosts options and --ssh-config), "
        "e.g. '/opt/venv/bin/py-spy' or 'sudo -n py-spy' (default: py-spy)",
    )


def stack_options(args: argparse.Namespace, ssh_executable: str | None) -> StackOptions:
    """The capture options of a `watch` / `record` command line; `OptionError` for a bad --py-spy."""
    try:
        words = shlex.split(args.py_spy)
    except ValueError as exc:
        raise OptionError(f"--py-spy {args.py_spy!r}: {exc}") from None
    if not words or not args.py_spy.isprintable():
        raise OptionError("--py-spy must be a non-empty command on one line")
    ssh = SshOptions(config_file=args.ssh_config, executable=ssh_executable or "ssh")
    return StackOptions(py_spy=args.py_spy, ssh=ssh, run_dir=args.job_dir)
