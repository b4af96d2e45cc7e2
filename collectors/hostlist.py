"""Which hosts to watch over SSH: Slurm hostlist expressions, hosts files, and the host-name check.

Host names end up as an argument of the `ssh` executable, so every name is checked before anything
runs: a name ssh could read as an option (leading `-`, e.g. `-oProxyCommand=...`), or one holding
whitespace, control characters or shell metacharacters, is refused with a message naming the
problem. The names are never put through a shell on this side; the check also keeps them
harmless in `ssh_config` token expansion (`%h`) and in a remote `ProxyCommand`.

Hostlist syntax (Slurm's): comma-separated items, each a name with zero or more bracketed range
lists, `trn3-[001-036]`, `rack[1-2]-node[01-18]`, `a[1,3,5-7],b`. A range keeps the zero padding
of its lower bound, as Slurm does. Several bracket groups in one item multiply out.

Hosts file: one host per line, `HOST [ULTRASERVER [LABEL]]`, whitespace-separated; `#` starts a
comment. `-` in the UltraServer column means "none" (to give a label alone). HOST may be a
hostlist expression when no label is given. The label, if any, becomes the stream's source id
(default: the host name), and the UltraServer id places the host's stream in that UltraServer.
"""

import os
import re
from dataclasses import dataclass
from pathlib import Path

from trnwatch.collectors.text_files import TextFileError, read_text_file

# A bound on expansion: `[0-999999999]` must fail fast, not eat the machine.
MAX_HOSTS = 65536
MAX_HOST_NAME_CHARS = 255

_USER = r"[A-Za-z0-9_][A-Za-z0-9._-]*"
_HOST = r"[A-Za-z0-9_:][A-Za-z0-9._:-]*"
_SAFE_HOST = re.compile(rf"(?:{_USER}@)?{_HOST}")
_SHELL_METACHARACTERS = set("|&;<>()$`\\\"'*?[]#~=%!{},^")
SLURM_NODELIST_VARIABLES = ("SLURM_JOB_NODELIST", "SLURM_NODELIST")


class HostNameError(ValueError):
    """A host name that must not reach ssh; the message says which rule it breaks."""


class HostlistError(ValueError):
    """A hostlist expression or hosts file that cannot be read; the message says where."""


def check_host_name(name: str) -> str:
    """Return `name` if it is safe to pass to ssh as a host; raise `HostNameError` otherwise.

    Allowed: ASCII letters, digits, `.`, `-`, `_`, `:` (IPv6), and one `user@` prefix; the name
    (and the user) must not start with `-`.
    """
    shown = repr(name)
    if not name:
        raise HostNameError("empty host name")
    if len(name) > MAX_HOST_NAME_CHARS:
        raise HostNameError(f"host name {shown[:40]}... is longer than {MAX_HOST_NAME_CHARS} characters")
    if name.startswith("-"):
        raise HostNameError(f"host name {shown} starts with '-': ssh would read it as an option")
    for ch in name:
        if ch.isspace():
            raise HostNameError(f"host name {shown} contains whitespace")
        if not ch.isprintable():
            raise HostNameError(f"host name {shown} contains a control character")
        if ch in _SHELL_METACHARACTERS:
            raise HostNameError(f"host name {shown} contains the shell metacharacter {ch!r}")
    if not _SAFE_HOST.fullmatch(name):
        raise HostNameError(
            f"host name {shown} is not a plain host name (allowed: ASCII letters, digits, "
            "'.', '-', '_', ':' and one 'user@' prefix, no leading '-')"
        )
    return name


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside brackets."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"nested '[' in {text!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unmatched ']' in {text!r}")
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise HostlistError(f"unmatched '[' in {text!r}")
    items.append(text[start:])
    return items


def _expand_ranges(ranges: str, item: str) -> list[str]:
    """`001-003,7` -> ['001', '002', '003', '7']."""
    out: list[str] = []
    for part in ranges.split(","):
        low, sep, high = part.partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            raise HostlistError(f"bad range {part!r} in {item!r} (expected N or N-M, digits only)")
        if not sep:
            out.append(low)
            continue
        if int(high) < int(low):
            raise HostlistError(f"range {part!r} in {item!r} runs backwards")
        if int(high) - int(low) + len(out) >= MAX_HOSTS:
            raise HostlistError(f"{item!r} expands to more than {MAX_HOSTS} hosts")
        width = len(low)
        out.extend(str(n).zfill(width) for n in range(int(low), int(high) + 1))
    return out


def expand_hostlist(expression: str) -> list[str]:
    """Expand a Slurm hostlist expression to host names, in order, duplicates removed.

    Raises `HostlistError` for malformed expressions and `HostNameError` for an expanded name
    that fails `check_host_name`.
    """
    hosts: dict[str, None] = {}
    for item in _split_top_level(expression.strip()):
        item = item.strip()
        if not item:
            continue
        names = [""]
        # re.split with a capturing group alternates literal text and "[...]" groups.
        for segment in re.split(r"(\[[^\]]*\])", item):
            choices = _expand_ranges(segment[1:-1], item) if segment.startswith("[") else [segment]
            if len(names) * len(choices) > MAX_HOSTS:
                raise HostlistError(f"{item!r} expands to more than {MAX_HOSTS} hosts")
            names = [n + c for n in names for c in choices]
        for name in names:
            hosts[check_host_name(name)] = None
        if len(hosts) > MAX_HOSTS:
            raise HostlistError(f"{expression!r} expands to more than {MAX_HOSTS} hosts")
    if not hosts:
        raise HostlistError(f"no hosts in {expression!r}")
    return list(hosts)


def slurm_job_hosts(environ: dict[str, str] | None = None) -> list[str]:
    """The nodes of the Slurm job this process runs in (SLURM_JOB_NODELIST); HostlistError if none."""
    env = os.environ if environ is None else environ
    for name in SLURM_NODELIST_VARIABLES:
        if env.get(name):
            return expand_hostlist(env[name])
    raise HostlistError(
        "not inside a Slurm job (SLURM_JOB_NODELIST is not set): give a host list, "
        "e.g. --hosts 'trn3-[001-036]', or --hosts-file FILE"
    )


@dataclass(frozen=True, slots=True)
class HostEntry:
    """One host to watch: the name given to ssh, its stream label (source id), its UltraServer."""

    host: str
    label: str
    ultraserver: str | None = None


def _check_label(label: str, where: str) -> str:
    if not label.isprintable() or len(label) > MAX_HOST_NAME_CHARS:
        raise HostlistError(f"{where}: label {label!r} must be printable and at most {MAX_HOST_NAME_CHARS} characters")
    return label


def load_hosts_file(path: Path) -> list[HostEntry]:
    """Read a hosts file (format in the module docstring); raise HostlistError naming file and line."""
    try:
        text = read_text_file(path)
    except TextFileError as exc:
        raise HostlistError(str(exc)) from None
    entries: list[HostEntry] = []
    seen_hosts: dict[str, int] = {}
    seen_labels: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        where = f"{path}:{number}"
        content = raw.split("#", 1)[0].strip()
        if not content:
            continue
        fields = content.split()
        if len(fields) > 3:
            raise HostlistError(f"{where}: expected 'HOST [ULTRASERVER [LABEL]]', got {content!r}")
        try:
            hosts = expand_hostlist(fields[0])
        except (HostlistError, HostNameError) as exc:
            raise HostlistError(f"{where}: {exc}") from None
        ultraserver = fields[1] if len(fields) > 1 and fields[1] != "-" else None
        if ultraserver is not None:
            _check_label(ultraserver, where)
        label = _check_label(fields[2], where) if len(fields) > 2 else None
        if label is not None and len(hosts) > 1:
            raise HostlistError(f"{where}: a label names one host, but {fields[0]!r} expands to {len(hosts)}")
        for host in hosts:
            entry = HostEntry(host, label or host, ultraserver)
            for key, seen, what in ((entry.host, seen_hosts, "host"), (entry.label, seen_labels, "label")):
                if key in seen:
                    raise HostlistError(f"{where}: {what} {key!r} is already on line {seen[key]}")
                seen[key] = number
            entries.append(entry)
    if not entries:
        raise HostlistError(f"{path}: no hosts")
    return entries
