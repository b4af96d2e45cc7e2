"""The verdict rules (ledger/job_verdicts.py), each on its own: it answers on the job state it
is for and passes (None) on a steady job; and `JobLedger.diagnose` is the first answer in
`VERDICT_RULES` order. Events go through the real line parser (tests/test_job_ledger.py's helpers)."""

import pytest

from trnwatch.ledger import job_verdicts as V
from trnwatch.ledger.job import JobLedger
from tests.test_job_ledger import (
    T0,
    collective,
    ev,
    fold,
    heartbeat,
    hung_job_16_ranks,
    phase,
    running_job,
    start,
    step,
)


def steady_at() -> V.JobAt:
    return V.JobAt(fold(JobLedger(), running_job(ranks=4, steps=10)), T0 + 11.5, None)


def at(events, now_s: float) -> V.JobAt:
    return V.JobAt(fold(JobLedger(), events), now_s, None)


@pytest.mark.parametrize("rule", [r for r in V.VERDICT_RULES if r is not V.steady])
def test_every_rule_but_steady_passes_on_a_steady_job(rule):
    assert rule(steady_at()) is None


def test_steady_is_last_and_always_answers():
    assert V.VERDICT_RULES[-1] is V.steady
    assert V.steady(steady_at()) == V.JobDiagnosis("steady", "4 rank(s) stepping")


def test_no_events():
    assert V.no_events(V.JobAt(JobLedger(), T0, None)) == V.JobDiagnosis("no-data", "no job events yet")


def test_failed_names_the_first_failure_then_the_consequences():
    events = running_job(ranks=3, steps=5)
    events += [heartbeat(r, T0 + 7, 6, "compute", T0 + 6.5) for r in range(3)]
    events += [ev("run_end", r, T0 + 8, status="aborted") for r in (0, 2)]  # rank 1 was killed at ~7 s
    diagnosis = V.failed(at(events, T0 + 30))
    assert diagnosis.verdict == "failed" and [s.rank for s in diagnosis.suspects] == [1, 0, 2]
    assert diagnosis.reason.startswith("first failure rank 1 (host trn3-00 chip 1): went silent")


def test_launcher_stopped():
    events = running_job(ranks=2, steps=3) + [ev("launcher", 0, T0 + 5, action="stopped", signal="SIGTERM")]
    diagnosis = V.launcher_stopped(at(events, T0 + 6))
    assert diagnosis == V.JobDiagnosis("aborted", "the launcher was stopped by SIGTERM")


def test_finished():
    events = running_job(ranks=2, steps=3) + [ev("run_end", r, T0 + 5, status="success") for r in range(2)]
    assert V.finished(at(events, T0 + 3600)) == V.JobDiagnosis("finished", "all 2 ranks ended with success")


def test_dead_names_the_rank_whose_heartbeats_stopped():
    events = running_job(ranks=4, steps=10)
    for t in range(12, 60):
        events += [heartbeat(r, T0 + t, 11, "collective:all_reduce", T0 + 11.5) for r in range(3 if t > 12 else 4)]
    diagnosis = V.dead(at(events, T0 + 59))
    assert diagnosis.verdict == "dead" and [s.rank for s in diagnosis.suspects] == [3]
    assert diagnosis.reason.startswith("1 rank(s) silent for > 10 s: rank 3")


def test_logs_without_steps_is_no_data_not_a_stall():
    job = fold(JobLedger(), [phase(0, T0, "compile", "begin")])
    job.log_lines["log:train.log"] = (3, 2, None)  # as the ledger's fold of a passive log sets it
    diagnosis = V.logs_without_steps(V.JobAt(job, T0 + 3600, None))
    assert diagnosis.verdict == "no-data" and diagnosis.reason.startswith("no step read: log:train.log")


def test_pause_past_limit_is_a_stall_caused_by_the_pause():
    events = [start(0, T0, world=1), phase(0, T0 + 1, "compile", "begin", cache="miss")]
    job = fold(JobLedger(), events)
    now_s = T0 + 1 + job.pause_limit_s("compile") + 5
    diagnosis = V.pause_past_limit(V.JobAt(job, now_s, None))
    assert (diagnosis.verdict, diagnosis.cause, [s.rank for s in diagnosis.suspects]) == ("stalled", "compile", [0])
    assert diagnosis.threshold_s == job.pause_limit_s("compile")


def test_pause_together_is_the_pause_it_is():
    events = running_job(ranks=2, steps=5)
    events += [ev("checkpoint", r, T0 + 7, action="save", state="begin", step=5) for r in range(2)]
    events += [heartbeat(r, T0 + 500, 6, "checkpoint", T0 + 7) for r in range(2)]
    diagnosis = V.pause_together(at(events, T0 + 500))
    assert diagnosis.verdict == "checkpointing" and "493 s" in diagnosis.reason


def one_rank_in_a_checkpoint(now_s: float) -> list:
    """Rank 0 opened a blocking checkpoint after step 5; ranks 1-3 wait in the all-reduce of step 6."""
    events = running_job(ranks=4, steps=5)
    events.append(ev("checkpoint", 0, T0 + 6.5, action="save", state="begin", step=5))
    events.append(heartbeat(0, now_s - 1, 6, "checkpoint", T0 + 6.5))
    events += [heartbeat(r, now_s - 1, 6, "collective:all_reduce", T0 + 6.5) for r in range(1, 4)]
    return events


def test_no_progress_is_stalled_past_the_stall_threshold_then_late():
    now_s = T0 + 41 + 45
    diagnosis = V.no_progress(at(hung_job_16_ranks(now_s), now_s))
    assert (diagnosis.verdict, diagnosis.threshold_s, [s.rank for s in diagnosis.suspects]) == ("stalled", 30.0, [11])
    now_s = T0 + 41 + 25
    assert V.no_progress(at(hung_job_16_ranks(now_s), now_s)).verdict == "late"


def test_no_progress_names_a_one_sided_pause_first_and_its_cause():
    now_s = T0 + 6 + 45
    diagnosis = V.no_progress(at(one_rank_in_a_checkpoint(now_s), now_s))
    assert diagnosis.verdict == "stalled" and diagnosis.cause == "checkpoint"
    assert diagnosis.suspects[0].rank == 0 and "while others are not" in diagnosis.reason


def test_one_sided_pause_before_it_is_late_is_the_pause():
    now_s = T0 + 6 + 3
    diagnosis = V.one_sided_pause(at(one_rank_in_a_checkpoint(now_s), now_s))
    assert diagnosis.verdict == "checkpointing"


def test_starting_up():
    events = [start(0, T0, world=2), start(1, T0, world=2)] + [phase(r, T0 + 1, "warmup", "begin") for r in range(2)]
    diagnosis = V.starting_up(at(events, T0 + 2))
    assert diagnosis == V.JobDiagnosis("starting", "starting up: warmup open on 2 rank(s)")


def test_no_step_yet():
    events = [start(r, T0, world=2) for r in range(2)]
    assert V.no_step_yet(at(events, T0 + 2)) == V.JobDiagnosis("starting", "no step yet on 2 rank(s)")


def test_straggler_is_the_rank_that_waits_least():
    events = running_job(ranks=4, steps=0)
    for n in range(1, 21):
        for r in range(4):
            events += [collective(r, T0 + 1 + n, n, wait_s=0.002 if r == 2 else 0.05), step(r, T0 + 1 + n, n, 0.1)]
    diagnosis = V.straggler(at(events, T0 + 22))
    assert diagnosis.verdict == "slow" and [s.rank for s in diagnosis.suspects] == [2]


@pytest.mark.parametrize(
    ("events", "now_s"),
    [
        (running_job(ranks=4, steps=10), T0 + 11.5),
        (hung_job_16_ranks(T0 + 86), T0 + 86),
        (one_rank_in_a_checkpoint(T0 + 9), T0 + 9),
        ([start(r, T0, world=2) for r in range(2)], T0 + 2),
    ],
)
def test_diagnose_is_the_first_rule_that_answers(events, now_s):
    job = fold(JobLedger(), events)
    answers = [answer for rule in V.VERDICT_RULES if (answer := rule(V.JobAt(job, now_s, None))) is not None]
    assert job.diagnose(now_s) == answers[0]


def processes_at(t_s: float, *held: tuple[int, str]):
    """This host's rank processes for ranks 0-3 (pid 4240 + rank), sleeping unless `held`
    says otherwise, as one pass at `t_s` read them."""
    from trnwatch.collectors.rank_process_records import SCHEMA, RankProcess, RankProcessSample
    from trnwatch.ledger.rank_processes import RankProcesses

    states = dict(held)
    fold = RankProcesses()
    fold.fold(
        RankProcessSample(
            v=SCHEMA,
            t=t_s,
            host="trn3-00",
            processes=[
                RankProcess(
                    rank=r,
                    local_rank=r,
                    pid=4240 + r,
                    ppid=1,
                    start_ticks=100 + r,
                    state=states.get(r, "sleeping"),  # type: ignore[arg-type]
                    cpu_s=1.0,
                    rss_bytes=1 << 30,
                    via="stdout",
                )
                for r in range(4)
            ],
        )
    )
    return fold


def test_a_stopped_rank_process_is_named_first_as_the_cause_of_no_progress():
    job = fold(JobLedger(), running_job(ranks=4, steps=10))
    at = V.JobAt(job, T0 + 60, None, processes_at(T0 + 20, (2, "stopped")))
    diagnosis = V.no_progress(at)
    assert diagnosis is not None and diagnosis.verdict == "stalled"
    first = diagnosis.suspects[0]
    assert (first.rank, first.pid, first.process_state) == (2, 4242, "stopped")
    assert first.evidence.why == "its process (pid 4242) stopped (SIGSTOP, or a debugger) for 40 s"
    assert "rank 2: its process (pid 4242) stopped (SIGSTOP, or a debugger) for 40 s; no progress" in diagnosis.reason


def test_a_zombie_or_disk_wait_rank_reads_as_such_and_a_sleeping_hang_names_no_process_state():
    job = fold(JobLedger(), running_job(ranks=4, steps=10))
    zombie = V.no_progress(V.JobAt(job, T0 + 60, None, processes_at(T0 + 50, (1, "zombie"))))
    assert zombie is not None and zombie.suspects[0].rank == 1
    assert (
        zombie.suspects[0].evidence.why
        == "its process (pid 4241) a zombie (it exited; its launcher has not reaped it) for 10 s"
    )
    wait = V.no_progress(V.JobAt(job, T0 + 60, None, processes_at(T0 + 50, (3, "disk-wait"))))
    assert wait is not None and wait.suspects[0].evidence.why.startswith("its process (pid 4243) in disk wait")
    sleeping = V.no_progress(V.JobAt(job, T0 + 60, None, processes_at(T0 + 50)))
    assert sleeping is not None and sleeping.verdict == "stalled" and "its process" not in sleeping.reason
    assert all(s.process_state == "sleeping" and s.pid == 4240 + s.rank for s in sleeping.suspects)


def test_a_held_process_of_a_rank_that_finished_is_no_cause():
    events = running_job(ranks=4, steps=10) + [ev("run_end", 2, T0 + 12, status="success")]
    job = fold(JobLedger(), events)
    at = V.JobAt(job, T0 + 60, None, processes_at(T0 + 20, (2, "zombie")))
    assert at.held == []
