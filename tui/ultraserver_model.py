"""The UltraServer view's model: one UltraServer's rollup and its host rows as laid out."""

from dataclasses import dataclass

from trnwatch.ledger import EfaRollup, HostSummary, ReadModel, UltraServerRollup
from trnwatch.tui.host_rows import sort_and_filter


@dataclass(frozen=True)
class UltraServerModel:
    """One UltraServer (or the unmapped hosts) at once: rollup, host counts, rows to draw."""

    group: str  # UltraServer id, or NO_GROUP
    group_number: int
    group_count: int
    rollup: UltraServerRollup  # figures over fresh hosts, host counts over all of them
    rows: tuple[HostSummary, ...]  # sorted and filtered
    sort: str
    filter: str
    efa: EfaRollup | None = None  # EFA (between UltraServers) of its hosts; None: sysfs not sampled


def ultraserver_model(
    read: ReadModel, group: str | None, sort: str = "host", filter_: str = "all"
) -> UltraServerModel | None:
    """The group to show (`group`, or the first one when it is gone or None); None when no host
    has reported yet."""
    ids = read.groups
    if not ids:
        return None
    if group not in ids:
        group = ids[0]
    hosts = read.group_hosts(group)
    return UltraServerModel(
        group=group,
        group_number=ids.index(group),
        group_count=len(ids),
        rollup=read.ultraserver(group, hosts),  # with configured members that never reported
        rows=tuple(sort_and_filter(read.hosts(hosts), sort, filter_)),
        sort=sort,
        filter=filter_,
        efa=read.efa(group),
    )
