"""Every pause has a bound and a culprit (ledger/job_pauses.py): a blocking checkpoint, a compile
or a start-up far beyond what the run has shown is a stall naming its cause; ranks still in a
pause the others left, or compiling while the others wait in a collective, are the suspects; no
step ever seen is never STEADY; collective-timeout warnings with no progress go LATE, then STALLED."""

from pathlib import Path

import pytest

from trnwatch.collectors.log_profiles import LogTranslator, profile_registry
from trnwatch.ledger.job import JobLedger
from trnwatch.ledger.rules import Rules
from tests.test_job_ledger import T0, ev, fold, heartbeat, phase, start, step

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
SAVE_S = 2.0  # the run's earlier saves


def save(rank: int, ts: float, state: str, n: int):
    return ev("checkpoint", rank, ts, action="save", state=state, step=n)


def job_with_earlier_saves(ranks: int, saves: int = 3) -> tuple[list, float]:
    """`ranks` ranks stepping a second a step, with `saves` blocking saves of SAVE_S every 10 steps;
    returns the events and the time of the last step."""
    events = [start(r, T0, world=ranks) for r in range(ranks)]
    events += [phase(r, T0 + 1, "steady", "begin") for r in range(ranks)]
    t, n = T0 + 1, 0
    for _ in range(saves):
        for _ in range(10):
            t, n = t + 1, n + 1
            events += [step(r, t, n) for r in range(ranks)]
        events += [save(r, t, "begin", n) for r in range(ranks)]
        t += SAVE_S
        events += [save(r, t, "end", n) for r in range(ranks)]
    t, n = t + 1, n + 1
    events += [step(r, t, n) for r in range(ranks)]
    return events, t


def test_a_save_open_120x_longer_than_the_runs_earlier_saves_is_a_stall_naming_its_rank():
    events, t = job_with_earlier_saves(ranks=1)
    events.append(save(0, t, "begin", 31))
    ledger = fold(JobLedger(), events)
    # Within its bound (5 x the 2 s p99, at least 60 s) the save explains the silence...
    assert ledger.diagnose(t + 50).verdict == "checkpointing"
    # ... 120 times longer than the earlier saves, it is a stall caused by the checkpoint.
    hung = ledger.diagnose(t + 120 * SAVE_S)
    assert hung.verdict == "stalled" and hung.cause == "checkpoint", hung.reason
    assert [s.rank for s in hung.suspects] == [0] and "beyond its limit of 60 s" in hung.reason
    (culprit,) = hung.suspects
    assert culprit.region == "checkpoint" and culprit.evidence.region_age_s == 120 * SAVE_S
    # When it finally ends, the episode stays in the receipt's stalls, caused by the checkpoint.
    fold(ledger, [save(0, t + 300, "end", 31), step(0, t + 301, 32)])
    (stall,) = ledger.summary(t + 302).stalls
    assert (stall.cause, stall.begin_ts, stall.end_ts, stall.threshold_s) == ("checkpoint", t, t + 300, 60.0)


def beats(regions: dict[int, tuple[str, float]], step_n: int, from_s: float, to_s: float) -> list:
    """Heartbeats every 2 s (the emitter's interval) from each rank, in its region since then."""
    out, t = [], from_s
    while t <= to_s:
        out += [heartbeat(r, t, step_n, region, since) for r, (region, since) in regions.items()]
        t += 2.0
    return out


def test_a_save_the_other_ranks_left_names_the_rank_still_in_it():
    events, t = job_with_earlier_saves(ranks=8)
    events += [save(r, t, "begin", 31) for r in range(8)]
    events += [save(r, t + SAVE_S, "end", 31) for r in range(8) if r != 5]
    regions = {r: ("collective:all_reduce", t + SAVE_S) for r in range(8) if r != 5} | {5: ("checkpoint", t)}
    ledger = fold(JobLedger(), events + beats(regions, 31, t + 3, t + 3))
    assert ledger.diagnose(t + 4).verdict == "checkpointing"  # 2 s since the others' saves ended
    late = fold(ledger, beats(regions, 31, t + 5, t + 19)).diagnose(t + 20)
    assert late.verdict == "late" and late.suspects[0].rank == 5, late.reason
    hung = fold(ledger, beats(regions, 31, t + 21, t + 39)).diagnose(t + 40)
    assert hung.verdict == "stalled" and hung.cause == "checkpoint", hung.reason
    assert hung.suspects[0].rank == 5 and hung.suspects[0].region == "checkpoint"
    assert hung.suspects[0].evidence.region_age_s == 40
    assert ledger.summary(t + 40).stalls[-1].cause == "checkpoint"


def test_a_rank_recompiling_while_its_peer_waits_in_a_collective_is_the_stall_suspect():
    events = [start(r, T0, world=2) for r in range(2)]
    events += [phase(r, T0 + 1, "steady", "begin") for r in range(2)]
    events += [step(r, T0 + 1 + n, n) for n in range(1, 21) for r in range(2)]
    t = T0 + 21
    events.append(phase(1, t + 0.2, "compile", "begin", cache="miss"))  # a new graph: rank 1 recompiles
    # Rank 1's heartbeat thread says it computes (the compile runs in its main thread); its peer waits for it.
    regions = {1: ("compute", t + 0.2), 0: ("collective:all_reduce", t + 0.5)}
    ledger = fold(JobLedger(), events + beats(regions, 20, t + 1, t + 3))
    assert ledger.diagnose(t + 3).verdict == "compiling"
    late = fold(ledger, beats(regions, 20, t + 5, t + 9)).diagnose(t + 10)
    assert late.verdict == "late" and late.suspects[0].rank == 1 and late.suspects[0].region == "compile"
    hung = fold(ledger, beats(regions, 20, t + 11, t + 39)).diagnose(t + 40)
    assert hung.verdict == "stalled" and hung.cause == "compile", hung.reason
    assert [s.rank for s in hung.suspects] == [1]
    assert hung.suspects[0].evidence.region_age_s == pytest.approx(40 - 0.2)
    assert "compile open on 1 rank(s)" in hung.reason


def test_a_compile_or_a_save_past_its_limit_without_history_and_the_pause_limit_option():
    compile_events = [start(0, T0, world=1), phase(0, T0 + 1, "compile", "begin")]
    assert fold(JobLedger(), compile_events).diagnose(T0 + 901).verdict == "compiling"  # limit 7200 s
    hung = fold(JobLedger(Rules(compile_limit_s=600)), compile_events).diagnose(T0 + 901)
    assert hung.verdict == "stalled" and hung.cause == "compile" and "--pause-limit compile" in hung.reason
    save_events = [start(0, T0, world=1), step(0, T0 + 2, 1), save(0, T0 + 3, "begin", 1)]
    assert fold(JobLedger(), save_events).diagnose(T0 + 804).verdict == "checkpointing"  # limit 1800 s
    hung = fold(JobLedger(Rules(checkpoint_limit_s=600)), save_events).diagnose(T0 + 804)
    assert hung.verdict == "stalled" and hung.cause == "checkpoint"


def test_no_step_ever_seen_is_starting_up_never_steady_and_a_long_start_up_is_a_bootstrap_stall():
    ledger = fold(JobLedger(), [start(r, T0, world=4) for r in range(4)])
    starting = ledger.diagnose(T0 + 60)
    assert starting.verdict == "starting" and "start-up (no step yet) open on 4 rank(s)" in starting.reason
    hung = ledger.diagnose(T0 + 1801)
    assert hung.verdict == "stalled" and hung.cause == "bootstrap" and len(hung.suspects) == 4
    assert fold(ledger, [step(0, T0 + 100, 1)]).diagnose(T0 + 101).verdict == "steady"


def test_collective_timeout_warnings_with_no_progress_read_late_then_stalled():
    # Only the runtime's collective-timeout warnings of the fixture (aws-neuron-sdk issues #713 and
    # #851, through torchrun's prefix): a rank that never steps, retrying.
    lines = [
        line
        for line in (FIXTURES / "neuron_ccom_warnings.log").read_text().splitlines()
        if "CCOM WARN Timeout waiting for" in line
    ]
    assert len(lines) == 2
    translator = LogTranslator("run", profile_registry())
    job = JobLedger()
    received_s = None
    for text in lines:
        for event in translator.feed(text, 1_900_000_000.0):
            job.ingest(event, 1_900_000_000.0)
            received_s = event.ts
    assert received_s is not None and job.warnings == 2
    first_ts = job.first_event_ts
    assert job.diagnose(first_ts + 1).verdict == "starting"  # not steady: no step was ever seen
    assert job.diagnose(first_ts + 10).verdict == "late"
    stalled = job.diagnose(first_ts + 40)
    assert stalled.verdict == "stalled" and stalled.cause == "no-progress", stalled.reason


def test_a_job_whose_rank_died_lists_the_stall_the_rest_of_it_is_in():
    # Rank 1 goes silent (its host lost); rank 0 waits for it in all_reduce, heartbeating: the
    # verdict is DEAD, and the 40 s without progress is a stall in stalls[], as the badput counts it.
    events = [start(r, T0, world=2) for r in range(2)]
    events += [phase(r, T0 + 1, "steady", "begin") for r in range(2)]
    events += [step(r, T0 + 1 + n, n) for n in range(1, 11) for r in range(2)]
    t = T0 + 11
    events += [heartbeat(1, t, 10, "compute", t)]
    ledger = fold(JobLedger(), events + beats({0: ("collective:all_reduce", t)}, 10, t, t + 40))
    summary = ledger.summary(t + 40)
    assert summary.verdict == "dead" and [s.rank for s in summary.suspects] == [1]
    (stall,) = summary.stalls
    assert stall.end_ts is None and stall.duration_s == pytest.approx(40) and stall.cause == "no-progress"
    assert [s.rank for s in stall.suspects] == [1]


def test_two_ranks_in_collective_init_for_400_s_with_no_step_are_stalled_not_compiling():
    # The job: two ranks whose heartbeats say collective:init, no run_start, no step ever.
    regions = {0: ("collective:init", T0), 1: ("collective:init", T0 + 0.3)}
    ledger = fold(JobLedger(), beats(regions, 0, T0 + 2, T0 + 10))
    starting = ledger.diagnose(T0 + 10)
    assert starting.verdict == "starting" and "collective:init open on 2 rank(s) for 10 s" in starting.reason
    ledger = fold(ledger, beats(regions, 0, T0 + 12, T0 + 400))
    hung = ledger.diagnose(T0 + 400)
    assert hung.verdict == "stalled" and hung.cause == "bootstrap", hung.reason
    assert "2 rank(s) still in collective:init for 400 s (stalled after 30 s)" in hung.reason
    assert [(s.rank, s.region, s.evidence.region_age_s) for s in hung.suspects] == [
        (0, "collective:init", 400.0),
        (1, "collective:init", pytest.approx(399.7)),
    ]
    (stall,) = ledger.summary(T0 + 400).stalls
    assert (stall.cause, stall.begin_ts, stall.end_ts, stall.threshold_s) == ("bootstrap", T0, None, 30.0)
    # --stall-after moves the bound; the start-up's own limit (1800 s) does not apply to a wait.
    assert fold(JobLedger(Rules(stall_after_s=500)), beats(regions, 0, T0 + 2, T0 + 400)).diagnose(
        T0 + 400
    ).verdict == ("starting")


def test_a_rank_that_never_reached_init_is_named_first_then_the_ranks_waiting_for_it():
    # World of 4: ranks 0 and 2 wait in collective:init, rank 1 is stuck in its data loader before
    # it, rank 3 was never heard from.
    events = [start(r, T0, world=4) for r in range(3)]
    regions = {0: ("collective:init", T0 + 1), 1: ("dataloader", T0 + 0.5), 2: ("collective:init", T0 + 1.5)}
    hung = fold(JobLedger(), events + beats(regions, 0, T0 + 2, T0 + 40)).diagnose(T0 + 40)
    assert hung.verdict == "stalled" and hung.cause == "bootstrap", hung.reason
    assert [(s.rank, s.region) for s in hung.suspects] == [
        (1, "dataloader"),
        (0, "collective:init"),
        (2, "collective:init"),
    ]
    assert hung.suspects[0].evidence.why == "not in collective:init (dataloader), where its peers wait"
    assert "2 rank(s) still in collective:init for 39 s (stalled after 30 s), 1 not in it" in hung.reason
    assert hung.reason.endswith("1 rank(s) never heard from")


def test_ranks_that_left_init_are_named_after_the_rank_still_in_it():
    # Ranks 0 and 1 got through collective:init into a barrier; rank 2 is still in init.
    early = beats({r: ("collective:init", T0) for r in range(3)}, 0, T0 + 2, T0 + 4)
    later = {0: ("collective:barrier", T0 + 5), 1: ("collective:barrier", T0 + 5), 2: ("collective:init", T0)}
    hung = fold(JobLedger(), early + beats(later, 0, T0 + 6, T0 + 40)).diagnose(T0 + 40)
    assert hung.verdict == "stalled", hung.reason
    assert [(s.rank, s.region) for s in hung.suspects] == [
        (2, "collective:init"),
        (0, "collective:barrier"),
        (1, "collective:barrier"),
    ]
    assert hung.suspects[1].evidence.why == "left collective:init (collective:barrier)"
    assert "1 rank(s) still in collective:init for 40 s (stalled after 30 s), 2 left it" in hung.reason


def test_no_step_after_the_compiles_ended_is_stalled_and_compiling_only_while_a_compile_is_open():
    events = [start(r, T0, world=2) for r in range(2)]
    events += [phase(r, T0 + 1, "compile", "begin", cache="miss") for r in range(2)]
    ledger = fold(JobLedger(), events)
    assert ledger.diagnose(T0 + 900).verdict == "compiling"  # a compile open: within its 7200 s limit
    # While rank 1 still compiles, rank 0 (done) waits for it in a collective: still compiling.
    ledger = fold(ledger, [phase(0, T0 + 1000, "compile", "end", cache="miss")])
    ledger = fold(ledger, beats({0: ("collective:all_reduce", T0 + 1001)}, 0, T0 + 1002, T0 + 1100))
    assert ledger.diagnose(T0 + 1100).verdict == "compiling"
    ledger = fold(ledger, [phase(1, T0 + 1100, "compile", "end", cache="miss")])
    ledger = fold(ledger, beats({0: ("collective:all_reduce", T0 + 1001)}, 0, T0 + 1102, T0 + 1131))
    assert ledger.diagnose(T0 + 1110).verdict == "starting"  # no compile open: not "compiling"
    hung = ledger.diagnose(T0 + 1131)
    assert hung.verdict == "stalled" and hung.cause == "bootstrap", hung.reason
    assert hung.idle_s == 31 and ledger.summary(T0 + 1131).stalls[-1].begin_ts == T0 + 1100
    # Rank 0 has waited in its collective since T0 + 1001; rank 1, done compiling, sent no word.
    assert [(s.rank, s.region) for s in hung.suspects] == [
        (1, "the wait for a first step after compiling"),
        (0, "collective:all_reduce"),
    ]
    assert "1 rank(s) still in collective:all_reduce for 130 s, 31 s after the last compile ended" in hung.reason
    # A first step ends the start-up.
    assert fold(ledger, [step(r, T0 + 1140, 1) for r in range(2)]).diagnose(T0 + 1141).verdict == "steady"


def test_a_job_of_cache_hits_with_no_step_after_them_is_stalled():
    events = [start(0, T0, world=1), phase(0, T0 + 5, "compile", "end", cache="hit")]
    ledger = fold(JobLedger(), events)
    assert ledger.diagnose(T0 + 20).verdict == "starting"
    hung = ledger.diagnose(T0 + 36)
    assert hung.verdict == "stalled" and "the wait for a first step after compiling for 31 s" in hung.reason
