"""What a source kind builds for the session to run: one source's id, line kind and stream.

Apart from trnwatch/session.py so that the source-kind registry (trnwatch/sources.py), which
every session command's parser reads, imports no session, ledger or event loop to declare it.
"""

from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass

from trnwatch.collectors.lines import Carried, ClockMark, Line, LineKind, ReadMark, SourceEvent


@dataclass(frozen=True)
class SourceSpec:
    """A source to run: its id, its parser kind, and a factory for its line stream.

    A relay (a replay) carries other sources' recorded lines and open/end events: it is not
    itself registered in the ledger, so a replayed receipt lists exactly the recorded sources.
    A replay's relay also carries the recorded clock marks (`recorded_clock`); a live relay (a
    job-dir follower) does not, and the session marks the wall clock's progress beside it.
    """

    source_id: str
    kind: LineKind
    lines: Callable[[], AsyncIterator[Line | SourceEvent | ClockMark | ReadMark | Carried]]
    relay: bool = False
    # A replay: it carries the recorded session's clock marks, so the session makes none of its
    # own (a follower of files relays its rank files' sources, not a clock).
    recorded_clock: bool = False
    # A follower of files: what it still has to read when the session ends, read by the session
    # itself after its sources stopped, bounded (collectors/job_files.py, RunDirFollower.drain).
    drain: Callable[[], Iterator[Line | SourceEvent | ReadMark]] | None = None
    # A sampler serving the other sources (the rank processes of the job they read): not a source
    # of its own (its lines are of a session kind, collectors/decode.py SESSION_KINDS), never
    # waited for: once every other source has ended, the session ends and it is stopped.
    companion: bool = False
