"""The rules every judgement of the job reads: one object, built from the command line once and
handed to the job ledger, the goodput clock and (through the ledger) the findings, so one
`--late-after` is one threshold everywhere.

Pure data: the rules themselves are stated where they are applied (ledger/job.py for verdicts
and pauses, ledger/goodput.py for badput); the defaults are documented in the README.
"""

from dataclasses import dataclass
from typing import Literal

# The pauses that explain no progress for a while, each with a bound (`Rules.pause_limit_s`):
# a blocking checkpoint save, a graph compile, and the start-up of a process (its init phase).
PauseKind = Literal["checkpoint", "compile", "bootstrap"]
PAUSE_KINDS: tuple[PauseKind, ...] = ("checkpoint", "compile", "bootstrap")

# Once the run has shown earlier pauses of a kind, a pause lasting PAUSE_FACTOR x their p99 is
# beyond what this run does (but never less than PAUSE_FLOOR_S, nor more than the kind's limit).
PAUSE_FACTOR = 5.0
PAUSE_FLOOR_S = 60.0


@dataclass(frozen=True)
class Rules:
    """Thresholds of the job's verdicts (seconds unless named a factor or fraction)."""

    late_after_s: float = 5.0  # LATE: no progress for max(late_factor x p99 of recent steady steps, this)
    stall_after_s: float = 30.0  # STALLED: no progress for max(stall_factor x their median, this)
    dead_after_s: float = 10.0  # DEAD: a heartbeating rank silent this long
    late_factor: float = 3.0
    stall_factor: float = 5.0
    straggler_min_skew_fraction: float = 0.2  # SLOW: the least-waiting rank's skew, x median step time
    # Longest a pause may last before it is a stall, when the run has shown no earlier pause of
    # its kind (`--pause-limit KIND=S`); with earlier ones, PAUSE_FACTOR x their p99 if sooner.
    checkpoint_limit_s: float = 1800.0
    compile_limit_s: float = 7200.0
    bootstrap_limit_s: float = 1800.0

    def pause_limit_s(self, kind: PauseKind, earlier_p99_s: float | None) -> float:
        """How long a pause of `kind` may last, given the p99 of the run's earlier ones (None:
        none yet): the configured limit, or PAUSE_FACTOR x that p99 (at least PAUSE_FLOOR_S)
        when that is sooner."""
        limit = {"checkpoint": self.checkpoint_limit_s, "compile": self.compile_limit_s}.get(
            kind, self.bootstrap_limit_s
        )
        if earlier_p99_s is None:
            return limit
        return min(limit, max(PAUSE_FACTOR * earlier_p99_s, min(PAUSE_FLOOR_S, limit)))


DEFAULT_RULES = Rules()
