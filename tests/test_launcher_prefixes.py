"""A launcher's per-rank prefix changes nothing but the rank: the same log read raw, under Open
MPI's `--tag-output` prefix (its layout as mpirun 4.1.4 printed it here, tests/test_launchers_real.py)
and under Slurm's `--label` (tests/slurm_label.py) gives the same events, timestamps included (a
prefix once broke the compile's timing: 0 s instead of the real span)."""

from pathlib import Path

import pytest

from trnwatch.collectors.log_profiles import LogTranslator, profile_registry
from trnwatch.ledger.job import JobLedger
from tests.nxd_logs import tp_zero1_fixture
from tests.slurm_label import label, task_exit

RECEIVED_S = 1_900_000_000.0


def events_of(lines: list[str]) -> list:
    translator = LogTranslator("run", profile_registry(), global_batch=256, seq_len=4096)
    return [event for line in lines for event in translator.feed(line, RECEIVED_S)]


@pytest.mark.parametrize(
    "prefix",
    [lambda line: f"[1,3]<stdout>:{line}", lambda line: label(3, 16, line), lambda line: label(3, 16, line, True)],
    ids=["open-mpi", "srun-label", "srun-label-zero-padded"],
)
def test_a_prefixed_log_reads_as_the_raw_log_on_the_prefixes_rank(prefix, tmp_path):
    tp_zero1_fixture(tmp_path / "tp_zero1.log")  # NxD's tp_zero1 layout with a 200 s cold compile
    raw = (tmp_path / "tp_zero1.log").read_text(encoding="utf-8").splitlines()
    plain = events_of(raw)
    prefixed = events_of([prefix(line) for line in raw])
    assert {event.rank for event in prefixed} == {3}
    as_raw = [event.model_copy(update={"rank": 0}).model_dump_json() for event in prefixed]
    assert as_raw == [event.model_dump_json() for event in plain]  # as JSON: a NaN loss equals itself
    ledger = JobLedger()
    for event in prefixed:
        ledger.ingest(event, RECEIVED_S)
    cold = ledger.summary(RECEIVED_S).cold_compile_s
    assert cold == pytest.approx(200.0, abs=1.0)  # timed from the lines' own timestamps


def test_open_mpi_tags_inside_a_line_written_in_pieces_still_give_the_ranks_traceback_line():
    # Real mpirun output (tests/fixtures/logs/openmpi_split_writes.log): the traceback's lines carry
    # the tag again at every write, `RuntimeError[1,2]<stderr>:: [1,2]<stderr>:injected failure ...`.
    path = Path(__file__).parent / "fixtures" / "logs" / "openmpi_split_writes.log"
    events = events_of(path.read_text(encoding="utf-8").splitlines())
    [failure] = [event for event in events if event.event == "error"]  # mpirun's account of it is not repeated
    assert (failure.rank, failure.message, failure.source) == (
        2,
        "RuntimeError: injected failure on rank 2 at step 4",
        "job",
    )


def test_srun_error_lines_give_each_tasks_failure_with_its_exit_code_or_signal():
    # srun's own lines (tests/slurm_label.py task_exit, Slurm's statements), unlabelled as srun
    # writes them to its stderr; the first one is the first task exit srun observed.
    lines = [
        task_exit("trn-[01-03]", [10], exit_code=1),
        task_exit("trn-[01-02]", [0, 1, 2, 5], signum=9),
        task_exit("trn-01", [3], signum=11, core_dumped=True),
        task_exit("trn-02", [4], oom=True),
    ]
    assert lines[1] == "srun: error: trn-[01-02]: tasks 0-2,5: Killed"
    got = [(e.rank, e.exit_code, e.signal, bool(e.root_cause), e.source) for e in events_of(lines)]
    assert got == [
        (10, 1, None, True, "launcher"),
        (0, -9, "SIGKILL", False, "launcher"),
        (1, -9, "SIGKILL", False, "launcher"),
        (2, -9, "SIGKILL", False, "launcher"),
        (5, -9, "SIGKILL", False, "launcher"),
        (3, -11, "SIGSEGV", False, "launcher"),
        (4, None, None, False, "launcher"),
    ]
    assert events_of(lines[3:])[0].message == "Out Of Memory (srun: the task's memory limit)"


def test_a_tasks_traceback_read_under_its_label_is_not_repeated_by_sruns_line():
    traceback = ["Traceback (most recent call last):", '  File "train.py", line 3, in <module>', "RuntimeError: boom"]
    lines = [label(10, 12, line) for line in traceback] + [task_exit("trn-01", [10], exit_code=1)]
    [failure] = events_of(lines)
    assert (failure.rank, failure.message, failure.source) == (10, "RuntimeError: boom", "job")
