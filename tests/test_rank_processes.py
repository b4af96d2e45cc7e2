"""The job's rank processes found with psutil (issue 34 item 2): real launchers and ranks
(tests/rank_family.py), stopped with a real SIGSTOP, made zombies for real; the fold's CPU share
on the passes' own times; a session whose job sources end while the sampler runs ends."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trnwatch.collectors.lines import Line
from trnwatch.collectors.rank_process_records import (
    KIND,
    SCHEMA,
    SOURCE_ID,
    RankProcess,
    RankProcessSample,
    encode_rank_processes,
)
from trnwatch.collectors.rank_processes import RankProcessFinder, Watched
from trnwatch.ledger.ledger import Ledger
from trnwatch.ledger.rank_processes import RankProcesses, held_words
from trnwatch.session import Session, SourceSpec
from tests.waiting import wait_until

FAMILY = Path(__file__).with_name("rank_family.py")


class Family:
    """A launcher and its ranks in a process group of their own, ended with it."""

    def __init__(self, tmp_path: Path, n: int, *extra: str, stderr=subprocess.STDOUT):
        self.log = tmp_path / "job.log"
        self.pids_file = tmp_path / "pids.json"
        with self.log.open("w") as out:
            self.launcher = subprocess.Popen(
                [sys.executable, str(FAMILY), str(self.pids_file), str(n), *extra],
                stdout=out,
                stderr=stderr,
                start_new_session=True,
            )
        wait_until(self.pids_file.exists, "the ranks to run", detail=lambda: self.log.read_text())
        pids = json.loads(self.pids_file.read_text())
        self.ranks = {int(r): pid for r, pid in pids["ranks"].items()}
        self.workers = {int(r): pid for r, pid in pids["workers"].items()}

    def end(self) -> None:
        os.killpg(self.launcher.pid, signal.SIGKILL)
        self.launcher.wait()


@pytest.fixture
def family(tmp_path):
    made: list[Family] = []

    def start(n: int, *extra: str, **kw) -> Family:
        home = tmp_path / f"family{len(made)}"
        home.mkdir()
        made.append(Family(home, n, *extra, **kw))
        return made[-1]

    yield start
    for f in made:
        f.end()


def by_rank(sample: RankProcessSample) -> dict[int, RankProcess]:
    return {p.rank: p for p in sample.processes}


def test_ranks_whose_output_is_the_job_log_are_found_and_their_workers_and_strangers_are_not(family, tmp_path):
    job = family(2)
    stray = subprocess.Popen(
        [sys.executable, "-c", "import signal; signal.pause()"],
        env={**os.environ, "RANK": "7"},
        stdout=subprocess.DEVNULL,
    )
    try:
        finder = RankProcessFinder(Watched.of([job.log], []))
        found = by_rank(finder.sample([]))
    finally:
        stray.kill()
        stray.wait()
    assert sorted(found) == [0, 1]
    for rank, p in found.items():
        assert (p.pid, p.ppid, p.local_rank, p.via) == (job.ranks[rank], job.launcher.pid, rank, "stdout")
        assert p.state == "sleeping" and p.rss_bytes > 0 and p.start_ticks is not None
    assert not set(job.workers.values()) & {p.pid for p in found.values()}


def test_a_sigstopped_rank_reads_stopped_and_a_continued_one_sleeping(family):
    job = family(2)
    finder = RankProcessFinder(Watched.of([job.log], []))
    os.kill(job.ranks[1], signal.SIGSTOP)
    try:
        stopped = wait_until(
            lambda: (s := by_rank(finder.sample([])))[1].state == "stopped" and s, "rank 1 to read stopped"
        )
        assert stopped[0].state == "sleeping"
    finally:
        os.kill(job.ranks[1], signal.SIGCONT)
    wait_until(lambda: by_rank(finder.sample([]))[1].state == "sleeping", "rank 1 to read sleeping again")


def test_a_rank_that_exited_unreaped_is_a_zombie_still_tied_to_the_job(family):
    job = family(2, "--zombie", "1")
    finder = RankProcessFinder(Watched.of([job.log], []))
    assert by_rank(finder.sample([]))[1].state == "sleeping"  # seen alive: its environment and output read
    os.kill(job.ranks[1], signal.SIGUSR1)
    zombie = wait_until(
        lambda: (p := by_rank(finder.sample([])).get(1)) is not None and p.state == "zombie" and p, "rank 1 a zombie"
    )
    assert zombie.pid == job.ranks[1] and zombie.via == "stdout"  # not its worker, orphaned by its exit


def test_ranks_behind_a_teeing_launcher_or_holding_a_rank_file_are_tied_by_that(family, tmp_path):
    tee = tmp_path / "tee"
    tee.mkdir()
    teed = family(1, "--tee", str(tee), stderr=subprocess.DEVNULL)
    found = by_rank(RankProcessFinder(Watched.of([teed.log], [])).sample([]))
    assert found[0].via == "launcher" and found[0].pid == teed.ranks[0]
    teed.end()

    run = tmp_path / "run"
    run.mkdir()
    emitting = family(2, "--job-dir", str(run))
    found = by_rank(RankProcessFinder(Watched.of([], [run])).sample([]))
    assert {r: (p.pid, p.via) for r, p in found.items()} == {r: (pid, "job-dir") for r, pid in emitting.ranks.items()}
    assert by_rank(RankProcessFinder(Watched.of([], [tmp_path / "elsewhere"])).sample([])) == {}


def sample(t: float, *processes: RankProcess, host: str = "h") -> RankProcessSample:
    return RankProcessSample(v=SCHEMA, t=t, host=host, processes=list(processes))


def proc(rank: int, pid: int, state="running", cpu_s=0.0) -> RankProcess:
    return RankProcess(
        rank=rank,
        local_rank=rank,
        pid=pid,
        ppid=1,
        start_ticks=pid * 10,
        state=state,
        cpu_s=cpu_s,
        rss_bytes=1 << 20,
        via="stdout",
    )


def test_the_fold_takes_cpu_share_and_state_age_from_the_passes_own_times():
    fold = RankProcesses()
    fold.fold(sample(100.0, proc(0, 10, cpu_s=1.0), proc(1, 11, cpu_s=1.0)))
    fold.fold(sample(103.0, proc(0, 10, cpu_s=4.0), proc(1, 11, "stopped", cpu_s=1.5)))
    fold.fold(sample(106.0, proc(0, 10, cpu_s=7.0), proc(1, 11, "stopped", cpu_s=1.5)))
    zero, one = fold.by_rank[0], fold.by_rank[1]
    assert (zero.cpu_pct, zero.state, zero.state_since_s) == (100.0, "running", 100.0)
    assert (one.cpu_pct, one.state, one.state_since_s) == (0.0, "stopped", 103.0)
    assert [p.rank for p in fold.held()] == [1]
    assert held_words(one, 134.0) == "its process (pid 11) stopped (SIGSTOP, or a debugger) for 31 s"
    fold.fold(sample(109.0, proc(0, 10, cpu_s=10.0), proc(1, 12, cpu_s=0.1)))  # rank 1 restarted: a new process
    assert (fold.by_rank[1].pid, fold.by_rank[1].cpu_pct, fold.by_rank[1].state_since_s) == (12, None, 109.0)
    fold.fold(sample(112.0, proc(0, 10, cpu_s=13.0)))
    assert sorted(fold.by_rank) == [0]  # rank 1's process ended


def test_a_pass_line_is_folded_through_the_ledger_as_a_session_kind_and_a_bad_one_counted():
    ledger = Ledger("live")
    ledger.ingest(Line(SOURCE_ID, KIND, 1.0, encode_rank_processes(sample(1.0, proc(3, 30, "disk-wait")))))
    ledger.ingest(Line(SOURCE_ID, KIND, 2.0, '{"v": "trnwatch.rank-processes/1"}'))
    assert ledger.rank_processes.by_rank[3].state == "disk-wait"
    assert ledger.rank_processes.rejected == {"rank-processes": 1}
    assert ledger.sources == {}  # no source of its own: a pass that finds nothing is no source gone quiet


def test_a_session_whose_sources_end_ends_though_its_companion_sampler_never_does():
    async def one_line():
        yield Line("job:x", "job", time.time(), "")

    async def forever():
        while True:
            await asyncio.sleep(0.05)
            yield Line(SOURCE_ID, KIND, time.time(), encode_rank_processes(sample(time.time())))

    async def run() -> str:
        session = Session(
            Ledger("live"),
            [SourceSpec("job:x", "job", one_line), SourceSpec(SOURCE_ID, KIND, forever, companion=True)],
        )
        return await asyncio.wait_for(session.run(), 60)

    assert asyncio.run(run()) == "eof"
