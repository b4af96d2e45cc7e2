"""The UltraServer view's model: one UltraServer's rollup and its host rows, plain data."""

from dataclasses import dataclass

from trnwatch.ledger.ledger import Ledger
from trnwatch.ledger.rollups import UltraServerRollup, ultraserver_rollup
from trnwatch.tui.host_rows import HostRow, group_hosts, groups, host_rows, sort_and_filter


@dataclass(frozen=True)
class UltraServerModel:
    """One UltraServer (or the unmapped hosts) at once: rollup, host counts, rows to draw."""

    group: str  # UltraServer id, or NO_GROUP
    group_number: int
    group_count: int
    rollup: UltraServerRollup  # figures over fresh hosts, host counts over all of them
    rows: tuple[HostRow, ...]  # sorted and filtered
    sort: str
    filter: str


def ultraserver_model(
    ledger: Ledger, now_s: float, group: str | None, sort: str = "host", filter_: str = "all"
) -> UltraServerModel | None:
    """The group to show (`group`, or the first one when it is gone or None); None when no host
    has reported yet."""
    ids = groups(ledger)
    if not ids:
        return None
    if group not in ids:
        group = ids[0]
    hosts = group_hosts(ledger, group)
    rows = host_rows(ledger, hosts, now_s)
    return UltraServerModel(
        group=group,
        group_number=ids.index(group),
        group_count=len(ids),
        rollup=ultraserver_rollup(ledger, group, hosts, now_s),  # with configured members that never reported
        rows=tuple(sort_and_filter(rows, sort, filter_)),
        sort=sort,
        filter=filter_,
    )
