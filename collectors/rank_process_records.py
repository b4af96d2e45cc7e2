"""A sample of the job's rank processes on one host (`trnwatch.rank-processes/1`), as a line and
as the record the ledger folds: which process runs each rank, its state, CPU time and memory, and
how it was tied to the watched job. No I/O here: the sampler is collectors/rank_processes.py.

The line is one JSON object: `v`, `t` (unix s, when the pass began: CPU shares are computed on
these times, never on arrival), `host` (this machine's name) and `processes[]`, one per rank
process found, each with `via` saying how it was tied to the job: `stdout` (its stdout or stderr
is the watched `--job-log`), `launcher` (its launcher's is: torchrun `--tee` redirects the ranks'
output to files of its own and copies them to its stdout) or `job-dir` (it holds a file open in the
watched `--job-dir`: the in-job emitter's rank file).
"""

from typing import Annotated, Final, Literal

import msgspec

from trnwatch.collectors.lines import LineKind

KIND: LineKind = "rank-processes"
SOURCE_ID: Final = "trnwatch:rank-processes"
SCHEMA: Final = "trnwatch.rank-processes/1"
MAX_PROCESSES: Final = 4096  # rank processes of one host kept in a sample (a Trn3 host runs 32 at LNC=1)

_MAX_FLOAT: Final = 1.7976931348623157e308
Count = Annotated[int, msgspec.Meta(ge=0)]
Seconds = Annotated[float, msgspec.Meta(ge=0, le=_MAX_FLOAT)]
UnixSeconds = Annotated[float, msgspec.Meta(ge=0, le=_MAX_FLOAT)]

# The kernel's states as trnwatch names them: `stopped` is SIGSTOP (T) or a tracer's stop (t, a
# debugger), `disk-wait` uninterruptible sleep (D), `zombie` exited and not reaped by its parent (Z).
ProcessState = Literal["running", "sleeping", "stopped", "disk-wait", "zombie", "other"]
Via = Literal["stdout", "launcher", "job-dir"]
HELD_STATES: Final = ("stopped", "disk-wait", "zombie")  # a rank in one of these makes no progress


class RankProcess(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """One rank's process as one pass saw it."""

    rank: Count  # RANK in its environment
    local_rank: Count | None  # LOCAL_RANK, if set
    pid: Count
    ppid: Count
    start_ticks: Count | None  # clock ticks after boot (/proc/PID/stat field 22): which process the pid is
    state: ProcessState
    cpu_s: Seconds  # user + system CPU time so far
    rss_bytes: Count
    via: Via


class RankProcessSample(msgspec.Struct, frozen=True, gc=False, kw_only=True):
    """One pass over this host's processes."""

    v: Literal["trnwatch.rank-processes/1"]
    t: UnixSeconds
    host: str
    processes: Annotated[list[RankProcess], msgspec.Meta(max_length=MAX_PROCESSES)]


class RankProcessesRejected(ValueError):
    """A rank-processes line that cannot be used; the message says why."""


_DECODER: Final = msgspec.json.Decoder(RankProcessSample)
_ENCODER: Final = msgspec.json.Encoder()


def decode_rank_processes(text: str) -> RankProcessSample:
    """The sample a line holds; `RankProcessesRejected` saying why not."""
    try:
        return _DECODER.decode(text)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise RankProcessesRejected(f"not a {SCHEMA} line: {str(exc)[:200]}") from None


def encode_rank_processes(sample: RankProcessSample) -> str:
    """The line of a sample."""
    return _ENCODER.encode(sample).decode()
