"""`trnwatch record DIR` never writes through a link it did not make, and `replay DIR` never reads
a part that is a link or someone else's (issue 36 item 4): a real symbolic link planted where the
folder goes, a link swapped in while recording, a part link and a part owned by another user."""

import os
import time
from pathlib import Path

import pytest

from trnwatch.collectors.lines import Line
from trnwatch.collectors.recording import Recorder, Rotation
from trnwatch.collectors.recording_reader import Recording
from tests.test_cli import run
from tests.test_recording_cli import sim_lines

NOBODY = 65534


def record(folder: Path, lines: int = 3) -> Recorder:
    recorder = Recorder.to_folder(folder, "live", {}, rotation=Rotation(retain=4))
    for i in range(lines):
        recorder.write(Line("stdin", "neuron-monitor", time.time() + i, f'{{"n": {i}}}'))
    return recorder


def test_record_into_a_planted_folder_link_is_refused_and_writes_nothing_there(tmp_path):
    theirs = tmp_path / "someone-elses"
    theirs.mkdir()
    planted = tmp_path / "shared" / "recordings"
    planted.parent.mkdir()
    planted.symlink_to(theirs)
    result = run(["record", str(planted), "--stdin", "--duration", "5"], input="\n".join(sim_lines(2)) + "\n")
    assert result.returncode == 2, result.stderr
    assert f"{planted} is a symbolic link; trnwatch never writes into a folder through a link" in result.stderr
    assert list(theirs.iterdir()) == []


def test_record_into_another_users_folder_is_refused(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to give a folder to another user")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    recorder = record(theirs)
    assert recorder.error == (
        f"{theirs} belongs to another user (uid {NOBODY}), who could remove, rename or add files in it: "
        "record into a folder of your own"
    )
    assert list(theirs.iterdir()) == []


def test_a_link_swapped_in_for_the_folder_while_recording_is_never_followed(tmp_path):
    folder, elsewhere = tmp_path / "rec", tmp_path / "elsewhere"
    elsewhere.mkdir()
    recorder = record(folder)
    moved = tmp_path / "rec-moved"
    folder.rename(moved)
    folder.symlink_to(elsewhere)  # the name now leads somewhere else
    recorder.rotation = Rotation(max_bytes=1, retain=4)
    recorder.write(Line("stdin", "neuron-monitor", time.time() + 10, '{"n": 9}'))
    recorder.flush()  # cuts the frame and starts the next part
    recorder.close()
    assert recorder.error is None and len(recorder.files) == 2
    assert list(elsewhere.iterdir()) == []
    assert sorted(p.name for p in moved.iterdir()) == sorted(
        n for p in recorder.files for n in (p.name, p.name + ".idx")
    )


def test_replay_of_a_folder_skips_parts_that_are_links_or_another_users(tmp_path):
    folder = tmp_path / "rec"
    record(folder).close()
    [own] = folder.glob("*.trnrec")
    outside = tmp_path / "outside"
    record(outside, lines=5).close()
    [foreign] = outside.glob("*.trnrec")
    link = folder / "trnwatch-20990101T000000Z-1-0000.trnrec"
    link.symlink_to(foreign)
    recording = Recording(folder)
    assert [f.path for f in recording.files] == [own]
    assert recording.stats.skipped["part"] == 1
    assert recording.warnings == [f"part skipped: {link} is a symbolic link: not read"]
    if os.geteuid() == 0:
        joined = folder / "trnwatch-20990102T000000Z-1-0000.trnrec"
        joined.write_bytes(foreign.read_bytes())
        os.chown(joined, NOBODY, NOBODY)
        recording = Recording(folder)
        assert [f.path for f in recording.files] == [own] and recording.stats.skipped["part"] == 2
        assert (
            f"part skipped: {joined} is owned by uid {NOBODY}, not a part of its folder's owner "
            f"(uid {os.geteuid()}): not read"
        ) in recording.warnings
    result = run(["replay", str(folder), "--headless", "--receipt", str(tmp_path / "r.json")])
    assert f"{link} is a symbolic link: not read" in result.stderr
