"""The one currency every source deals in: a raw line of text with where and when it came from.

Sources (neuron-monitor child, stdin, SSH, job files, replay) differ only in how they get bytes;
each yields `Line`s from an async generator. Parsing happens downstream, so a recording of
`Line`s replays a session exactly.
"""

from dataclasses import dataclass
from typing import Literal

# Which format a line is in: a key of collectors/decode.py's `DECODERS`, the one list of line
# kinds (what each kind is, is said there). An open set, so a new line format is its parser and
# its entry there; a line of a kind with no decoder is rejected there as `unknown-kind`.
LineKind = str


@dataclass(frozen=True, slots=True)
class Line:
    """One raw line as received: `source_id` names the stream, `kind` says which parser reads it."""

    source_id: str
    kind: LineKind
    received_s: float  # unix seconds when the monitor received it
    text: str
    # Set instead of `text` when a line was longer than the source's limit: its bytes were
    # discarded up to the next newline, and the ledger counts it as rejected.
    oversize_bytes: int = 0


@dataclass(frozen=True, slots=True)
class SourceEvent:
    """A source opening (registered before its first line) or ending (EOF, or lost with an error).

    Remote sources that reconnect (SSH hosts, Prometheus endpoints) also report their link:
    "connecting" when an attempt starts, "down" (with the error) when the link is lost and will
    be retried; the source id stays the same across reconnections, so gaps land on it.
    Recorded beside lines so a replay reproduces which sources existed and how they ended.
    """

    source_id: str
    kind: LineKind
    t_s: float
    event: Literal["open", "end", "connecting", "down"]
    error: str | None = None
    # An "end" at the session's end with lines still on disk past the exit read: how much.
    unread_bytes: int = 0
    unread_lines: int = 0


@dataclass(frozen=True, slots=True)
class ClockMark:
    """The session's clock, as data: time passed while nothing arrived (`end` False, a tick the
    session makes every second), or the moment the session ended (`end` True). Recorded beside
    lines, so a replay judges silence and the session's end exactly as the live session did."""

    t_s: float
    end: bool = False
    # Seconds the session's event loop was not scheduled before this tick (a SIGSTOP, a paused VM,
    # a starved machine): what waited in pipes meanwhile is read after it, so a tick with a pause
    # does not say the sources were read up to `t_s` (ledger/lag.py). 0 for an ordinary tick.
    paused_s: float = 0.0
    # The intake's queue was full when the tick was made: sources were held back from reading, so
    # the tick says nothing of what they had not read yet.
    held: bool = False


@dataclass(frozen=True, slots=True)
class ReadMark:
    """How far a follower of files has read (collectors/job_files.py), after each of its polls:
    `waiting_bytes` 0 says every file was read to its end as it was when the poll started at
    `t_s` (the source is caught up to `t_s`); more says that many bytes were on disk past what was
    read, in `waiting_files` files. Queued and recorded beside lines, so when the ledger folds a
    mark it has folded every line read before it (ledger/lag.py)."""

    source_id: str
    t_s: float
    waiting_bytes: int = 0
    waiting_files: int = 0


@dataclass(frozen=True, slots=True)
class Carried:
    """A recorded job line from before a replay window, carried into it for the state it sets
    (where a rank runs, its last heartbeat and step, its open phases): folded as state, never as
    a figure of the window (collectors/recording_reader.py, JobCarrier)."""

    line: Line
