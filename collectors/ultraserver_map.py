"""The `--ultraservers FILE` map: which UltraServer each host belongs to.

One host per line: `<host id or stream label> <UltraServer id>`, whitespace-separated; blank
lines and `#` comments are ignored. Membership is configuration, never guessed: this file
overrides the `instance_info.ultraserver_id` a report may carry.
"""

from pathlib import Path

from trnwatch.collectors.text_files import TextFileError, read_text_file


class UltraServerMapError(ValueError):
    """The map file cannot be used; the message names the file and line."""


def load_ultraserver_map(path: Path) -> dict[str, str]:
    """Read the map; raise `UltraServerMapError` with the offending line on any problem."""
    try:
        text = read_text_file(path)
    except TextFileError as exc:
        raise UltraServerMapError(str(exc)) from None
    mapping: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        content = raw.split("#", 1)[0].strip()
        if not content:
            continue
        fields = content.split()
        if len(fields) != 2 or not all(f.isprintable() for f in fields):
            raise UltraServerMapError(f"{path}:{number}: expected '<host> <ultraserver>', got {raw.strip()!r}")
        host, ultraserver = fields
        if mapping.get(host, ultraserver) != ultraserver:
            raise UltraServerMapError(f"{path}:{number}: {host!r} is already in UltraServer {mapping[host]!r}")
        mapping[host] = ultraserver
    return mapping
