"""The device views' host lists as laid out: the sorts and filters of the grid and host list,
and what a jump (`/7/2`) names, over the read model's hosts (`ReadModel.hosts`: each host's
number in its group, freshness and chips; ledger/read_model.py), plain data, no Textual.
"""

from trnwatch.ledger import HBM_HIGH_PCT, NO_GROUP, HostSummary, ReadModel, hbm_high

# Sort keys and filters of the UltraServer grid and host list, in the order `s` / `f` cycle.
SORTS = ("host", "util", "hbm", "ecc")
FILTERS = ("all", "idle", "ecc", "hbm-high", "not-fresh")
FILTER_HELP = {
    "all": "every host",
    "idle": "hosts with an idle chip (0% utilisation)",
    "ecc": "hosts with a chip that had ECC events",
    "hbm-high": f"hosts with a chip at {HBM_HIGH_PCT:.0f}% HBM or more",
    "not-fresh": "hosts that are stale or lost",
}


def _sort_key(sort: str):
    def util(row: HostSummary) -> float:
        values = [c.util_pct for c in row.chips if c.util_pct is not None]
        return min(values) if values else 101.0  # no figure sorts after every figure

    def hbm(row: HostSummary) -> float:
        values = [c.hbm_pct for c in row.chips if c.hbm_pct is not None]
        return -max(values) if values else 1.0

    def ecc(row: HostSummary) -> int:
        return -sum(c.ecc_events for c in row.chips)

    key = {"host": lambda r: 0, "util": util, "hbm": hbm, "ecc": ecc}[sort]
    return lambda row: (key(row), row.number)


def _keep(row: HostSummary, filter_: str) -> bool:
    if filter_ == "all":
        return True
    if filter_ == "not-fresh":
        return row.state != "fresh"
    if filter_ == "idle":
        return row.state == "fresh" and any(c.util_pct == 0.0 for c in row.chips)
    if filter_ == "ecc":
        return any(c.ecc_events for c in row.chips)
    if filter_ == "hbm-high":
        return any(hbm_high(c.hbm_pct) for c in row.chips)
    raise ValueError(f"unknown filter {filter_!r}")


def sort_and_filter(rows: list[HostSummary], sort: str, filter_: str) -> list[HostSummary]:
    return sorted((r for r in rows if _keep(r, filter_)), key=_sort_key(sort))


# --- jump ---------------------------------------------------------------------------------------


def resolve_target(read: ReadModel, group: str | None, text: str) -> tuple[str, int | None] | None:
    """The (host id, chip or None) that `text` names: "7" or "7/2" (host number in `group`), or a
    host id, instance name or stream label, optionally followed by "/chip". None if nothing matches."""
    name, slash, chip_text = text.strip().partition("/")
    name = name.strip()
    chip = None
    if slash:
        if not chip_text.strip().isdigit():
            return None
        chip = int(chip_text)
    if name.isdigit():
        rows = read.hosts(read.group_hosts(group if group is not None else NO_GROUP))
        host_id = next((r.host_id for r in rows if r.number == int(name)), None)
    else:
        host = read.ledger.host_named(name)
        host_id = host.host_id if host else None
    if host_id is None or (chip is not None and not 0 <= chip < len(read.ledger.hosts[host_id].chips)):
        return None
    return host_id, chip
