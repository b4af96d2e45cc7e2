"""The job's rank processes on this host, found with psutil: which process runs each rank, and in
what state (running, sleeping, stopped, in disk wait, a zombie), with its CPU time and memory.

A rank process is a process of this user that carries RANK in its environment (torchrun, Slurm's
srun with a wrapper, mpirun scripts all set it) and is tied to the watched job: its stdout or
stderr is a watched `--job-log` file (or a file in a watched `--job-log` folder), its launcher's
is (torchrun `--tee` writes the ranks' output to files of its own and copies it to its stdout),
or it holds a file open in the watched `--job-dir` (the in-job emitter's rank file). A child of a
rank carrying the same RANK (a DataLoader worker, forked with its parent's environment) is not a
rank. A process's environment is read once (it does not change after exec), and never while the
process is in disk wait: reading it takes the lock the process may be blocked holding.

One pass every PERIOD_S in a daemon thread of its own (collectors/sysfs.py `bounded_call`): a pass
that has not returned within SAMPLE_BOUND_S (a /proc read stuck behind a wedged process) loses
the source, naming the process it was reading. Each pass that found a rank process (and the
first one after the last did) is one line (collectors/rank_process_records.py), recorded and
folded like any other, so a replay judges the same processes.
"""

import asyncio
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from trnwatch.collectors.lines import Line
from trnwatch.collectors.process_identity import start_ticks
from trnwatch.collectors.rank_process_records import (
    KIND,
    MAX_PROCESSES,
    SCHEMA,
    SOURCE_ID,
    ProcessState,
    RankProcess,
    RankProcessSample,
    Via,
    encode_rank_processes,
)
from trnwatch.collectors.sysfs import bounded_call

PERIOD_S = 3.0
SAMPLE_BOUND_S = 10.0  # a pass reads a few /proc files per process of this user

_STATES: dict[str, ProcessState] = {
    psutil.STATUS_RUNNING: "running",
    psutil.STATUS_SLEEPING: "sleeping",
    psutil.STATUS_IDLE: "sleeping",
    psutil.STATUS_DISK_SLEEP: "disk-wait",
    psutil.STATUS_STOPPED: "stopped",
    psutil.STATUS_TRACING_STOP: "stopped",
    psutil.STATUS_ZOMBIE: "zombie",
}


@dataclass(frozen=True)
class Watched:
    """What ties a process to the watched job: the `--job-log` files and folders, the `--job-dir`
    folders (real paths, as /proc/PID/fd's links name them)."""

    logs: tuple[str, ...] = ()
    log_dirs: tuple[str, ...] = ()
    job_dirs: tuple[str, ...] = ()

    @staticmethod
    def of(logs: list[Path], job_dirs: list[Path]) -> "Watched":
        def real(path: Path) -> str:
            return os.path.realpath(path)

        return Watched(
            logs=tuple(real(p) for p in logs if not p.is_dir()),
            log_dirs=tuple(real(p) + os.sep for p in logs if p.is_dir()),
            job_dirs=tuple(real(p) + os.sep for p in job_dirs),
        )

    def is_log(self, target: str) -> bool:
        return target in self.logs or target.startswith(self.log_dirs)


_Key = tuple[int, int | None]  # pid, start ticks: one process, whoever holds the pid later


def _fd_target(pid: int, fd: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        return None


def _ranks_of(proc: psutil.Process) -> tuple[int | None, int | None]:
    """RANK and LOCAL_RANK of a process's environment (None: unset, unreadable or not a number)."""
    try:
        env = proc.environ()
    except (psutil.Error, OSError):
        return None, None

    def number(name: str) -> int | None:
        text = env.get(name, "")
        return int(text) if text.isdigit() else None

    return number("RANK"), number("LOCAL_RANK")


class RankProcessFinder:
    """One pass at a time over this user's processes (`sample`); what is read once per process
    (its ranks, how it is tied to the job) is kept between passes, for the processes still there."""

    def __init__(self, watched: Watched, host: str | None = None, uid: int | None = None):
        self.watched = watched
        self.host = host or os.uname().nodename
        self.uid = os.getuid() if uid is None else uid
        self._ranks: dict[_Key, tuple[int | None, int | None]] = {}
        self._ties: dict[_Key, Via] = {}
        self._workers: set[_Key] = set()  # seen as a rank's child with its RANK: never a rank, orphaned or not

    def _tie(self, pid: int, ppid: int) -> Via | None:
        watched = self.watched
        if any((t := _fd_target(pid, fd)) is not None and watched.is_log(t) for fd in (1, 2)):
            return "stdout"
        if any((t := _fd_target(ppid, fd)) is not None and watched.is_log(t) for fd in (1, 2)):
            return "launcher"
        if watched.job_dirs:
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
            except OSError:
                return None
            for fd in fds:
                target = _fd_target(pid, fd)
                if target is not None and target.startswith(watched.job_dirs):
                    return "job-dir"
        return None

    def sample(self, reading: list[Path]) -> RankProcessSample:
        """One pass: every rank process of the job on this host now. `reading` gets the /proc
        folder of each process as it is read (where a stuck pass is stuck)."""
        t = time.time()
        seen: dict[_Key, tuple[psutil.Process, str, int]] = {}  # key -> (process, status, ppid)
        present: set[_Key] = set()
        for proc in psutil.process_iter(["uids"]):
            uids = proc.info.get("uids")
            if uids is None or uids.real != self.uid:
                continue
            reading.append(Path(f"/proc/{proc.pid}"))
            try:
                with proc.oneshot():
                    status, ppid = proc.status(), proc.ppid()
            except psutil.Error:
                continue
            key = (proc.pid, start_ticks(proc.pid))
            present.add(key)
            if key not in self._ranks:
                if status == psutil.STATUS_DISK_SLEEP:
                    continue  # read once it is out of the kernel's wait
                self._ranks[key] = _ranks_of(proc)
            if self._ranks[key][0] is not None:
                seen[key] = (proc, status, ppid)
        for gone in [key for key in self._ranks if key not in present]:
            del self._ranks[gone]
            self._ties.pop(gone, None)
            self._workers.discard(gone)
        rank_of_pid = {key[0]: self._ranks[key][0] for key in seen}
        self._workers.update(key for key, (_, _, ppid) in seen.items() if rank_of_pid.get(ppid) == self._ranks[key][0])
        processes: dict[int, RankProcess] = {}
        # Oldest first: of two processes with one RANK, the rank started before its workers.
        for key, (proc, kernel_state, ppid) in sorted(seen.items(), key=lambda item: (item[0][1] or 0, item[0][0])):
            rank, local_rank = self._ranks[key]
            assert rank is not None  # `seen` holds only processes with a RANK
            if key in self._workers or rank in processes:
                continue  # a DataLoader worker (its parent is the rank, or was)
            via = self._ties.get(key)
            if via is None and kernel_state != psutil.STATUS_ZOMBIE:  # a zombie has no files left
                reading.append(Path(f"/proc/{key[0]}/fd"))
                via = self._tie(key[0], ppid)
                if via is not None:
                    self._ties[key] = via
            if via is None:
                continue
            try:
                with proc.oneshot():
                    times, rss = proc.cpu_times(), proc.memory_info().rss
            except psutil.Error:
                continue
            processes[rank] = RankProcess(
                rank=rank,
                local_rank=local_rank,
                pid=key[0],
                ppid=ppid,
                start_ticks=key[1],
                state=_STATES.get(kernel_state, "other"),
                cpu_s=round(times.user + times.system, 3),
                rss_bytes=rss,
                via=via,
            )
        ranks = [processes[rank] for rank in sorted(processes)]
        return RankProcessSample(v=SCHEMA, t=t, host=self.host, processes=ranks[:MAX_PROCESSES])


async def rank_process_lines(finder: RankProcessFinder, period_s: float = PERIOD_S) -> AsyncIterator[Line]:
    """A pass every `period_s`, each that found a rank process (and the first after the last
    did) as a line; `SourceLost` when one has not returned within SAMPLE_BOUND_S."""
    start = time.monotonic()
    tick = 0
    found_before = False
    while True:
        sample = await bounded_call(finder.sample, bound_s=SAMPLE_BOUND_S)
        if sample.processes or found_before:
            yield Line(SOURCE_ID, KIND, time.time(), encode_rank_processes(sample))
        found_before = bool(sample.processes)
        tick += 1
        await asyncio.sleep(max(0.0, start + tick * period_s - time.monotonic()))
