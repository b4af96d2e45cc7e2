"""Reading the small text files users hand trnwatch (host lists, maps, URL lists, tokens)."""

from pathlib import Path

# Host lists of 4,096 hosts, maps and tokens are well under a MiB: a "file" past this (/dev/zero,
# /dev/urandom, a log handed by mistake) is refused after reading this much, never read whole.
MAX_TEXT_FILE_BYTES = 16 << 20


class TextFileError(ValueError):
    """A file that cannot be read as UTF-8 text; the message names it and says why."""


def read_text_file(path: Path, what: str = "") -> str:
    """The file's text; `TextFileError` ("cannot read token file x: ...") if unreadable, not
    UTF-8, or over MAX_TEXT_FILE_BYTES (read up to that, whatever the file is: a pipe works)."""
    name = f"{what} {path}" if what else str(path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_TEXT_FILE_BYTES + 1)
    except OSError as exc:
        raise TextFileError(f"cannot read {name}: {exc.strerror or exc}") from None
    if len(data) > MAX_TEXT_FILE_BYTES:
        raise TextFileError(f"{name} is over {MAX_TEXT_FILE_BYTES >> 20} MiB: not a text file trnwatch reads")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise TextFileError(f"{name} is not UTF-8 text") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")  # universal newlines, as text mode reads
