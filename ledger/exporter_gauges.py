"""Utilisation gauges the vendor exporter leaves behind, told apart from fresh ones (issue 9.8).

neuron-monitor-prometheus.py sets `neuroncore_utilization_ratio` only for the cores a report
lists in `neuroncores_in_use` and never removes a core's gauge (it clears everything only when
no runtime runs at all). neuron-monitor omits idle cores from that list, so when a job hangs
every core drops out of the reports and the exporter goes on serving each core's last busy
figure: read as it is, a hung host scrapes as 90% busy while its own stream says 0%.

The exposition cannot say which cores the last report listed. What it does show is when the
exporter took a new report: the host's other series move (vCPU and memory gauges, counters,
latency). A utilisation gauge that is bit-identical to the previous answer while the host's
other values changed was not in that report, so it is stale: it is left out of the fold (its
core counts 0, as a core neuron-monitor does not list) and its chip says which cores were stale
(`ChipState.util_stale_cores` now, `util_stale_samples` over the window). A gauge at exactly 0
counts 0 either way and is not marked. When nothing else moved (a poll faster than the
exporter's report period; server mode between two Prometheus scrapes) there is nothing to judge
by, and gauges judged stale stay stale while they stay identical.

What this cannot tell (docs/scale-out.md): a core whose utilisation is exactly the same in two
consecutive reports (say pinned at 100.0) reads as stale; a core that drops out while the host's
other series stand still is caught only at the next move; and memory, latency and vCPU gauges of
a runtime are left behind the same way but are not judged (they legitimately repeat).
"""

from dataclasses import dataclass, field

from msgspec.structs import replace

from trnwatch.collectors.prometheus import ExporterReport

NONE_STALE: frozenset[tuple[str, int]] = frozenset()


@dataclass(slots=True)
class ExporterGauges:
    """One host's utilisation gauges as last served, and which of them are stale."""

    utilization: dict[tuple[str, int], float] = field(default_factory=dict)
    others_digest: int | None = None
    stale: frozenset[tuple[str, int]] = NONE_STALE

    def fresh_only(self, report: ExporterReport) -> ExporterReport:
        """`report` without its stale utilisation gauges; updates the judgement."""
        now, before = report.utilization, self.utilization
        moved = self.others_digest is not None and report.others_digest != self.others_digest
        candidates = now.keys() if moved else self.stale
        # The shared empty set when none is stale: no new tracked object per report.
        self.stale = (
            frozenset(key for key in candidates if now.get(key) and before.get(key) == now.get(key)) or NONE_STALE
        )
        self.utilization, self.others_digest = now, report.others_digest
        if not self.stale:
            return report
        entries = []
        for entry in report.neuron_runtime_data or ():
            runtime = entry.report
            counters = runtime.neuroncore_counters if runtime is not None else None
            stale_cores = {core for tag, core in self.stale if tag == entry.neuron_runtime_tag}
            if runtime is None or counters is None or counters.neuroncores_in_use is None or not stale_cores:
                entries.append(entry)
                continue
            kept = {core: c for core, c in counters.neuroncores_in_use.items() if core not in stale_cores}
            counters = replace(counters, neuroncores_in_use=kept)
            entries.append(replace(entry, report=replace(runtime, neuroncore_counters=counters)))
        return replace(report, neuron_runtime_data=entries)

    @property
    def stale_cores(self) -> set[int]:
        return {core for _, core in self.stale}
