"""What sysfs said about a host (collectors/sysfs.py samples): device health and power, EFA rates.

Folded per host, no I/O, no clock. EFA counters are cumulative: a rate is the difference between
two samples over the time between them (receive times), summed over the host's EFA ports; a
counter that went down (a driver reload, a port reset) starts again from its new value and gives
no rate for that interval. A counter the host does not expose has no rate (unavailable), never 0.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field

from trnwatch.collectors.sysfs_sample import EFA_COUNTERS, DeviceHealth, SysfsSample, UltraServerNodes

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
    devices: dict[int, DeviceHealth] = field(default_factory=dict)
    efa_ports: int = 0
    efa_rates_per_s: dict[str, float] = field(default_factory=dict)  # counter -> rate; absent: unavailable
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

    @property
    def efa_error_rate_per_s(self) -> float | None:
        """Drops, retransmits, timeouts and unresponsive / impaired peer events per second (None:
        no error counter readable yet)."""
        known = [self.efa_rates_per_s[n] for n in EFA_ERROR_COUNTERS if n in self.efa_rates_per_s]
        return sum(known) if known else None

    def unhealthy_devices(self) -> list[tuple[int, str]]:
        """(device, unhealthy components) of devices whose `unhealthy_components` is not empty."""
        return [(d, h.unhealthy_components) for d, h in sorted(self.devices.items()) if h.unhealthy_components]


@dataclass(frozen=True, slots=True)
class EfaRollup:
    """EFA rates of a group of hosts (an UltraServer, the cluster), summed over the hosts whose
    rates are known: EFA carries only the traffic between UltraServers."""

    hosts: int  # hosts with EFA rates; the others are not in the sums
    tx_bytes_per_s: float | None  # None: no host exposes the counter
    rx_bytes_per_s: float | None
    errors_per_s: float | None


def efa_rollup(hosts: Iterable[HostSysfs]) -> EfaRollup | None:
    """The sums over `hosts`, or None when none of them has EFA rates yet."""
    known = [h for h in hosts if h.efa_rates_per_s]
    if not known:
        return None

    def total(name: str) -> float | None:
        rates = [h.efa_rates_per_s[name] for h in known if name in h.efa_rates_per_s]
        return sum(rates) if rates else None

    errors = [e for h in known if (e := h.efa_error_rate_per_s) is not None]
    return EfaRollup(len(known), total("tx_bytes"), total("rx_bytes"), sum(errors) if errors else None)
