"""Line splitting shared by every byte source: chunk boundaries, oversize lines, a last line without newline."""

import asyncio
import os
import threading

import pytest

from trnwatch.collectors.streams import SourceLost, neuron_monitor_config, split_lines, stdin_lines


def lines_of(chunks, max_line_bytes=16):
    async def collect():
        queue = list(chunks) + [b""]

        async def read(_n):
            return queue.pop(0)

        return [line async for line in split_lines(read, "s", "neuron-monitor", max_line_bytes)]

    return asyncio.run(collect())


def test_lines_split_across_chunks_are_joined():
    got = lines_of([b'{"a"', b':1}\n{"b":2}\n{"c"', b":3}"])
    assert [line.text for line in got] == ['{"a":1}', '{"b":2}', '{"c":3}']


def test_oversize_line_is_counted_as_it_passes_the_bound_discarded_up_to_its_newline_and_the_next_line_survives():
    got = lines_of([b"x" * 10, b"y" * 10, b"z" * 10 + b"\nok\n"])
    assert [(line.text, line.oversize_bytes) for line in got] == [("", 20), ("ok", 0)]


def test_an_overlong_line_without_newline_is_counted_before_the_stream_ends():
    """Its newline may never come (/dev/zero): the count does not wait for it."""

    async def first_line():
        async def endless(_n):
            return b"\0" * 10

        async for line in split_lines(endless, "s", "neuron-monitor", 16):
            return line

    assert asyncio.run(first_line()).oversize_bytes == 20


def test_a_stream_with_no_newline_in_16_times_the_bound_is_refused():
    with pytest.raises(SourceLost, match="no newline in 256 bytes: not a stream of lines"):
        lines_of([b"x" * 10] * 100)
    # up to that, an overlong line is discarded and the stream resyncs at its newline
    got = lines_of([b"x" * 10] * 25 + [b"\nok\n"])
    assert [(line.text, line.oversize_bytes) for line in got] == [("", 20), ("ok", 0)]


def test_oversize_line_within_one_chunk():
    got = lines_of([b"a" * 40 + b"\nfine\n"])
    assert [(line.text, line.oversize_bytes) for line in got] == [("", 40), ("fine", 0)]


def test_invalid_utf8_is_replaced_not_fatal():
    (line,) = lines_of([b"\xff\xfe{}\n"])
    assert line.text == "\ufffd\ufffd{}"


def test_generated_config_enables_every_group_at_the_period():
    cfg = neuron_monitor_config(0.5)
    assert cfg["period"] == "500ms"
    assert {m["type"] for m in cfg["neuron_runtimes"][0]["metrics"]} == {
        "neuroncore_counters",
        "memory_used",
        "neuron_runtime_vcpu_usage",
        "execution_stats",
    }
    assert {m["type"] for m in cfg["system_metrics"]} == {"vcpu_usage", "memory_info", "neuron_hw_counters"}
    assert neuron_monitor_config(2)["period"] == "2s"


def test_stdin_lines_reads_a_pipe_and_a_file_alike(tmp_path):
    text = "first\n" + "x" * 300_000 + "\n\nlast without newline"
    path = tmp_path / "reports.jsonl"
    path.write_text(text)

    async def collect(fd: int) -> list[str]:
        return [line.text async for line in stdin_lines("s", fd=fd)]

    with open(path, "rb") as f:
        from_file = asyncio.run(collect(f.fileno()))
    read_fd, write_fd = os.pipe()

    def write() -> None:
        with os.fdopen(write_fd, "wb") as w:
            w.write(text.encode())

    writer = threading.Thread(target=write)
    writer.start()
    try:
        from_pipe = asyncio.run(collect(read_fd))
    finally:
        writer.join()
        os.close(read_fd)
    assert from_pipe == from_file == ["first", "x" * 300_000, "", "last without newline"]
