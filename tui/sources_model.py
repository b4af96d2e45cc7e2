"""The status line's model: every source's state, plain data (no Textual, no terminal)."""

from dataclasses import dataclass

from trnwatch.ledger.ledger import Ledger
from trnwatch.ledger.rollups import source_periods_s


@dataclass(frozen=True)
class SourceLine:
    source_id: str
    kind: str
    state: str  # SourceStats.state
    age_s: float | None
    reports: int
    rejected: int
    last_rejection: str
    error: str | None  # why it ended or why its link is down


@dataclass(frozen=True)
class SourcesModel:
    """Every source's state, so the status line can say how many are connected, stale, lost."""

    sources: tuple[SourceLine, ...]

    def count(self, state: str) -> int:
        return sum(1 for s in self.sources if s.state == state)

    @property
    def rejected(self) -> int:
        return sum(s.rejected for s in self.sources)


def sources_model(ledger: Ledger, now_s: float) -> SourcesModel:
    period_by_source = source_periods_s(ledger)
    lines = []
    for s in sorted(ledger.sources.values(), key=lambda s: s.source_id):
        lines.append(
            SourceLine(
                s.source_id,
                s.kind,
                s.state(now_s, period_by_source.get(s.source_id)),
                None if s.last_s is None else max(0.0, now_s - s.last_s),
                s.reports,
                sum(s.rejected.values()),
                s.last_rejection,
                s.end_error or s.link_error,
            )
        )
    return SourcesModel(tuple(lines))
