"""A neuron-monitor report group's error, as the host and runtime state keep it.

Every group of a report (`neuroncore_counters`, `memory_info`, ...) may come with an `error`
instead of figures; the values beside an error are placeholders and are never folded. The error
is kept under the group's name until the group comes back without one.

Error strings are kept to their first MAX_KEPT_ERROR_CHARS characters (the decoder admits 4,096):
a host holds up to 1,024 runtimes with five errors each, so the full strings made 2.8 MiB per host
of a stream with 512 fresh pids a report (tests/benchmarks/bench_memory.py).
"""

from typing import Protocol, TypeGuard, TypeVar

MAX_KEPT_ERROR_CHARS = 256


class _ReportGroup(Protocol):
    @property
    def error(self) -> str | None: ...


_G = TypeVar("_G", bound=_ReportGroup)


def group_ok(group: _G | None, errors: dict[str, str], name: str) -> TypeGuard[_G]:
    """Record or clear one group's error; True when the group came without one.

    A group absent from the report changes nothing: it was not reported this period."""
    if group is None:
        return False
    if group.error:
        errors[name] = kept_error(group.error)
        return False
    errors.pop(name, None)
    return True


def kept_error(text: str) -> str:
    """An error string as state keeps it: its first MAX_KEPT_ERROR_CHARS characters, and how many
    more it had."""
    if len(text) <= MAX_KEPT_ERROR_CHARS:
        return text
    return f"{text[:MAX_KEPT_ERROR_CHARS]}... (+{len(text) - MAX_KEPT_ERROR_CHARS:,} characters)"
