"""When a lost remote source (SSH host, Prometheus endpoint) tries again.

Exponential, capped and jittered: the n-th consecutive failure waits a random time in
[ceiling / 2, ceiling], ceiling = min(max_s, first_s * 2 ** (n - 1)). The jitter keeps 36 hosts
that dropped together (a switch reboot) from reconnecting in lockstep. A connection that stayed
up for `stable_s` resets the count, so a host that flaps quickly backs off while one that failed
once after hours retries at once.
"""

import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Backoff:
    """Retry policy of one source kind."""

    first_s: float = 1.0
    max_s: float = 30.0
    stable_s: float = 60.0

    def delay_s(self, failures: int, rng: random.Random) -> float:
        """Seconds to wait after the `failures`-th consecutive failure (failures >= 1)."""
        ceiling = min(self.max_s, self.first_s * 2 ** min(failures - 1, 30))
        return rng.uniform(ceiling / 2, ceiling)

    def failures_after(self, failures: int, up_for_s: float) -> int:
        """The consecutive-failure count after a connection that lasted `up_for_s` went down."""
        return 1 if up_for_s >= self.stable_s else failures + 1
