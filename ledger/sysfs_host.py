"""What sysfs said about a host (collectors/sysfs.py samples): device health and power, EFA rates.

Folded per host, no I/O, no clock. EFA counters are cumulative: a rate is the difference between
two samples over the time between them (receive times), summed over the host's EFA ports; a
counter that went down (a driver reload, a port reset) starts again from its new value and gives
no rate for that interval. A counter the host does not expose has no rate (unavailable), never 0.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from trnwatch.collectors.sysfs_sample import EFA_COUNTERS, DeviceHealth, SysfsSample, UltraServerNodes
from trnwatch.ledger.rollups import stale_after_s

# What counts as trouble on the fabric: drops, retransmits, timeouts, unresponsive or impaired peers.
EFA_ERROR_COUNTERS = (
    "rx_drops",
    "retrans_pkts",
    "retrans_timeout_events",
    "unresponsive_remote_events",
    "impaired_remote_conn_events",
)


@dataclass(slots=True)
class HostSysfs:
    """One host's latest sysfs sample and its EFA rates (per second, summed over ports)."""

    key: str  # the host id it was joined to (instance id), else the sampler's source id
    source_id: str
    samples: int = 0
    last_s: float | None = None
    interval_s: float | None = None  # between its last two samples: its period
    devices: dict[int, DeviceHealth] = field(default_factory=dict)
    efa_ports: int = 0
    efa_rates_per_s: dict[str, float] = field(default_factory=dict)  # counter -> rate; absent: unavailable
    # Drops, retransmits, timeouts and unresponsive / impaired peer events per second, summed (None:
    # no error counter readable yet).
    efa_error_rate_per_s: float | None = None
    fresh_for_s: float = 0.0  # its rates are in rollups this long after its last sample (`stale_after_s`)
    ultraserver: UltraServerNodes | None = None  # the class nodes as last read (None: absent)
    _counters: dict[str, dict[str, int]] = field(default_factory=dict)

    def fold(self, sample: SysfsSample, t_s: float) -> None:
        previous, previous_s = self._counters, self.last_s
        self.samples += 1
        self.last_s = t_s
        self.devices = dict(sample.devices)
        self.ultraserver = sample.ultraserver
        self.efa_ports = len(sample.efa)
        self._counters = sample.efa
        if previous_s is None or t_s <= previous_s:
            return
        self.interval_s = t_s - previous_s
        self.fresh_for_s = stale_after_s(self.interval_s)
        rates: dict[str, float] = {}
        for name in EFA_COUNTERS:
            deltas = [
                counters[name] - previous[port][name]
                for port, counters in sample.efa.items()
                if name in counters and name in previous.get(port, {}) and counters[name] >= previous[port][name]
            ]
            if deltas:
                rates[name] = sum(deltas) / (t_s - previous_s)
        self.efa_rates_per_s = rates
        known = [rates[n] for n in EFA_ERROR_COUNTERS if n in rates]
        self.efa_error_rate_per_s = sum(known) if known else None

    def unhealthy_devices(self) -> list[tuple[int, str]]:
        """(device, unhealthy components) of devices whose `unhealthy_components` is not empty."""
        return [(d, h.unhealthy_components) for d, h in sorted(self.devices.items()) if h.unhealthy_components]


@dataclass(frozen=True, slots=True)
class EfaRollup:
    """EFA rates of a group of hosts (an UltraServer, the cluster) at one "now": EFA carries only
    the traffic between UltraServers. The sums are over the `hosts` of the `members` whose sysfs
    gave rates and is fresh; `hosts` 0 is "unavailable", never a zero rate."""

    members: int  # hosts in the group
    hosts: int  # of them, those in the sums
    tx_bytes_per_s: float | None  # None: no host in the sums exposes the counter
    rx_bytes_per_s: float | None
    errors_per_s: float | None
    # Each host's own figure, (lowest, highest) over the hosts in the sums (None: no host has it).
    host_tx_bytes_per_s: tuple[float, float] | None
    host_rx_bytes_per_s: tuple[float, float] | None
    host_errors_per_s: tuple[float, float] | None
    worst_host: str | None  # the host (its key) with the most errors/s, when any has errors
    worst_errors_per_s: float | None

    @property
    def partial(self) -> bool:
        """Some member hosts are left out of the sums: a figure says "n/m hosts"."""
        return self.hosts < self.members


def efa_rollup(members: Iterable[str], sysfs: Mapping[str, HostSysfs], now_s: float) -> EfaRollup:
    """The EFA rates of the hosts `members` (keys of `sysfs`, the ledger's), summed over those
    whose sysfs gave rates and sampled within their `fresh_for_s` before `now_s`. One pass: at
    1,152 hosts every refresh rolls each UltraServer up."""
    n = known = 0
    tx: list[float] = []
    rx: list[float] = []
    errors: list[tuple[float, str]] = []
    for key in members:
        n += 1
        h = sysfs.get(key)
        if h is None or not h.efa_rates_per_s or h.last_s is None or now_s - h.last_s > h.fresh_for_s:
            continue
        rates = h.efa_rates_per_s
        if "tx_bytes" in rates:
            tx.append(rates["tx_bytes"])
        if "rx_bytes" in rates:
            rx.append(rates["rx_bytes"])
        if h.efa_error_rate_per_s is not None:
            errors.append((h.efa_error_rate_per_s, key))
        known += 1
    return _rollup(n, known, tx, rx, errors)


def _rollup(members: int, hosts: int, tx: list[float], rx: list[float], errors: list[tuple[float, str]]) -> EfaRollup:
    def spread(values: list[float]) -> tuple[float, float] | None:
        return (min(values), max(values)) if values else None

    worst = max(errors, default=None)
    rates = [e for e, _ in errors]
    return EfaRollup(
        members=members,
        hosts=hosts,
        tx_bytes_per_s=sum(tx) if tx else None,
        rx_bytes_per_s=sum(rx) if rx else None,
        errors_per_s=sum(rates) if rates else None,
        host_tx_bytes_per_s=spread(tx),
        host_rx_bytes_per_s=spread(rx),
        host_errors_per_s=spread(rates),
        worst_host=worst[1] if worst and worst[0] > 0 else None,
        worst_errors_per_s=worst[0] if worst and worst[0] > 0 else None,
    )
