"""Passive checkpoint-directory source: NxD's `<tag>/checkpoint` then `<tag>/done` become saves."""

import asyncio
import os

from trnwatch.collectors.checkpoints import CheckpointDirWatcher, follow_checkpoint_dir, step_from_tag
from trnwatch.collectors.job_events import parse_job_line


def make_tag(root, tag: str, begin_s: float | None, done_s: float | None = None) -> None:
    tag_dir = root / tag
    (tag_dir / "model").mkdir(parents=True)
    for name, mtime in (("checkpoint", begin_s), ("done", done_s)):
        if mtime is not None:
            (tag_dir / name).write_text("")
            os.utime(tag_dir / name, (mtime, mtime))


def test_saves_are_timed_from_the_marker_files(tmp_path):
    make_tag(tmp_path, "step_100", 1000.0, 1012.5)
    make_tag(tmp_path, "step_200", 2000.0, 2011.0)
    events = CheckpointDirWatcher(str(tmp_path), run="llama").scan()
    assert [(e.state, e.step, e.ts, e.tag) for e in events] == [
        ("begin", 100, 1000.0, "step_100"),
        ("end", 100, 1012.5, "step_100"),
        ("begin", 200, 2000.0, "step_200"),
        ("end", 200, 2011.0, "step_200"),
    ]
    assert {(e.action, e.rank, e.run) for e in events} == {("save", 0, "llama")}


def test_an_open_save_is_reported_once_and_closed_when_done_appears(tmp_path):
    watcher = CheckpointDirWatcher(str(tmp_path), run="llama")
    make_tag(tmp_path, "step_100", 1000.0)
    [begin] = watcher.scan()
    assert (begin.state, begin.step) == ("begin", 100)
    assert watcher.scan() == []
    (tmp_path / "step_100" / "done").write_text("")
    os.utime(tmp_path / "step_100" / "done", (1020.0, 1020.0))
    [end] = watcher.scan()
    assert (end.state, end.ts) == ("end", 1020.0)
    assert watcher.scan() == []


def test_an_older_incomplete_tag_is_an_interrupted_save_not_an_open_one(tmp_path):
    make_tag(tmp_path, "step_100", 1000.0)  # crashed mid-save, never completed
    make_tag(tmp_path, "step_200", 2000.0, 2010.0)
    events = CheckpointDirWatcher(str(tmp_path), run="llama").scan()
    assert [(e.state, e.step) for e in events] == [("begin", 200), ("end", 200)]


def test_step_from_tag_variants():
    assert step_from_tag("step_120") == 120
    assert step_from_tag("hf_llama3_8B--step=120-consumed_samples=30720.0") == 120
    assert step_from_tag("final") is None


def test_follow_checkpoint_dir_yields_job_lines(tmp_path):
    make_tag(tmp_path, "step_5", 1000.0, 1001.0)

    async def run():
        lines = follow_checkpoint_dir(str(tmp_path), run="tiny", poll_s=0.02)
        got = []
        async with asyncio.timeout(5):
            async for line in lines:
                got.append(line)
                if len(got) == 2:
                    break
        await lines.aclose()
        return got

    got = asyncio.run(run())
    events = [parse_job_line(line.text) for line in got]
    assert [(e.state, e.step) for e in events] == [("begin", 5), ("end", 5)]
    assert got[0].source_id == f"ckpt:{tmp_path.name}" and got[0].kind == "job"


def test_a_symbolic_link_loop_in_one_tag_never_ends_the_checkpoint_source(tmp_path):
    """A tag whose marker is a link to itself (ELOOP on stat): that tag is skipped, the others
    are reported, and the watcher goes on scanning (the loop ended the source for good)."""
    (tmp_path / "step_10").mkdir()
    os.symlink("checkpoint", tmp_path / "step_10" / "checkpoint")
    for marker in ("checkpoint", "done"):
        (tmp_path / "step_20").mkdir(exist_ok=True)
        (tmp_path / "step_20" / marker).write_text("")
    watcher = CheckpointDirWatcher(str(tmp_path), "r")
    assert [(e.tag, e.state) for e in watcher.scan()] == [("step_20", "begin"), ("step_20", "end")]
    (tmp_path / "step_10" / "checkpoint").unlink()
    (tmp_path / "step_10" / "checkpoint").write_text("")
    assert [(e.tag, e.state) for e in watcher.scan()] == [("step_10", "begin")]


def _ledger_of(lines):
    from trnwatch.ledger.ledger import Ledger

    ledger = Ledger("live")
    for line in lines:
        ledger.ingest(line)
    return ledger


def _emitter_lines(tmp_path, saves, now_s):
    """The reference workload's own rank file (workloads/emitter.py) for a run that saved
    checkpoints `saves` (tags), read back as the job-dir source reads it."""
    from trnwatch.collectors.lines import Line
    from trnwatch.workloads.emitter import JobEmitter

    emitter = JobEmitter(str(tmp_path / "telemetry"), run="myrun", rank=0, heartbeat_interval_s=60)
    for step, tag in saves:
        emitter.checkpoint("save", "begin", step, tag=tag)
        emitter.checkpoint("save", "end", step, tag=tag)
    emitter.close()
    text = (tmp_path / "telemetry" / "rank-00000.jsonl").read_text()
    return [Line("job:rank-00000.jsonl", "job", now_s, t) for t in text.splitlines()]


def _ckpt_lines(root, now_s):
    from trnwatch.collectors.lines import Line

    return [
        Line(f"ckpt:{root.name}", "job", now_s, e.model_dump_json())
        for e in CheckpointDirWatcher(str(root), run=root.name).scan()
    ]


def test_saves_told_by_the_rank_files_and_the_checkpoint_folder_are_counted_once(tmp_path):
    """--job-dir and --ckpt-dir on the reference workload's own layout: each save is in the rank
    file (the emitter's events) and in the folder (its markers); 2 saves are 2, not 4."""
    import time

    now_s = time.time()
    saves = [(5, "step_00000005"), (10, "step_00000010")]
    job_lines = _emitter_lines(tmp_path, saves, now_s)
    for i, (_, tag) in enumerate(saves):
        make_tag(tmp_path / "checkpoints", tag, now_s - 60 + i, now_s - 59.5 + i)
    ckpt_lines = _ckpt_lines(tmp_path / "checkpoints", now_s)
    for order in (job_lines + ckpt_lines, ckpt_lines + job_lines):
        ledger = _ledger_of(order)
        summary = ledger.job_summary(now_s)
        assert summary.checkpoint_saves.count == 2
        assert summary.sources == {"ckpt:checkpoints": {"checkpoint": 4}, "job-dir": summary.sources["job-dir"]}
        assert all(not s.rejected for s in ledger.sources.values())


def test_a_tag_older_than_the_checkpoint_history_bound_is_counted_not_folded(tmp_path):
    """A 30-day-old tag (an earlier run's, kept in the folder) made the goodput window 30 days
    (goodput 0.003 %): it is rejected as `ckpt-tag-old`, counted, and the window is the run's."""
    import time

    from trnwatch.ledger.job import MAX_CKPT_HISTORY_S

    now_s = time.time()
    root = tmp_path / "checkpoints"
    make_tag(root, "step_00000001", now_s - 30 * 86400, now_s - 30 * 86400 + 20)
    make_tag(root, "step_00000005", now_s - 60, now_s - 59.5)
    make_tag(root, "step_00000009", now_s - MAX_CKPT_HISTORY_S + 60, now_s - MAX_CKPT_HISTORY_S + 61)  # within
    ledger = _ledger_of(_ckpt_lines(root, now_s))
    (source,) = ledger.sources.values()
    assert dict(source.rejected) == {"ckpt-tag-old": 2}  # the old tag's begin and end
    assert ledger.job_summary(now_s).checkpoint_saves.count == 2
    assert ledger.goodput is not None and now_s - ledger.goodput.first_ts < MAX_CKPT_HISTORY_S
