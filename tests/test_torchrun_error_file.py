"""torchrun's `@record` error files as trnwatch opens them (collectors/launcher_log.py
`read_error_file`): the worker's file as torch writes it, and what is refused without reading it
(a FIFO that would block, a file past the bound, text that is not the layout, a missing path).
The real torchrun case is tests/test_torchrun_real.py."""

import json
import os

import pytest

from trnwatch.collectors.launcher_log import MAX_ERROR_FILE_BYTES, read_error_file


def test_the_error_file_torch_writes_gives_its_message(tmp_path, monkeypatch):
    errors = pytest.importorskip("torch.distributed.elastic.multiprocessing.errors")
    path = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(path))
    try:
        raise RuntimeError("injected failure on rank 0 at step 4\nsecond line")
    except RuntimeError as exc:
        errors.ErrorHandler().record_exception(exc)  # what @record does in the worker
    assert read_error_file(str(path)) == ("read", "RuntimeError: injected failure on rank 0 at step 4")


def test_what_is_not_an_error_file_is_refused_with_its_reason(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert read_error_file(str(fifo)) == ("not a regular file", None)  # opened without blocking
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"message": {"message": "x" * MAX_ERROR_FILE_BYTES}}))
    assert read_error_file(str(big)) == (f"larger than {MAX_ERROR_FILE_BYTES} bytes", None)
    link = tmp_path / "link.json"
    link.symlink_to(big)
    assert read_error_file(str(link)) == ("symlink", None)
    for text in ("not json", "[1, 2]", '{"message": {"message": 3}}', '{"message": "flat"}'):
        (tmp_path / "bad.json").write_text(text)
        assert read_error_file(str(tmp_path / "bad.json")) == ("not an error file", None), text
    assert read_error_file(str(tmp_path / "gone.json")) == ("missing", None)
