"""Following a run directory and single files: history first, new rank files, whole lines only."""

import asyncio
import os

from trnwatch.collectors.job_files import CHUNK_BYTES, FileTail, TailLine, follow_run_dir

POLL_S = 0.02


class Pump:
    """Drains an async iterator into a queue, so a test can wait with timeouts without
    cancelling the iterator itself (cancelling an async generator's __anext__ closes it)."""

    def __init__(self, lines):
        self.queue = asyncio.Queue()
        self.task = asyncio.create_task(self._run(lines))

    async def _run(self, lines):
        async for item in lines:
            await self.queue.put(item)

    async def take(self, count: int, timeout_s: float = 60.0) -> list:
        async with asyncio.timeout(timeout_s):
            return [await self.queue.get() for _ in range(count)]

    async def nothing_arrives(self, wait_s: float = 0.3) -> bool:
        await asyncio.sleep(wait_s)
        return self.queue.empty()

    async def close(self) -> None:
        self.task.cancel()
        try:
            await self.task
        except asyncio.CancelledError:
            pass


def test_a_late_monitor_sees_the_whole_history_of_every_rank(tmp_path):
    for rank in range(3):
        (tmp_path / f"rank-{rank:05d}.jsonl").write_text("".join(f'{{"rank":{rank},"n":{n}}}\n' for n in range(50)))
    (tmp_path / "notes.txt").write_text("not telemetry\n")

    async def run():
        lines = Pump(follow_run_dir(str(tmp_path), poll_s=POLL_S))
        got = await lines.take(150)
        quiet = await lines.nothing_arrives()
        await lines.close()
        return got, quiet

    got, quiet = asyncio.run(run())
    assert quiet  # notes.txt is not a rank file
    for rank in range(3):
        mine = [line for line in got if line.source_id == f"job:rank-{rank:05d}.jsonl"]
        assert [line.text for line in mine] == [f'{{"rank":{rank},"n":{n}}}' for n in range(50)]
    assert {line.kind for line in got} == {"job"}


def test_rank_files_that_appear_later_are_picked_up(tmp_path):
    run_dir = tmp_path / "run"  # does not exist yet either

    async def run():
        lines = Pump(follow_run_dir(str(run_dir), poll_s=POLL_S))
        assert await lines.nothing_arrives(0.1)
        run_dir.mkdir()
        (run_dir / "rank-00000.jsonl").write_text("a\n")
        first = await lines.take(1)
        (run_dir / "rank-00007.jsonl").write_text("b\n")
        with open(run_dir / "rank-00000.jsonl", "a") as rank0:
            rank0.write("c\n")
        later = await lines.take(2)
        await lines.close()
        return first + later

    got = asyncio.run(run())
    assert got[0].source_id == "job:rank-00000.jsonl" and got[0].text == "a"
    assert {(line.source_id, line.text) for line in got[1:]} == {
        ("job:rank-00007.jsonl", "b"),
        ("job:rank-00000.jsonl", "c"),
    }


def test_a_partial_last_line_waits_for_its_newline(tmp_path):
    path = tmp_path / "rank-00000.jsonl"
    path.write_text('{"whole":1}\n{"half":')

    async def run():
        lines = Pump(follow_run_dir(str(tmp_path), poll_s=POLL_S))
        first = await lines.take(1)
        held_back = await lines.nothing_arrives()
        with open(path, "a") as rank0:
            rank0.write("2}\n")
        completed = await lines.take(1)
        await lines.close()
        return first, held_back, completed

    first, held_back, completed = asyncio.run(run())
    assert first[0].text == '{"whole":1}'
    assert held_back
    assert completed[0].text == '{"half":2}'


def test_history_larger_than_one_read_is_delivered_without_waiting_for_polls(tmp_path):
    path = tmp_path / "rank-00000.jsonl"
    path.write_text("".join(f"{n:099d}\n" for n in range(CHUNK_BYTES // 100 * 2)))  # two chunks and more

    async def run():
        lines = Pump(follow_run_dir(str(tmp_path), poll_s=30.0))  # only the backlog path can beat this poll
        got = await lines.take(CHUNK_BYTES // 100 * 2, timeout_s=10.0)
        await lines.close()
        return got

    got = asyncio.run(run())
    assert got[-1].text == f"{CHUNK_BYTES // 100 * 2 - 1:099d}"


def texts(tail: FileTail) -> tuple[list[str], bool]:
    lines, more_waiting = tail.read_lines()
    return [line.text for line in lines], more_waiting


def test_file_tail_reads_chunks_and_handles_truncation_and_rotation(tmp_path):
    path = tmp_path / "job.log"
    path.write_text("one\ntwo\nthr")
    tail = FileTail(str(path), chunk_bytes=4)
    assert texts(tail) == (["one"], True)
    assert texts(tail) == (["two"], True)
    assert texts(tail) == ([], False)  # "thr" has no newline yet

    path.write_text("new\n")  # truncated and rewritten in place
    assert texts(tail)[0] == ["new"]

    os.rename(path, tmp_path / "job.log.1")
    path.write_text("rotated\n")
    with open(tmp_path / "job.log.1", "a") as old:
        old.write("last words of the old file\n")
    lines = []
    for _ in range(20):
        lines += texts(tail)[0]
    assert lines == ["last words of the old file", "rotated"]  # the old file is drained first
    tail.close()


def test_a_line_without_newline_beyond_the_cap_is_dropped_not_buffered_and_counted_once_as_it_passes_the_cap(
    tmp_path,
):
    path = tmp_path / "rank-00000.jsonl"
    path.write_bytes(b"x" * 5000)
    tail = FileTail(str(path), chunk_bytes=1000, max_line_bytes=2000)
    handed_on = []
    for _ in range(10):
        handed_on += tail.read_lines()[0]
    # counted once it is past the cap (its newline may never come); nothing held while it goes on
    assert handed_on == [TailLine("", 3000)] and tail._partial == b""
    with open(path, "ab") as f:
        f.write(b"xx\nok\n")
    for _ in range(3):
        handed_on += tail.read_lines()[0]
    assert handed_on == [TailLine("", 3000), TailLine("ok")]
    tail.close()
