"""The ledger: every line any source delivered, folded into scoped state.

Data flows one way: sources yield `Line`s, `Ledger.ingest` parses and folds them, views and
receipts read the ledger. Nothing here touches a terminal, a socket or the wall clock: every
method that needs "now" takes it, so the same lines give the same state live and in replay.

Scopes are kept apart by construction: chips live inside hosts, hosts are placed in an
UltraServer only by configuration (`--ultraservers` file, or the `instance_info.ultraserver_id`
a report carries), and every rollup says how many chips and hosts it covers.
"""

from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from trnwatch.collectors.lines import Line
from trnwatch.collectors.neuron_monitor import ReportRejected, parse_report
from trnwatch.ledger.hosts import HostState

Evidence = Literal["live", "replayed", "simulated"]
SourceState = Literal["waiting", "connected", "stale", "ended", "lost"]

# A source or host is stale when nothing arrived for this many report periods (and at least
# STALE_MIN_S): one late report is jitter, three missed ones are a problem.
STALE_PERIODS = 3
STALE_MIN_S = 5.0


def stale_after_s(period_s: float | None) -> float:
    """How long without a report before figures from a stream count as stale."""
    return max(STALE_PERIODS * (period_s or 1.0), STALE_MIN_S)


@dataclass(slots=True)
class SourceStats:
    """What one stream delivered: reports folded, lines rejected (by reason), gaps, its end."""

    source_id: str
    kind: str
    reports: int = 0
    rejected: Counter = field(default_factory=Counter)
    last_rejection: str = ""
    first_s: float | None = None
    last_s: float | None = None
    gaps: int = 0
    gap_s: float = 0.0
    ended_s: float | None = None
    end_error: str | None = None
    simulated: bool = False

    def state(self, now_s: float, period_s: float | None) -> SourceState:
        if self.ended_s is not None:
            return "lost" if self.end_error else "ended"
        if self.last_s is None:
            return "waiting"
        return "stale" if now_s - self.last_s > stale_after_s(period_s) else "connected"


@dataclass(frozen=True, slots=True)
class UltraServerRollup:
    """Latest figures of one UltraServer, over the fresh hosts only, with its boundary."""

    ultraserver: str
    hosts_total: int
    hosts_fresh: int
    chips: int
    hbm_used_bytes: int
    hbm_capacity_bytes: int | None
    util_mean_pct: float | None
    util_min_pct: float | None
    chips_idle: int
    chips_with_ecc: int


class Ledger:
    """All scoped state of one session. Feed it `Line`s; read hosts, chips and rollups."""

    def __init__(self, mode: Evidence, ultraservers: dict[str, str] | None = None):
        self.mode: Evidence = mode
        self.ultraserver_overrides: dict[str, str] = dict(ultraservers or {})
        self.sources: dict[str, SourceStats] = {}
        self.hosts: dict[str, HostState] = {}
        self.first_s: float | None = None
        self.last_s: float | None = None

    # --- ingest -------------------------------------------------------------------------------

    def source(self, source_id: str, kind: str) -> SourceStats:
        """The stats of a source, registered on first use (so a silent source still shows)."""
        stats = self.sources.get(source_id)
        if stats is None:
            stats = self.sources[source_id] = SourceStats(source_id, kind)
        return stats

    def ingest(self, line: Line) -> None:
        """Parse one raw line and fold it; a bad line is counted against its source, never raised."""
        stats = self.source(line.source_id, line.kind)
        t = line.received_s
        if self.first_s is None:
            self.first_s = t
        self.last_s = t
        if line.oversize_bytes:
            self.reject(line.source_id, line.kind, "oversize", f"line of {line.oversize_bytes} bytes discarded")
            return
        if not line.text.strip():
            return
        try:
            report = parse_report(line.text)
        except ReportRejected as exc:
            stats.rejected[exc.reason] += 1
            stats.last_rejection = exc.detail[:200]
            return
        host_id = self._host_id(report, line.source_id)
        host = self.hosts.get(host_id)
        if host is None:
            host = self.hosts[host_id] = HostState(host_id, line.source_id)
        if stats.last_s is not None and t - stats.last_s > stale_after_s(host.period_s):
            stats.gaps += 1
            stats.gap_s += t - stats.last_s
        if stats.first_s is None:
            stats.first_s = t
        stats.last_s = t
        stats.reports += 1
        host.fold(report, t)
        stats.simulated = stats.simulated or host.simulated

    def reject(self, source_id: str, kind: str, reason: str, detail: str) -> None:
        """Count a line a source could not even deliver as text (e.g. over the size limit)."""
        stats = self.source(source_id, kind)
        stats.rejected[reason] += 1
        stats.last_rejection = detail[:200]

    def end_source(self, source_id: str, t_s: float, error: str | None = None) -> None:
        """Mark a source finished: cleanly (EOF) or lost (with the error it died of)."""
        stats = self.sources.get(source_id)
        if stats is not None and stats.ended_s is None:
            stats.ended_s = t_s
            stats.end_error = error

    @staticmethod
    def _host_id(report, source_id: str) -> str:
        info = report.instance_info
        if info is not None and info.instance_id:
            return info.instance_id
        return source_id

    # --- scopes -------------------------------------------------------------------------------

    def ultraserver_of(self, host: HostState) -> str | None:
        """UltraServer of a host: configuration first (by host id or stream label), then the
        id the host's own reports carry; never guessed from names or indices."""
        return (
            self.ultraserver_overrides.get(host.host_id)
            or self.ultraserver_overrides.get(host.source_id)
            or host.ultraserver_reported
        )

    def ultraservers(self) -> dict[str, list[HostState]]:
        """Hosts grouped by UltraServer id (hosts without one are left out)."""
        groups: dict[str, list[HostState]] = {}
        for host in self.hosts.values():
            us = self.ultraserver_of(host)
            if us is not None:
                groups.setdefault(us, []).append(host)
        return groups

    def host_fresh(self, host: HostState, now_s: float) -> bool:
        return host.last_s is not None and now_s - host.last_s <= stale_after_s(host.period_s)

    def rollup_ultraserver(self, ultraserver: str, hosts: list[HostState], now_s: float) -> UltraServerRollup:
        """Latest figures of one UltraServer, counting only hosts whose data is fresh."""
        fresh = [h for h in hosts if self.host_fresh(h, now_s)]
        chips = [c for h in fresh for c in h.chips]
        utils = [c.util_pct for c in chips if c.util_pct is not None]
        capacities = [c.hbm_capacity_bytes for c in chips]
        return UltraServerRollup(
            ultraserver=ultraserver,
            hosts_total=len(hosts),
            hosts_fresh=len(fresh),
            chips=len(chips),
            hbm_used_bytes=sum(c.hbm_bytes or 0 for c in chips),
            hbm_capacity_bytes=None if None in capacities else sum(capacities),
            util_mean_pct=sum(utils) / len(utils) if utils else None,
            util_min_pct=min(utils) if utils else None,
            chips_idle=sum(1 for u in utils if u == 0.0),
            chips_with_ecc=sum(1 for c in chips if any(v for v in c.ecc.totals().values())),
        )

    @property
    def simulated(self) -> bool:
        """True once any source delivered a report marked by trnwatch's simulator."""
        return any(s.simulated for s in self.sources.values())

    @property
    def evidence(self) -> Evidence:
        """What the figures are: a live session fed by the simulator (say through a pipe) is
        simulated, whatever the command line claimed; a replay is a replay."""
        if self.mode == "live" and self.simulated:
            return "simulated"
        return self.mode
