"""Reading the small text files users hand trnwatch (host lists, maps, URL lists, tokens)."""

from pathlib import Path


class TextFileError(ValueError):
    """A file that cannot be read as UTF-8 text; the message names it and says why."""


def read_text_file(path: Path, what: str = "") -> str:
    """The file's text; `TextFileError` ("cannot read token file x: ...") if unreadable."""
    name = f"{what} {path}" if what else str(path)
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TextFileError(f"cannot read {name}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise TextFileError(f"{name} is not UTF-8 text") from None
