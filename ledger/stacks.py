"""Stack captures kept by the ledger: the latest few, each with its outcome, whoever asked.

Pure: captures arrive as decoded "stack" lines (collectors/stacks.py), made by the session when
someone pressed the key or a stall was confirmed, recorded like any line, so a replay keeps the
same ones. At most CAPTURES_KEPT are kept (the oldest go first, counted in `dropped`); each one's
text is bounded by the collector (MAX_STDOUT_BYTES).
"""

from collections import Counter, deque

from trnwatch.collectors.stack_records import StackCapture

CAPTURES_KEPT = 64


class StackLedger:
    """The session's stack captures, oldest first."""

    def __init__(self, kept: int = CAPTURES_KEPT):
        self.captures: deque[StackCapture] = deque(maxlen=kept)
        self.dropped = 0  # older captures let go to keep the bound
        self.rejected: Counter[str] = Counter()  # "stack" lines that held no capture, by reason

    def add(self, capture: StackCapture) -> None:
        if len(self.captures) == self.captures.maxlen:
            self.dropped += 1
        self.captures.append(capture)

    def latest_by_rank(self) -> list[StackCapture]:
        """The newest capture of each rank, newest first."""
        seen: set[int] = set()
        out = []
        for capture in reversed(self.captures):
            if capture.rank not in seen:
                seen.add(capture.rank)
                out.append(capture)
        return out

    def of_incident(self, incident: str) -> list[StackCapture]:
        """The captures taken for one confirmed stall, suspects first, in the order they ended."""
        found = [c for c in self.captures if c.incident == incident]
        return sorted(found, key=lambda c: c.contrast)

    def __len__(self) -> int:
        return len(self.captures)
