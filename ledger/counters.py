"""Counter semantics, decided from the data: the one place that says how a count is totalled.

neuron-monitor's guide calls `execution_stats` and `neuron_hw_counters` counts per period, and
the vendor's Prometheus exporter adds every report to a running counter. The real trn1 capture
(wandb, three 1-second reports) shows generic errors 23654 -> 23692 -> 23749 while `completed`
stays at 260: those counts are cumulative. Adding them up would report 71,095 errors where 95
happened. So each counter family of each runtime (or device) is read by how its own series
behaves:

- any counter of the family decreased          -> `per_period`: the window total is the sum;
- no decrease, some non-zero value repeated    -> `cumulative`: the window total is last - first;
- otherwise (one report, all zeros, strictly
  rising without repeats)                      -> `undecided`: both readings are kept; the
                                                  total is given only where they agree.

The decision is retrospective (made when asked, over everything seen), so a family that looked
cumulative for three reports and then decreased is re-read as per-period, with no history kept:
each counter keeps only first, last, sum, its rise and two flags.

One case needs no inference: a Prometheus exporter declares its series `counter` (running
totals), so counts that came through Prometheus are read as `counter`: cumulative, where a
decrease is a reset (the exporter restarted) and the total is the sum of the rises.
"""

from dataclasses import dataclass, field
from typing import Literal

from trnwatch.collectors.limits import MAX_COUNTERS_PER_FAMILY

Reading = Literal["per_period", "cumulative", "undecided", "counter"]


@dataclass(slots=True)
class _Series:
    first: int
    last: int
    total: int
    rise: int = 0  # sum of increases, counting from 0 after a decrease (a counter reset)
    repeated_nonzero: bool = False
    decreased: bool = False


@dataclass(slots=True)
class CounterFamily:
    """The counters of one family (e.g. a runtime's `execution_stats`) across reports."""

    series: dict[str, _Series] = field(default_factory=dict)
    reports: int = 0
    declared_counter: bool = False  # the source declared running totals (Prometheus counters)
    # Some counter read non-zero at some report. While False every total is 0 under any
    # reading, which a rollup over thousands of chips decides without reading the family.
    nonzero: bool = False

    def add(self, values: dict[str, int]) -> int:
        """Fold one report's counts (counter name -> value). Names come from input: past
        MAX_COUNTERS_PER_FAMILY a new name is refused; returns how many were."""
        self.reports += 1
        series = self.series
        refused = 0
        for name, value in values.items():
            s = series.get(name)
            if s is None:
                if len(series) >= MAX_COUNTERS_PER_FAMILY:
                    refused += 1
                else:
                    series[name] = _Series(first=value, last=value, total=value)
                continue
            last = s.last
            if value < last:
                s.decreased = True
                s.rise += value
            else:
                s.rise += value - last
                if value == last and value != 0:
                    s.repeated_nonzero = True
            s.last = value
            s.total += value
        if not self.nonzero:
            self.nonzero = any(values.values())
        return refused

    @property
    def reading(self) -> Reading:
        """How this family's counts are read; see the module docstring."""
        if self.declared_counter:
            return "counter"
        if any(s.decreased for s in self.series.values()):
            return "per_period"
        if any(s.repeated_nonzero for s in self.series.values()):
            return "cumulative"
        return "undecided"

    def totals(self) -> dict[str, int | None]:
        """Window total per counter under this family's reading (None where undecided and the
        two readings disagree)."""
        reading = self.reading
        out: dict[str, int | None] = {}
        for name, s in self.series.items():
            per_period, cumulative = s.total, s.last - s.first
            if reading == "per_period":
                out[name] = per_period
            elif reading == "counter":
                out[name] = s.rise
            elif reading == "cumulative":
                out[name] = cumulative
            else:
                out[name] = per_period if per_period == cumulative else None
        return out

    def both_readings(self) -> dict[str, dict[str, int]]:
        """Both candidate totals per counter, for receipts of undecided families."""
        return {n: {"per_period": s.total, "cumulative": s.last - s.first} for n, s in self.series.items()}
