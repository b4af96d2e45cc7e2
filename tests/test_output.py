"""The one rule for every file trnwatch writes (trnwatch/output.py) and the one sanitiser of
every output (trnwatch/outside.py)."""

import json
import os
import stat
from pathlib import Path

import pytest

from trnwatch.output import (
    ExistingFileError,
    OutputError,
    check_writable,
    create_exclusive,
    default_receipt_name,
    receipt_places,
    rewrite_own,
    write_new,
)
from trnwatch.outside import clean, json_safe
from tests.mounts import fill, tmpfs

HOSTILE = "tag\x1b]52;c;aGVsbG8=\x07\x1b[2J\u009b31m\u202eevil\u2066x\u2028y\x7f"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_umask():
    old = os.umask(0o000)
    yield
    os.umask(old)


def test_files_are_0600_and_created_folders_0700_whatever_the_umask(tmp_path, open_umask):
    target = tmp_path / "a" / "b" / "r.json"
    write_new(target, "{}\n")
    assert mode(target) == 0o600
    assert mode(tmp_path / "a") == 0o700 and mode(tmp_path / "a" / "b") == 0o700
    os.close(create_exclusive(tmp_path / "c" / "rec.trnrec"))
    assert mode(tmp_path / "c" / "rec.trnrec") == 0o600 and mode(tmp_path / "c") == 0o700


def test_a_tight_umask_does_not_make_files_unreadable_to_their_owner(tmp_path):
    old = os.umask(0o777)
    try:
        write_new(tmp_path / "new" / "r.json", "{}\n")
    finally:
        os.umask(old)
    assert mode(tmp_path / "new") == 0o700 and mode(tmp_path / "new" / "r.json") == 0o600


def test_existing_folders_keep_their_mode(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    write_new(shared / "r.json", "{}")
    assert mode(shared) == 0o755


def test_a_new_file_is_whole_leaves_no_temp_file_and_only_its_writer_replaces_it(tmp_path):
    target = tmp_path / "r.json"
    write_new(target, "old\n")
    with pytest.raises(ExistingFileError, match="already exists"):
        write_new(target, "new\n")
    assert target.read_text() == "old\n"
    rewrite_own(target, "new\n")
    assert target.read_text() == "new\n" and os.listdir(tmp_path) == ["r.json"]


@pytest.mark.parametrize("dangling", [False, True])
def test_a_planted_symbolic_link_is_refused_never_followed(tmp_path, dangling):
    """Someone plants `r.json -> victim` in a shared folder: the victim keeps its bytes and mode,
    whatever trnwatch creates there (whole files, appended files) and whatever it checks first."""
    victim = tmp_path / "victim"
    if not dangling:
        victim.write_text("precious\n")
        victim.chmod(0o644)
    for name in ("r.json", "rec.trnrec"):
        (tmp_path / name).symlink_to(victim)
    with pytest.raises(ExistingFileError, match=r"r.json already exists \(a symbolic link\)"):
        write_new(tmp_path / "r.json", "{}")
    with pytest.raises(ExistingFileError, match="symbolic link"):
        create_exclusive(tmp_path / "rec.trnrec", os.O_APPEND)
    with pytest.raises(ExistingFileError, match="symbolic link"):
        check_writable(tmp_path / "r.json")
    if dangling:
        assert not victim.exists()
    else:
        assert victim.read_text() == "precious\n" and mode(victim) == 0o644
    assert sorted(os.listdir(tmp_path)) == sorted(["rec.trnrec", "r.json"] + ([] if dangling else ["victim"]))


def test_default_receipt_names_are_process_unique_and_sort_by_time():
    a = default_receipt_name("live", 1_764_000_000.25, pid=41)
    b = default_receipt_name("live", 1_764_000_000.25, pid=42)
    later = default_receipt_name("live", 1_764_000_000.5, pid=7)
    assert a != b and sorted([later, b, a]) == [a, b, later]
    assert default_receipt_name("live", 1_764_000_000.25) != default_receipt_name("live", 1_764_000_000.25, pid=1)


def test_a_parent_that_is_a_file_is_an_output_error_in_words(tmp_path):
    (tmp_path / "plain").write_text("x")
    with pytest.raises(OutputError, match="is a file, not a folder"):
        write_new(tmp_path / "plain" / "sub" / "r.json", "{}")
    with pytest.raises(OutputError, match="is a file, not a folder"):
        check_writable(tmp_path / "plain" / "r.json")
    with pytest.raises(OutputError, match="is a folder"):
        check_writable(tmp_path)


def test_a_read_only_file_system_is_refused_before_and_during_a_write(tmp_path):
    with tmpfs(tmp_path / "ro", read_only=True) as ro:
        with pytest.raises(OutputError, match="read-only"):
            check_writable(ro / "r.json")
        with pytest.raises(OutputError, match="read-only"):
            write_new(ro / "r.json", "{}")


def test_a_full_file_system_keeps_the_previous_file_whole(tmp_path):
    with tmpfs(tmp_path / "full", size_kib=64) as full:
        write_new(full / "r.json", "previous\n")
        fill(full)
        with pytest.raises(OutputError, match="no space left"):
            check_writable(full / "other.json")
        with pytest.raises(OutputError, match="no space left"):
            rewrite_own(full / "r.json", "x" * 65536)
        with pytest.raises(OutputError, match="no space left"):
            write_new(full / "new.json", "x" * 65536)
        assert (full / "r.json").read_text() == "previous\n"
        assert sorted(os.listdir(full)) == ["filler", "r.json"]  # the temp file is gone


def test_receipt_places_fall_back_to_the_default_folder_then_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    asked = tmp_path / "asked.json"
    assert receipt_places(asked, "trnwatch-x-live.json") == [
        asked,
        tmp_path / "state" / "trnwatch" / "receipts" / "trnwatch-x-live.json",
        tmp_path / "trnwatch-x-live.json",
    ]


def test_clean_drops_every_control_and_bidi_character():
    text = clean(HOSTILE)
    assert text == "tag]52;c;aGVsbG8=[2J31mevilx y"
    assert all(ch.isprintable() for ch in text)


def test_json_safe_escapes_controls_and_bidi_but_keeps_the_exact_string():
    raw = json.dumps({"tag": HOSTILE, "name": "東京 café"}, ensure_ascii=False)
    safe = json_safe(raw)
    assert json.loads(safe) == {"tag": HOSTILE, "name": "東京 café"}
    for ch in ("\x1b", "\x07", "\u009b", "\u202e", "\u2066", "\u2028", "\x7f"):
        assert ch not in safe
    assert "東京 café" in safe  # printable text stays readable
    assert json_safe('{"e": "\U000e0001"}') == '{"e": "\\udb40\\udc01"}'  # a tag character, as UTF-16
