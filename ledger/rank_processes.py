"""The job's rank processes as the latest passes saw them (collectors/rank_processes.py): for each
rank, its process, its state and since when, its CPU share and memory.

Pure: samples arrive as decoded "rank-processes" lines. A host's pass replaces what its previous
pass said: a rank missing from it has no process there now (it ended). A state's start is the
time of the first pass that saw the process in it; a CPU share is the CPU time the process used
between its last two passes over the time between them, both as the passes read them (never the
arrival times, so a replay or a late fold gives the same share).
"""

from collections import Counter
from dataclasses import dataclass

from trnwatch.collectors.rank_process_records import HELD_STATES, ProcessState, RankProcessSample, Via

MAX_RANK_PROCESSES = 65536  # ranks kept across hosts (18,432 ranks is the largest job measured)


@dataclass(slots=True)
class RankProcessState:
    """One rank's process, as of the latest pass of its host."""

    rank: int
    local_rank: int | None
    host: str
    pid: int
    ppid: int
    start_ticks: int | None
    via: Via
    state: ProcessState
    state_since_s: float  # the first pass that saw it in `state` (unix s, the pass's own time)
    seen_s: float  # the latest pass that saw it
    cpu_s: float
    rss_bytes: int
    cpu_pct: float | None = None  # over its last two passes; None until it was seen twice

    @property
    def held(self) -> bool:
        """Stopped, in disk wait or a zombie: the rank's process cannot be making progress."""
        return self.state in HELD_STATES

    def same_process(self, pid: int, start_ticks: int | None, host: str) -> bool:
        return (self.pid, self.start_ticks, self.host) == (pid, start_ticks, host)


class RankProcesses:
    """The rank processes of every host's latest pass, by rank."""

    def __init__(self) -> None:
        self.by_rank: dict[int, RankProcessState] = {}
        self.samples = 0
        self.rejected: Counter[str] = Counter()  # "rank-processes" lines that held no sample, by reason
        self.dropped = 0  # ranks past MAX_RANK_PROCESSES, not kept

    def fold(self, sample: RankProcessSample) -> None:
        """One pass of one host: its rank processes now."""
        self.samples += 1
        t = sample.t
        found = set()
        for p in sample.processes:
            found.add(p.rank)
            kept = self.by_rank.get(p.rank)
            if kept is not None and kept.same_process(p.pid, p.start_ticks, sample.host):
                if t > kept.seen_s:
                    kept.cpu_pct = round(100.0 * max(0.0, p.cpu_s - kept.cpu_s) / (t - kept.seen_s), 1)
                if p.state != kept.state:
                    kept.state, kept.state_since_s = p.state, t
                kept.seen_s, kept.cpu_s, kept.rss_bytes, kept.via = t, p.cpu_s, p.rss_bytes, p.via
                continue
            if kept is None and len(self.by_rank) >= MAX_RANK_PROCESSES:
                self.dropped += 1
                continue
            self.by_rank[p.rank] = RankProcessState(
                rank=p.rank,
                local_rank=p.local_rank,
                host=sample.host,
                pid=p.pid,
                ppid=p.ppid,
                start_ticks=p.start_ticks,
                via=p.via,
                state=p.state,
                state_since_s=t,
                seen_s=t,
                cpu_s=p.cpu_s,
                rss_bytes=p.rss_bytes,
            )
        for rank in [r for r, kept in self.by_rank.items() if kept.host == sample.host and r not in found]:
            del self.by_rank[rank]  # its process ended (or is no longer tied to the job)

    def held(self) -> list[RankProcessState]:
        """The ranks whose process is stopped, in disk wait or a zombie, longest held first."""
        return sorted((p for p in self.by_rank.values() if p.held), key=lambda p: (p.state_since_s, p.rank))


def held_words(process: RankProcessState, now_s: float) -> str:
    """What a held process is doing, for people: "its process (pid 4242) stopped (SIGSTOP, or a
    debugger) for 31 s"."""
    held_s = max(0.0, now_s - process.state_since_s)
    what = {
        "stopped": "stopped (SIGSTOP, or a debugger)",
        "disk-wait": "in disk wait (uninterruptible, in the kernel: storage, a driver or a mount)",
        "zombie": "a zombie (it exited; its launcher has not reaped it)",
    }[process.state]
    return f"its process (pid {process.pid}) {what} for {held_s:.0f} s"
