"""Hosts and their chips as every device view lists them, plain data (no Textual, no terminal).

A host's row (its number in its group, identity, freshness, each chip's cell), the groups hosts
fall in (UltraServers, then the hosts mapped to none), the sorts and filters of the grid and
host list, and what a jump (`/7/2`) names. "Now" is the session's clock
(`ledger.snapshot.session_now_s`): the wall clock for live and simulated sessions, the time of
the latest line for a replay, a fixed time in tests.

Freshness is the ledger's rule (`ledger.rollups.freshness_at`): a host whose reports stopped
is not fresh, its last figures are shown with their age and left out of every rollup.
"""

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from trnwatch.ledger.hosts import ChipState, HostState
from trnwatch.ledger.ledger import Ledger
from trnwatch.ledger.rollups import (
    HBM_HIGH_PCT,
    ChipEcc,
    Freshness,
    freshness_at,
    hbm_fill_pct,
    hbm_high,
    host_ecc,
    per_report,
    per_update,
)
from trnwatch.tui.units import level

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

NO_GROUP = ""  # the group of hosts not mapped to any UltraServer


# --- chips and hosts ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChipCell:
    """One chip as the grid and the host list show it (latest figures)."""

    host_id: str
    index: int
    util_pct: float | None
    hbm_bytes: int | None
    hbm_capacity_bytes: int | None
    ecc_events: int  # ECC events in the window (corrected + uncorrected, mem + sram)
    ecc_uncorrected: int
    ecc_undecided: bool  # a counter whose reading is undecided and whose readings disagree
    hw_errors: int = 0  # distinct NEURON_HW_ERR faults the kernel log placed on this chip

    @property
    def hbm_pct(self) -> float | None:
        return hbm_fill_pct(self.hbm_bytes, self.hbm_capacity_bytes)

    @property
    def marks(self) -> tuple[int | None, bool, bool]:
        """What a grid cell draws of the chip besides its utilisation bar, as a value (equal
        marks, equal cells): its HBM fill in eighths (None: no figure), uncorrected ECC or a
        kernel-log hardware error, and ECC events or an undecided counter."""
        fill = self.hbm_pct
        eighth = None if fill is None else level(fill, 100.0, 8)
        return eighth, self.ecc_uncorrected > 0 or self.hw_errors > 0, self.ecc_events > 0 or self.ecc_undecided


class HostRow(NamedTuple):
    """One host: its number in its group, identity, freshness and chips (made at every refresh)."""

    number: int  # position in its group by name: a short, stable label
    host_id: str
    name: str | None
    source_id: str
    state: Freshness
    age_s: float | None  # since its last report
    chips: tuple[ChipCell, ...]


def chip_cell(host: HostState, chip: ChipState, ecc: ChipEcc, hw_errors: int = 0) -> ChipCell:
    return ChipCell(
        host.host_id,
        chip.index,
        chip.util_pct,
        chip.hbm_bytes,
        chip.hbm_capacity_bytes,
        ecc.events,
        ecc.uncorrected,
        ecc.undecided,
        hw_errors,
    )


def host_cells(ledger: Ledger, host: HostState) -> tuple[ChipCell, ...]:
    """Each chip of `host` as a cell, in chip order: computed once per report of the host (its
    chips' figures and ECC change only when it folds one) or kernel-log hardware error, not at
    every refresh."""

    def cells(h: HostState) -> tuple[ChipCell, ...]:
        faults = ledger.hardware_faults_by_chip(h) if ledger.kernel.errors else {}
        return tuple(
            chip_cell(h, c, e, faults.get(c.index, 0)) for c, e in zip(h.chips, host_ecc(ledger, h), strict=True)
        )

    return per_report(ledger, host, "chip-cells", cells, ledger.kernel.lines_folded)


@lru_cache(maxsize=8192)  # one per host name: the rows are ordered at every refresh
def _natural(text: str) -> tuple:
    """Sort key that puts "host-9" before "host-10"."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text))


def host_rows(ledger: Ledger, hosts: list[HostState], now_s: float) -> list[HostRow]:
    """Rows for `hosts`, numbered in natural order of their names (instance name, else stream
    label), so numbers follow the names people use; sorting the grid never renumbers."""
    ordered = sorted(hosts, key=lambda h: (_natural(h.instance_name or h.source_id), h.host_id))
    freshness = freshness_at(ledger, now_s)
    return [
        HostRow(
            number=i,
            host_id=h.host_id,
            name=h.instance_name,
            source_id=h.source_id,
            state=freshness[h.host_id],
            age_s=None if h.last_s is None else max(0.0, now_s - h.last_s),
            chips=host_cells(ledger, h),
        )
        for i, h in enumerate(ordered)
    ]


def _sort_key(sort: str):
    def util(row: HostRow) -> float:
        values = [c.util_pct for c in row.chips if c.util_pct is not None]
        return min(values) if values else 101.0  # no figure sorts after every figure

    def hbm(row: HostRow) -> float:
        values = [c.hbm_pct for c in row.chips if c.hbm_pct is not None]
        return -max(values) if values else 1.0

    def ecc(row: HostRow) -> int:
        return -sum(c.ecc_events for c in row.chips)

    key = {"host": lambda r: 0, "util": util, "hbm": hbm, "ecc": ecc}[sort]
    return lambda row: (key(row), row.number)


def _keep(row: HostRow, filter_: str) -> bool:
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


def sort_and_filter(rows: list[HostRow], sort: str, filter_: str) -> list[HostRow]:
    return sorted((r for r in rows if _keep(r, filter_)), key=_sort_key(sort))


# --- groups -------------------------------------------------------------------------------------


def _hosts_by_group(ledger: Ledger) -> dict[str, list[HostState]]:
    """Hosts by group, groups in order (UltraServer ids, then NO_GROUP); kept until the ledger changes."""

    def compute() -> dict[str, list[HostState]]:
        by_group: dict[str, list[HostState]] = {}
        for host in ledger.hosts.values():
            by_group.setdefault(ledger.ultraserver_of(host) or NO_GROUP, []).append(host)
        return {g: by_group[g] for g in sorted(by_group, key=lambda g: (g == NO_GROUP, g))}

    return per_update(ledger, "hosts-by-group", compute)


def groups(ledger: Ledger) -> list[str]:
    """UltraServer ids in order, then NO_GROUP if some hosts are mapped to none."""
    return list(_hosts_by_group(ledger))


def group_hosts(ledger: Ledger, group: str) -> list[HostState]:
    return list(_hosts_by_group(ledger).get(group, ()))


# --- jump ---------------------------------------------------------------------------------------


def resolve_target(ledger: Ledger, group: str | None, text: str) -> tuple[str, int | None] | None:
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
        rows = host_rows(ledger, group_hosts(ledger, group if group is not None else NO_GROUP), 0.0)
        host_id = next((r.host_id for r in rows if r.number == int(name)), None)
    else:
        host = ledger.host_named(name)
        host_id = host.host_id if host else None
    if host_id is None or (chip is not None and not 0 <= chip < len(ledger.hosts[host_id].chips)):
        return None
    return host_id, chip
