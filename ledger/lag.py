"""The monitor's own lag: up to when each source's data is known to be read, and the session's pauses.

Silence is judged only on what was read. Two marks say how far that is, both folded in the
intake's order, so a mark folded means every line read before it is folded too:

- A file follower (a `--job-dir`) ends every poll with a `ReadMark`: no bytes waiting says every
  rank file was read to its end as it was when the poll began (the follower is caught up to that
  moment); bytes waiting say it is behind, and by how much. Its first mark, before its first
  poll, says every byte on disk is waiting: until a poll catches up, the job is judged as of the
  follower's start (a first read of 18,432 files' history can take minutes on a starved machine).
- The session's clock tick (`ClockMark`, every second) says the sources that push lines (pipes,
  sockets, scrapes) were read up to it, unless the event loop was not scheduled for a while
  before it (`paused_s`: a SIGSTOP, a paused VM, a starved machine; what waited in pipes is read
  after the tick) or the intake's queue was full (`held`: sources were held back). Then the tick
  does not move the read-through time: the next ordinary tick does.

The job is judged at the earliest of its followers' caught-up times (and the ticks' read-through,
when some job source is not a follower), hosts at the ticks' read-through, each never past "now".
A source whose read-through is more than BEHIND_AFTER_S behind "now" is trnwatch's own finding
(kind `monitor`): its ranks and hosts are judged as of what was read, so trnwatch being behind
never makes a rank dead or a host lost.

Without any mark (a ledger fed directly, a recording made before marks existed) "now" is judged
as is.
"""

from dataclasses import dataclass, field

from trnwatch.collectors.lines import ClockMark, ReadMark

# How far behind "now" a source's read-through may be before trnwatch says it is behind: above
# a tick's period (1 s) plus a poll's (0.25 s) and a busy moment's slack.
BEHIND_AFTER_S = 3.0
INTAKE = "intake"  # the name the session's own read-through goes by (the sources that push lines)


@dataclass(slots=True)
class FollowerLag:
    """One file follower's latest mark: when it was last caught up, and what waited after."""

    source_id: str
    first_s: float  # its first mark's poll
    caught_up_s: float | None = None  # the latest poll that found nothing waiting
    waiting_bytes: int = 0  # at its latest mark
    waiting_files: int = 0

    def read_through_s(self) -> float:
        """Up to when this follower's files are known read (its first poll, before it ever caught up)."""
        return self.first_s if self.caught_up_s is None else self.caught_up_s


@dataclass(slots=True)
class MonitorLag:
    """What the ledger knows of its own lag: the followers' marks, the ticks' read-through, pauses."""

    followers: dict[str, FollowerLag] = field(default_factory=dict)
    through_s: float | None = None  # the latest tick that says the pushing sources were read up to it
    pauses: int = 0  # ticks after which the event loop had not been scheduled
    paused_s: float = 0.0  # their length, added up
    longest_pause_s: float = 0.0
    held_ticks: int = 0  # ticks made while the intake's queue was full
    # The longest each source was behind, as seen at a tick (INTAKE for the ticks' own).
    worst_behind_s: dict[str, float] = field(default_factory=dict)

    def fold_mark(self, mark: ReadMark) -> None:
        """A follower's poll: caught up to its start when nothing was waiting."""
        follower = self.followers.get(mark.source_id)
        if follower is None:
            follower = self.followers[mark.source_id] = FollowerLag(mark.source_id, mark.t_s)
        follower.waiting_bytes, follower.waiting_files = mark.waiting_bytes, mark.waiting_files
        if mark.waiting_bytes == 0 and (follower.caught_up_s is None or mark.t_s > follower.caught_up_s):
            follower.caught_up_s = mark.t_s

    def fold_tick(self, mark: ClockMark) -> None:
        """The session's tick: the read-through moves to it unless the loop paused or the intake was full."""
        if mark.paused_s > 0:
            self.pauses += 1
            self.paused_s += mark.paused_s
            self.longest_pause_s = max(self.longest_pause_s, mark.paused_s)
        if mark.held:
            self.held_ticks += 1
        if mark.end or not (mark.paused_s > 0 or mark.held):
            self.through_s = mark.t_s if self.through_s is None else max(self.through_s, mark.t_s)
        elif self.through_s is None:
            self.through_s = mark.t_s - mark.paused_s
        for source, behind_s in self.behind_s(mark.t_s).items():
            if behind_s > self.worst_behind_s.get(source, 0.0):
                self.worst_behind_s[source] = behind_s

    def behind_s(self, now_s: float) -> dict[str, float]:
        """Seconds each source's read-through is behind `now_s` (INTAKE: the ticks'); only the
        sources that have marks."""
        behind = {} if self.through_s is None else {INTAKE: max(0.0, now_s - self.through_s)}
        for source_id, follower in self.followers.items():
            behind[source_id] = max(0.0, now_s - follower.read_through_s())
        return behind

    def host_judged_s(self, now_s: float) -> float:
        """The moment hosts are judged at: `now_s`, never past the ticks' read-through."""
        return now_s if self.through_s is None else min(now_s, self.through_s)

    def job_judged_s(self, now_s: float, unfollowed_job_sources: bool) -> float:
        """The moment the job is judged at: `now_s`, never past a follower's read-through, nor
        past the ticks' when some job source is not a follower (a passive log, stdin)."""
        judged = now_s
        for follower in self.followers.values():
            judged = min(judged, follower.read_through_s())
        if (unfollowed_job_sources or not self.followers) and self.through_s is not None:
            judged = min(judged, self.through_s)
        return judged


def behind_words(source_id: str, behind_s: float) -> str:
    """'trnwatch is 12 s behind on job-dir:/runs/7' (INTAKE: 'on its sources')."""
    return f"trnwatch is {behind_s:.0f} s behind on {'its sources' if source_id == INTAKE else source_id}"
