"""Where the user can go from each scope: previous / next (parent and child: `scope.SCOPES`).

One table instead of a branch per key: the scopes that `[` / `]` step through say the places, in
the order people see them (UltraServer ids, host numbers, chips of those hosts in order).
`settle` is the one place a selection that points at something gone (or at nothing yet) is moved
onto something that exists, before the views render: views only read the selection.
"""

from collections.abc import Callable
from dataclasses import dataclass

from trnwatch.ledger import NO_GROUP, ReadModel
from trnwatch.tui.host_rows import sort_and_filter
from trnwatch.tui.scope import Selection

Place = tuple  # what one step of `[` / `]` lands on, in a scope's own terms


def _hosts_in_order(read: ReadModel, sel: Selection) -> list[str]:
    """Host ids of the selected host's UltraServer (else the selected group), by host number."""
    host = read.ledger.hosts.get(sel.host_id) if sel.host_id else None
    group = (read.ledger.ultraserver_of(host) or NO_GROUP) if host else (sel.group or NO_GROUP)
    return [r.host_id for r in read.hosts(read.group_hosts(group))]


def _group_places(read: ReadModel, sel: Selection) -> list[Place]:
    return [(g,) for g in read.groups]


def _host_places(read: ReadModel, sel: Selection) -> list[Place]:
    return [(h,) for h in _hosts_in_order(read, sel)]


def _chip_places(read: ReadModel, sel: Selection) -> list[Place]:
    return [(h, c) for h in _hosts_in_order(read, sel) for c in range(len(read.ledger.hosts[h].chips))]


def _put_group(sel: Selection, place: Place) -> None:
    sel.group, sel.host_id = place[0], None


def _put_host(sel: Selection, place: Place) -> None:
    sel.host_id, sel.chip = place[0], 0


def _put_chip(sel: Selection, place: Place) -> None:
    sel.host_id, sel.chip = place


@dataclass(frozen=True)
class Steps:
    places: Callable[[ReadModel, Selection], list[Place]]  # what `[` / `]` step through
    here: Callable[[Selection], Place]
    put: Callable[[Selection, Place], None]


# The cluster steps through its rows as drawn (sorted): the view does it (`ClusterView.move`);
# the job view through its suspects (`JobView.step_suspect`).
STEPS: dict[str, Steps] = {
    "ultraserver": Steps(_group_places, lambda sel: (sel.group,), _put_group),
    "host": Steps(_host_places, lambda sel: (sel.host_id,), _put_host),
    "chip": Steps(_chip_places, lambda sel: (sel.host_id, sel.chip), _put_chip),
}


def step(read: ReadModel, sel: Selection, delta: int) -> None:
    """The previous (delta -1) or next (+1) place of the scope shown, wrapping around."""
    nav = STEPS.get(sel.scope)
    if nav is None:
        return
    places = nav.places(read, sel)
    if not places:
        return
    here = nav.here(sel)
    i = places.index(here) + delta if here in places else 0
    nav.put(sel, places[i % len(places)])


def settle(read: ReadModel, sel: Selection) -> None:
    """Point the selection at things that exist: an UltraServer group that has hosts, a host
    of it (the first shown under the sort and filter when the selected one is not), a chip of
    that host. Called before a refresh, never by a view."""
    ledger = read.ledger
    ids = read.groups
    if not ids:
        return
    if sel.group not in ids:
        sel.group = ids[0]
    if sel.scope in ("ultraserver", "cluster") or sel.host_id not in ledger.hosts:
        in_group = read.group_hosts(sel.group)
        if sel.host_id not in {h.host_id for h in in_group}:
            rows = sort_and_filter(read.hosts(in_group), sel.sort, sel.filter)
            sel.host_id, sel.chip = (rows[0].host_id, 0) if rows else (sel.host_id, sel.chip)
    host = ledger.hosts.get(sel.host_id) if sel.host_id else None
    if host is not None and host.chips and not 0 <= sel.chip < len(host.chips):
        sel.chip = 0
