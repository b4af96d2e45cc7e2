"""Recordings /2 (frames, index, windows, damage, rotation, permissions) and /1 compatibility,
through the recorder and reader directly."""

import os
import stat
import tracemalloc
import zlib

import pytest
import zstandard

from trnwatch.collectors.lines import Line, SourceEvent
from trnwatch.collectors.recording import FRAME_MAX_RAW_BYTES, Recorder, RecordingError, Rotation, index_path
from trnwatch.collectors.recording_frames import (
    _META,
    INDEX_RECORD_BYTES,
    META_BYTES,
    SKIPPABLE_MAGIC,
    FrameInfo,
    read_index,
)
from trnwatch.collectors.recording_reader import Recording, TimeArg, describe
from tests.recordings import T0, read_all, synthetic_items, write_synthetic, write_v1


def _frames(path):
    return [FrameInfo._make(r) for r in read_index(index_path(path).read_bytes())]


def test_entries_round_trip_exactly_raw_not_reescaped(tmp_path):
    items = [
        SourceEvent("host-a", "neuron-monitor", T0, "open"),
        Line("host-a", "neuron-monitor", T0 + 0.123456789, '{"a": "q\\"uote\\\\ \u00e9 \u202e"}'),
        Line("host-a", "neuron-monitor", T0 + 0.2, ""),
        Line("host-a", "neuron-monitor", T0 + 0.3, "", oversize_bytes=5_000_000),
        Line("job:rank-00001.jsonl", "job", T0 + 0.4, "control \x1b[2J \x00 and a lone surrogate \udc80"),
        # a file name's undecodable byte in the source id: its head is read by json, not msgspec
        Line("job:rank-\udcff.jsonl", "job", T0 + 0.45, "{}"),
        SourceEvent("ssh-1", "neuron-monitor", T0 + 0.5, "down", "ssh: connect refused\nsecond line"),
        SourceEvent("host-a", "neuron-monitor", T0 + 0.6, "end", None),
    ]
    path = tmp_path / "r.trnrec"
    recorder = Recorder.to_file(path, "live", {"host-a": "us-1"})
    for item in items:
        recorder.write(item)
    recorder.close()
    got, recording = read_all(path)
    assert got == items
    assert recording.header.evidence == "live" and recording.header.ultraservers == {"host-a": "us-1"}
    assert recording.stats.skipped == {}
    # stored raw: the line's bytes appear as they are, not as a JSON string with escapes; and
    # the file is one zstd stream (`zstd -dc` reads it: metas are skippable frames)
    with open(path, "rb") as f:
        plain = zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True).read()
    assert b'\n{"a": "q\\"uote\\\\ \xc3\xa9 \xe2\x80\xae"}\n' in plain


def test_a_frame_holds_about_a_second_of_data(tmp_path):
    path = tmp_path / "r.trnrec"
    write_synthetic(path, 10)
    frames = _frames(path)
    assert len(frames) == 10
    assert all(f.t_last_s - f.t_first_s < 1.0 for f in frames)
    # the first frame has the open and the catalog (sources first seen) too, the last the end
    assert [f.entries for f in frames] == [3] + [1] * 8 + [2]


def test_a_frame_is_cut_at_its_size_cap(tmp_path):
    path = tmp_path / "r.trnrec"
    recorder = Recorder.to_file(path, "live", {})
    line = "x" * (FRAME_MAX_RAW_BYTES // 3)
    for _ in range(7):
        recorder.write(Line("h", "neuron-monitor", T0, line))  # all at one time: only the cap cuts
    recorder.close()
    frames = _frames(path)
    assert [f.raw_bytes // len(line) for f in frames] == [3, 3, 1]
    assert len(read_all(path)[0]) == 7 and all(f.t_first_s == f.t_last_s == T0 for f in frames)


def test_last_minute_of_a_day_reads_only_the_frames_it_needs(tmp_path):
    path = tmp_path / "day.trnrec"
    write_synthetic(path, 86_400)
    size = path.stat().st_size
    recording = Recording(path)
    from_s, to_s = recording.window(TimeArg.parse("-60"), None)
    items = list(recording.items(from_s, to_s))
    lines = [i for i in items if isinstance(i, Line)]
    assert len(lines) == 60 and all(line.received_s >= from_s for line in lines)
    assert [i.event for i in items if isinstance(i, SourceEvent)] == ["open", "end"]
    # the first frame (it holds the source's open), then about a minute of frames
    assert recording.stats.frames_read <= 63
    per_frame = max(f.frame_bytes for f in _frames(path))
    assert recording.stats.bytes_read <= 64 * per_frame + 4096 < size / 1000
    assert recording.stats.index_bytes_read == 86_400 * INDEX_RECORD_BYTES


def test_windows_by_offset_and_iso_time(tmp_path):
    path = tmp_path / "r.trnrec"
    write_synthetic(path, 600)
    recording = Recording(path)
    from_s, to_s = recording.window(TimeArg.parse("100"), TimeArg.parse("160"))
    assert (from_s, to_s) == (T0 + 100, T0 + 160)
    lines = [i for i in recording.items(from_s, to_s) if isinstance(i, Line)]
    assert [line.received_s for line in lines] == [T0 + i + 0.5 for i in range(100, 160)]
    iso = TimeArg.parse("2026-09-21T14:15:00Z")  # unix 1790000100 = T0 + 100
    naive = TimeArg.parse("2026-09-21T14:15:00")  # no offset: UTC
    assert iso.resolve((T0, T0 + 600)) == naive.resolve((0, 0)) == T0 + 100
    with pytest.raises(ValueError):
        TimeArg.parse("yesterday")


@pytest.mark.parametrize("damage_at", [META_BYTES + 5, 0], ids=["data", "meta-magic"])
@pytest.mark.parametrize("with_index", [True, False], ids=["index", "no-index"])
def test_a_corrupt_frame_is_skipped_and_counted_and_the_rest_replays(tmp_path, damage_at, with_index):
    path = tmp_path / "r.trnrec"
    write_synthetic(path, 20)
    info = _frames(path)[7]
    data = bytearray(path.read_bytes())
    data[info.offset + damage_at] ^= 0xFF  # a flipped byte in its zstd data (CRC) or its meta's magic
    path.write_bytes(bytes(data))
    if not with_index:
        index_path(path).unlink()  # found by scanning metas, resynchronised on the next magic
    items, recording = read_all(path)
    lines = [i for i in items if isinstance(i, Line)]
    assert len(lines) == 19 and T0 + 7.5 not in [line.received_s for line in lines]
    assert recording.stats.skipped == {"corrupt": 1}
    assert items[-1].event == "end"


def test_a_recording_cut_mid_frame_replays_every_whole_frame(tmp_path):
    path = tmp_path / "r.trnrec"
    write_synthetic(path, 20)
    last = _frames(path)[-1]
    os.truncate(path, last.offset + last.frame_bytes // 2)  # the index still lists the cut frame
    items, recording = read_all(path)
    assert len([i for i in items if isinstance(i, Line)]) == 19
    assert recording.stats.skipped == {"truncated": 1}


def test_frames_written_after_the_last_index_record_are_found(tmp_path):
    path = tmp_path / "r.trnrec"
    write_synthetic(path, 20)
    os.truncate(index_path(path), 3 * INDEX_RECORD_BYTES + 7)  # a crash between the two appends
    items, recording = read_all(path)
    assert len([i for i in items if isinstance(i, Line)]) == 20 and recording.stats.skipped == {}


def test_v1_recording_still_reads(tmp_path):
    path = tmp_path / "old.trnrec"
    items = list(synthetic_items(5))
    write_v1(path, items)
    got, recording = read_all(path)
    assert got == items and recording.schema == "trnwatch.recording/1"
    with open(path, "ab") as f:
        f.write(b'{"t": 1, "src": "host-a", "kind": "neuron-mon')  # cut by a crash: not an entry
    assert read_all(path)[0] == items


def test_not_a_recording_is_a_clear_error(tmp_path):
    for content in (b"hello\n", b"\x5e\x2a\x4d\x18garbage", b""):
        path = tmp_path / "x.trnrec"
        path.write_bytes(content)
        with pytest.raises(RecordingError, match="not a trnwatch recording"):
            Recording(path)
    with pytest.raises(RecordingError, match="holds no recording parts"):
        Recording(tmp_path)


def test_rotation_by_size_keeps_the_newest_parts_and_replays_them_as_one(tmp_path):
    folder = tmp_path / "rec"
    recorder = Recorder.to_folder(
        folder, "live", {}, rotation=Rotation(max_bytes=8_000, retain=3), known_hosts=lambda: ["i-0synthetic0000001"]
    )
    items = list(synthetic_items(120))
    for item in items:
        recorder.write(item)
    recorder.close()
    parts = sorted(folder.glob("trnwatch-*.trnrec"))
    assert len(recorder.files) > 3 and len(parts) == 3 and parts == recorder.files[-3:]
    assert sorted(folder.iterdir()) == sorted(parts + [index_path(p) for p in parts])
    recording = Recording(folder)
    got = list(recording.items())
    lines = [i for i in got if isinstance(i, Line)]
    # the retained parts hold the last lines, in order, with none missing
    assert lines == [i for i in items if isinstance(i, Line)][-len(lines) :]
    # each part says its sources: a replay of the retained parts still registers the source first
    assert isinstance(got[0], SourceEvent) and got[0].event == "open" and got[-1].event == "end"
    info = describe(recording)
    assert info.files == 3 and info.sources == {"host-a": "neuron-monitor"} and info.hosts == ["i-0synthetic0000001"]


def test_a_whole_rotated_set_replays_the_same_items(tmp_path):
    folder = tmp_path / "rec"
    recorder = Recorder.to_folder(folder, "live", {}, rotation=Rotation(max_bytes=8_000))
    items = list(synthetic_items(60))
    for item in items:
        recorder.write(item)
    recorder.close()
    got = read_all(folder)[0]
    # parts after the first repeat the open of the source still open (harmless: registering is idempotent)
    repeated = [i for i in got if isinstance(i, SourceEvent) and i.event == "open"]
    assert len(repeated) == len(recorder.files)
    assert [i for i in got if i not in repeated[1:]] == items


def test_recording_files_are_0600_and_new_folders_0700_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        write_synthetic(tmp_path / "a" / "b" / "r.trnrec", 3)
        recorder = Recorder.to_folder(tmp_path / "set", "live", {})
        recorder.close()
    finally:
        os.umask(old)
    mode = lambda p: stat.S_IMODE(p.stat().st_mode)  # noqa: E731
    files = [
        tmp_path / "a" / "b" / "r.trnrec",
        tmp_path / "a" / "b" / "r.trnrec.idx",
        *recorder.files,
        index_path(recorder.files[0]),
    ]
    assert [mode(p) for p in files] == [0o600] * len(files)
    assert [mode(p) for p in (tmp_path / "a", tmp_path / "a" / "b", tmp_path / "set")] == [0o700] * 3


class _Clock:
    def __init__(self):
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def test_frames_are_fsynced_within_the_documented_interval_and_on_close(tmp_path, monkeypatch):
    # Defect: the recorder never fsynced, so a power loss could lose any amount of a recording.
    from trnwatch.collectors import recording as recording_module

    synced = []
    real_fsync = os.fsync

    def spy(fd):
        synced.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    monkeypatch.setattr(recording_module.os, "fsync", spy)
    path, clock = tmp_path / "r.trnrec", _Clock()
    recorder = Recorder.to_file(path, "live", {}, monotonic=clock)
    # Created: the header, its index and the file's name in its folder are durable at once.
    assert synced == ["r.trnrec", "r.trnrec.idx", tmp_path.name]
    synced.clear()
    items = iter(synthetic_items(20))
    recorder.write(next(items))
    recorder.write(next(items))
    recorder.flush()  # a frame cut inside the interval: not yet
    clock.now_s += recording_module.FSYNC_EVERY_S - 0.5
    recorder.flush()
    assert synced == []
    clock.now_s += 0.5  # FSYNC_EVERY_S after the last fsync: the next flush syncs, even without new data
    recorder.flush()
    assert synced == ["r.trnrec", "r.trnrec.idx"]
    synced.clear()
    recorder.flush()  # nothing cut since: nothing to sync
    recorder.write(next(items))
    recorder.close()  # closing syncs the last frame whatever the interval
    assert synced == ["r.trnrec", "r.trnrec.idx"]


def test_a_rotated_set_syncs_each_part_on_close_and_the_folder_on_each_new_part(tmp_path, monkeypatch):
    from trnwatch.collectors import recording as recording_module

    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(
        recording_module.os,
        "fsync",
        lambda fd: (synced.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))), real_fsync(fd)),
    )
    folder = tmp_path / "set"
    recorder = Recorder.to_folder(folder, "live", {}, rotation=Rotation(max_bytes=8_000, retain=2), monotonic=_Clock())
    for item in synthetic_items(20):
        recorder.write(item)
    recorder.close()
    parts = len(recorder.files)
    assert parts >= 3
    assert synced.count("set") == parts  # every new part's name (and every removed one) made durable
    assert sum(name.endswith(".trnrec") for name in synced) == 2 * parts  # at creation and at close


def test_what_was_cut_is_read_back_by_another_process_after_a_sigkill_of_the_recorder(tmp_path):
    import signal
    import subprocess
    import sys

    path = tmp_path / "r.trnrec"
    child = f"""
import sys
from pathlib import Path
from trnwatch.collectors.recording import Recorder
from tests.recordings import synthetic_items
recorder = Recorder.to_file(Path({str(path)!r}), "live", {{}})
items = list(synthetic_items(7))
for item in items[:6]:  # the open and 5 reports
    recorder.write(item)
recorder.flush()  # the documented point for a SIGKILL: every frame cut is in the file
recorder.write(items[6])  # one more report, in the frame still being collected
print("flushed", flush=True)
sys.stdin.read()  # wait to be killed
"""
    proc = subprocess.Popen(
        [sys.executable, "-c", child],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=os.path.dirname(os.path.dirname(__file__)),
    )
    try:
        assert proc.stdout.readline() == "flushed\n"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    items, recording = read_all(path)
    assert sum(isinstance(item, Line) for item in items) == 5 and recording.stats.skipped == {}


def test_a_second_recording_on_one_path_is_refused_and_the_first_kept_whole(tmp_path):
    path = tmp_path / "r.trnrec"
    write_synthetic(path, 20)
    before = path.read_bytes(), index_path(path).read_bytes()
    second = Recorder.to_file(path, "live", {})
    assert second.error is not None and "already exists" in second.error and second.files == []
    assert (path.read_bytes(), index_path(path).read_bytes()) == before
    assert sum(isinstance(i, Line) for i in read_all(path)[0]) == 20
    # an index left without its recording is refused as well, never emptied
    path.unlink()
    assert "r.trnrec.idx already exists" in (Recorder.to_file(path, "live", {}).error or "")
    assert index_path(path).read_bytes() == before[1] and not path.exists()


@pytest.mark.parametrize("planted", ["recording", "index"])
def test_a_symbolic_link_planted_at_the_recording_or_its_index_is_never_followed(tmp_path, planted):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    victim.chmod(0o644)
    path = tmp_path / "shared" / "r.trnrec"
    path.parent.mkdir()
    (path if planted == "recording" else index_path(path)).symlink_to(victim)
    recorder = Recorder.to_file(path, "live", {})
    assert recorder.error is not None and "symbolic link" in recorder.error
    assert victim.read_bytes() == b"precious" and stat.S_IMODE(victim.stat().st_mode) == 0o644


def test_a_symbolic_link_planted_under_the_next_part_name_is_never_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    folder = tmp_path / "rec"
    recorder = Recorder.to_folder(folder, "live", {}, rotation=Rotation(max_bytes=2_000))
    first = recorder.files[0]
    next_part = first.with_name(first.name.replace("-0000.trnrec", "-0001.trnrec"))
    next_part.symlink_to(victim)
    for item in synthetic_items(30):
        recorder.write(item)
    recorder.close()
    assert recorder.error is not None and "symbolic link" in recorder.error
    assert victim.read_bytes() == b"precious" and next_part.is_symlink()
    assert recorder.files == [first]  # what was recorded before stays readable
    assert sum(isinstance(i, Line) for i in read_all(first)[0]) > 0


def test_sessions_started_in_the_same_second_never_share_a_part_name(tmp_path, monkeypatch):
    """Back-to-back `record` sessions within one second (two processes, one clock second): each
    keeps its own parts; none is emptied by the other."""
    folder = tmp_path / "rec"
    monkeypatch.setattr("time.time", lambda: T0)
    counts = []
    for pid in (4000, 4001):
        monkeypatch.setattr("os.getpid", lambda pid=pid: pid)
        recorder = Recorder.to_folder(folder, "live", {})
        for item in synthetic_items(5 + pid % 2):
            recorder.write(item)
        recorder.close()
        assert recorder.error is None
        counts.append(sum(isinstance(i, Line) for i in read_all(recorder.files[0])[0]))
    assert counts == [5, 6] and len(list(folder.glob("*.trnrec"))) == 2


def read_all_traced(path):
    """`read_all`, and the most memory Python allocated meanwhile (tracemalloc's peak)."""
    tracemalloc.start()
    try:
        items, recording = read_all(path)
        return items, recording, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_frame_claiming_a_gibibyte_is_refused_before_anything_is_allocated(tmp_path):
    """A crafted frame at the end of a small file: a valid CRC over a few bytes of zstd data (no
    content size in it), a meta claiming 1 GiB of entries. It is skipped as corrupt, and reading
    allocates nothing near its claim (decompressing with its claim as the limit allocated it)."""
    path = tmp_path / "r.trnrec"
    write_synthetic(path, 5)
    data = zstandard.ZstdCompressor(write_content_size=False).compress(b'{"t":1}\n')
    meta = _META.pack(SKIPPABLE_MAGIC, META_BYTES - 8, T0 + 9, T0 + 9, len(data), 1 << 30, zlib.crc32(data), 1, 0)
    with open(path, "ab") as f:
        f.write(meta + data)
    items, recording, peak = read_all_traced(path)
    assert sum(isinstance(i, Line) for i in items) == 5 and recording.stats.skipped == {"corrupt": 1}
    assert peak < 64 << 20, peak


@pytest.mark.parametrize("damage", ["zero-filled", "cut-header", "foreign-v1", "nul-gibibyte"])
def test_one_bad_part_of_a_set_is_skipped_with_a_warning_and_the_rest_replays(tmp_path, damage):
    folder = tmp_path / "rec"
    recorder = Recorder.to_folder(folder, "live", {}, rotation=Rotation(max_bytes=2_000))
    for item in synthetic_items(40):
        recorder.write(item)
    recorder.close()
    bad = recorder.files[1]
    whole = read_all(folder)[0]
    lost = sum(isinstance(i, Line) for i in read_all(bad)[0])
    if damage == "zero-filled":  # what ENOSPC left: the part's length, all NUL
        bad.write_bytes(b"\0" * bad.stat().st_size)
    elif damage == "cut-header":
        bad.write_bytes(bad.read_bytes()[:20])
    elif damage == "foreign-v1":
        write_v1(bad, list(synthetic_items(3)))
    else:  # 1 GiB of NUL without a newline: sparse, never read whole
        with open(bad, "wb") as f:
            f.truncate(1 << 30)
    items, recording, peak = read_all_traced(folder)
    assert recording.stats.skipped["part"] == 1 and len(recording.warnings) == 1
    assert recording.warnings[0].startswith(f"part skipped: {bad}")
    assert sum(isinstance(i, Line) for i in items) == sum(isinstance(i, Line) for i in whole) - lost > 0
    assert peak < 64 << 20, peak


def test_a_set_with_no_readable_part_is_refused_naming_each(tmp_path):
    folder = tmp_path / "rec"
    folder.mkdir()
    (folder / "trnwatch-a-0000.trnrec").write_bytes(b"\0" * 100)
    with pytest.raises(RecordingError, match=r"no readable part \(part skipped: .*trnwatch-a-0000.trnrec"):
        Recording(folder)


def test_retain_one_stopped_just_after_a_rotation_keeps_the_part_with_the_data(tmp_path):
    """--retain 1 under a fast stream: the session's flush cuts a frame and rotates, then the
    stop comes: the part kept holds the lines (the new part had none and the last part with
    data was deleted)."""
    folder = tmp_path / "rec"
    recorder = Recorder.to_folder(folder, "live", {}, rotation=Rotation(max_bytes=2_000, retain=1))
    for item in list(synthetic_items(200))[:-1]:
        recorder.write(item)
        parts_before = len(recorder.files)
        recorder.flush()  # the session's tick: cut a frame, and rotate once the part is past its size
        if len(recorder.files) > parts_before:
            break  # rotated: the stop comes now
    recorder.close()
    (kept,) = folder.glob("*.trnrec")
    assert sum(isinstance(i, Line) for i in read_all(kept)[0]) > 0


def test_after_a_wall_clock_step_back_retention_deletes_the_stale_parts_not_this_sessions(tmp_path, monkeypatch):
    folder = tmp_path / "rec"
    monkeypatch.setattr("time.time", lambda: T0 + 86_400)  # an earlier session, its clock a day ahead
    stale = Recorder.to_folder(folder, "live", {}, rotation=Rotation(max_bytes=2_000))
    for item in synthetic_items(30):
        stale.write(item)
    stale.close()
    assert len(stale.files) >= 3
    monkeypatch.setattr("time.time", lambda: T0)  # the clock stepped back: this session's names sort first
    recorder = Recorder.to_folder(folder, "live", {}, rotation=Rotation(max_bytes=2_000, retain=3))
    items = list(synthetic_items(60))
    for item in items:
        recorder.write(item)
    recorder.close()
    kept = sorted(folder.glob("*.trnrec"))
    assert sorted(kept) == sorted(recorder.files[-3:]) and not set(kept) & set(stale.files)
    got = [i for f in recorder.files[-3:] for i in read_all(f)[0] if isinstance(i, Line)]
    assert got and got == [i for i in items if isinstance(i, Line)][-len(got) :]


@pytest.mark.parametrize("ending", ["newline", "none"])
def test_a_v1_recording_with_a_huge_line_is_never_read_whole(tmp_path, ending):
    """A /1 file (JSON lines, no index) holding a 256 MiB line of NUL bytes: skipped as an unreadable
    entry (or, with no newline, as the cut end of the file), read in bounded pieces."""
    path = tmp_path / "old.trnrec"
    items = list(synthetic_items(6))
    write_v1(path, items[:4])
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size + (256 << 20))  # sparse: a hole reads as NUL
    if ending == "newline":
        tail = tmp_path / "tail.trnrec"
        write_v1(tail, items[4:])
        with open(path, "ab") as f:
            f.write(b"\n" + tail.read_bytes().split(b"\n", 1)[1])  # its entries, not its header
    got, recording, peak = read_all_traced(path)
    assert got == (items if ending == "newline" else items[:4])
    assert recording.stats.skipped == ({"entry": 1} if ending == "newline" else {})
    assert peak < 64 << 20, peak
