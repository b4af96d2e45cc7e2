"""trainer_state.json (collectors/trainer_state.py) as the job decoder and ledger take it: training
log entries become untimed steps with their loss, a file caught mid-write is read again, bad
entries are counted, and the ledger joins the state's steps with the log's (ledger/job_progress.py)."""

import json
import os

from trnwatch.collectors.job_events import parse_job_line
from trnwatch.collectors.trainer_state import TrainerStateWatcher, is_output_dir
from trnwatch.ledger.job import JobLedger
from tests.test_job_ledger import T0, fold, start, step


def write_state(folder, global_step: int, history: list[dict], max_steps: int = 100) -> str:
    path = folder / f"checkpoint-{global_step}" / "trainer_state.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({"global_step": global_step, "max_steps": max_steps, "log_history": history}))
    return str(path)


def entry(n: int, loss) -> dict:
    return {"step": n, "loss": loss, "grad_norm": 1.5, "learning_rate": 5e-4, "epoch": n / 100}


def test_log_history_steps_become_untimed_steps_with_their_loss_each_told_once(tmp_path):
    assert not is_output_dir(str(tmp_path))
    write_state(tmp_path, 4, [entry(2, 6.25), entry(4, 5.5), {"step": 4, "eval_loss": 5.0}])
    assert is_output_dir(str(tmp_path))
    watcher = TrainerStateWatcher(str(tmp_path), "run")
    events = [parse_job_line(line) for line in watcher.scan()]
    assert [(e.event, e.step, e.loss, e.step_time_s) for e in events] == [
        ("step", 2, 6.25, None),
        ("step", 4, 5.5, None),
    ]
    mtime = os.stat(tmp_path / "checkpoint-4" / "trainer_state.json").st_mtime
    assert {e.ts for e in events} == {mtime}  # the file's time: the steps had ended by then
    assert watcher.scan() == []  # nothing changed
    # The next checkpoint repeats the history: only its new steps are told; global_step 7 has no entry.
    write_state(tmp_path, 7, [entry(2, 6.25), entry(4, 5.5), entry(6, 5.0)])
    events = [parse_job_line(line) for line in watcher.scan()]
    assert [(e.step, e.loss) for e in events] == [(6, 5.0), (7, None)]


def test_the_last_step_of_max_steps_ends_the_run(tmp_path):
    write_state(tmp_path, 8, [entry(8, 4.0)], max_steps=8)
    events = [parse_job_line(line) for line in TrainerStateWatcher(str(tmp_path), "run").scan()]
    assert [(e.event, getattr(e, "status", None)) for e in events] == [("step", None), ("run_end", "success")]


def test_a_file_caught_mid_write_is_read_again_and_reported_only_if_it_stays_broken(tmp_path):
    path = tmp_path / "checkpoint-2" / "trainer_state.json"
    path.parent.mkdir()
    path.write_text('{"global_step": 2, "log_hi')
    watcher = TrainerStateWatcher(str(tmp_path), "run")
    assert watcher.scan() == []  # maybe mid-write: not yet a rejection
    (line,) = watcher.scan()  # unchanged and still broken: one line the decoder refuses
    assert line.startswith("trainer_state.json unreadable: checkpoint-2/trainer_state.json: ")
    assert watcher.scan() == []
    write_state(tmp_path, 2, [entry(2, 3.0), {"step": "two", "loss": 1.0}, {"step": 3, "loss": [1]}])
    lines = watcher.scan()
    assert [parse_job_line(lines[0]).step] == [2] and len(lines) == 3
    assert all(text.startswith("trainer_state.json entry refused: {") for text in lines[1:])


def test_the_states_steps_join_the_logs_without_moving_the_rank_back(tmp_path):
    # The console log (timed steps 1..10 with their losses) and checkpoint-10's trainer_state.json
    # (steps 5 and 10, unrounded, at the file's time): one run, one last step.
    log = [start(0, T0, world=1)] + [step(0, T0 + n, n, loss=4.0 + n / 1000) for n in range(1, 11)]
    ledger = fold(JobLedger(), log)
    path = write_state(tmp_path, 10, [entry(5, 4.0049), entry(10, 4.9)])
    os.utime(path, (T0 + 10.5, T0 + 10.5))  # saved after step 10, by the job's clock
    state = [parse_job_line(line) for line in TrainerStateWatcher(str(tmp_path), "run").scan()]
    for event in state:
        ledger.ingest(event, T0 + 11, source="ckpt:out", passive=True)
    assert ledger.ranks[0].last_step == 10 and ledger.ranks[0].last_step_ts == T0 + 10
    summary = ledger.summary(T0 + 11)
    progress = summary.progress
    assert progress is not None and progress.last_step == 10
    assert progress.sources["ckpt:out"].last_step == 10 and progress.sources["job-dir"].last_step == 10
    both = {point.step: point for point in progress.losses if len(point.by_source) == 2}
    assert sorted(both) == [5, 10]
    assert both[5].loss == 4.0049 and both[5].agree  # the more precise value; within '%.4g'
    assert both[10].by_source == {"ckpt:out": 4.9, "job-dir": 4.01} and not both[10].agree
    assert progress.losses_disagreeing == 1
    assert summary.throughput is not None and summary.throughput.last_step == 10
