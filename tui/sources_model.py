"""The status line's model: how many sources are in each state, and the ones it may name.

Built at every refresh over every source (612 in the demo: 36 hosts and 576 rank files), so
each source's state is counted once, and only the sources the line may name (not connected, or
with rejected lines) are kept with their details.
"""

from collections import Counter
from dataclasses import dataclass
from typing import NamedTuple

from trnwatch.ledger import ReadModel


class SourceLine(NamedTuple):
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

    states: Counter[str]  # state -> how many sources are in it
    rejected: int  # lines rejected, over every source
    notable: tuple[SourceLine, ...]  # by source id: each source not connected or with rejected lines

    @property
    def total(self) -> int:
        return sum(self.states.values())

    def count(self, state: str) -> int:
        return self.states[state]

    def first_in(self, state: str) -> SourceLine | None:
        """The first source (by id) in `state` (other than "connected"), if any."""
        return next((s for s in self.notable if s.state == state), None)


def sources_model(read: ReadModel) -> SourcesModel:
    now_s = read.now_s
    sources = list(read.ledger.sources.values())
    states = read.source_states
    each_state = [states[s.source_id] for s in sources]
    rejected = 0
    notable = []
    for s, state in zip(sources, each_state, strict=True):
        lines = sum(s.rejected.values()) if s.rejected else 0
        rejected += lines
        if state != "connected" or lines:
            age_s = None if s.last_s is None else max(0.0, now_s - s.last_s)
            error = s.end_error or s.link_error
            notable.append(SourceLine(s.source_id, s.kind, state, age_s, s.reports, lines, s.last_rejection, error))
    return SourcesModel(Counter(each_state), rejected, tuple(sorted(notable)))
