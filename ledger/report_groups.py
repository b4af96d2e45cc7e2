"""A neuron-monitor report group's error, as the host and runtime state keep it.

Every group of a report (`neuroncore_counters`, `memory_info`, ...) may come with an `error`
instead of figures; the values beside an error are placeholders and are never folded. The error
is kept under the group's name until the group comes back without one.
"""

from typing import Protocol, TypeGuard, TypeVar


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
        errors[name] = group.error
        return False
    errors.pop(name, None)
    return True
