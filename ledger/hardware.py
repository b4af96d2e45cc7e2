"""What the kernel logs said about the Neuron hardware: hardware errors kept, driver lines counted.

Folded from the kernel-log source's records (collectors/kernel_log.py); no I/O, no clock. A
hardware error read from a host's own kernel log over SSH (`kernel-log:<label>`) is that host's;
another is placed on its host by the instance id its line carries (the id neuron-monitor reports
name the host by), else by its hostname, else it stays with the kernel-log source that read it
(Ledger.host_of_hardware_error); its chip is the line's `nd-id`, its core the `nc-id`. A hardware error does not heal:
it stays a finding for the rest of the session (the guide's actions are to replace the instance
or reload the driver), as the Neuron problem detector's conditions are permanent.
"""

from collections import Counter
from dataclasses import dataclass, field

from trnwatch.collectors.kernel_log import DriverLine, HardwareError, remote_host_label

# Hardware errors kept per session; past it the oldest repeats are dropped (counted).
MAX_HARDWARE_ERRORS = 1024


@dataclass(frozen=True, slots=True)
class HardwareErrorSeen:
    """One hardware-error line as received: when, from which kernel-log source."""

    t_s: float
    source_id: str
    error: HardwareError

    @property
    def site_key(self) -> tuple:
        """What makes two lines the same fault: the machine (the host whose kernel log it was
        read from over SSH, else the one the line names), the device, the core, the type."""
        e = self.error
        machine = remote_host_label(self.source_id) or e.instance_id or e.hostname or self.source_id
        return (machine, e.device, e.core, e.error_type)


@dataclass(slots=True)
class KernelLogState:
    """Hardware errors (oldest first) and the count of other Neuron driver lines, per source."""

    errors: list[HardwareErrorSeen] = field(default_factory=list)
    errors_dropped: int = 0
    driver_lines: Counter = field(default_factory=Counter)  # source id -> other Neuron driver lines

    def fold(self, source_id: str, t_s: float, record: HardwareError | DriverLine) -> None:
        if isinstance(record, DriverLine):
            self.driver_lines[source_id] += 1
            return
        if len(self.errors) >= MAX_HARDWARE_ERRORS:
            self.errors.pop(0)
            self.errors_dropped += 1
        self.errors.append(HardwareErrorSeen(t_s, source_id, record))

    @property
    def lines_folded(self) -> int:
        """Hardware-error lines folded so far: what a figure derived from them depends on."""
        return len(self.errors) + self.errors_dropped

    def faults(self) -> list[tuple[HardwareErrorSeen, HardwareErrorSeen, int]]:
        """Each distinct fault (`site_key`) once: (first line, latest line, lines), by first time."""
        by_site: dict[tuple, list] = {}
        for seen in self.errors:
            kept = by_site.get(seen.site_key)
            if kept is None:
                by_site[seen.site_key] = [seen, seen, 1]
            else:
                kept[1], kept[2] = seen, kept[2] + 1
        return [(first, last, n) for first, last, n in by_site.values()]
