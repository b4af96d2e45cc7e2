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
