"""sysfs as a source of `sysfs` lines: this host's, or each remote host's over the SSH fan-out.

What is read and where it is documented: collectors/sysfs_reader.py (the sampler, standard library
only; a leaf that is no regular file, a FIFO or a device, is never opened for a blocking read).
Here, this host's tree is sampled each period in a thread of its own: sysfs files answer at once,
but a wedged driver attribute or a stalled network mount can hold a read for ever, so a sample
that has not returned within SAMPLE_BOUND_S loses the source (its error names the file being
read) and its thread is left behind as a daemon, which neither the session's end nor the
interpreter's waits for. A remote host's runs the same sampler there,
sent as the program of `python3 -c` (`remote_reader_command`): one ssh connection and one python3
process per host for the session, writing one line per period. The remote host needs python3
(3.8 or later; Amazon Linux and the Neuron DLAMI have it) and read access to its /sys.
"""

import asyncio
import shlex
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

from trnwatch.collectors import sysfs_reader
from trnwatch.collectors.lines import Line, LineKind
from trnwatch.collectors.streams import SourceLost
from trnwatch.collectors.sysfs_reader import sample_sysfs

KIND: LineKind = "sysfs"
T = TypeVar("T")


# A sample reads a few hundred small files that answer at once (20,000 devices: well under a second).
SAMPLE_BOUND_S = 10.0


async def sysfs_lines(root: Path, period_s: float, source_id: str) -> AsyncIterator[Line]:
    """One sample of `root` each period, from now on; `SourceLost` when one has not returned
    within SAMPLE_BOUND_S (no other is started: a source is read by one thread at a time)."""
    start = time.monotonic()
    tick = 0
    while True:
        text = await bounded_call(sample_sysfs, root, bound_s=SAMPLE_BOUND_S)
        yield Line(source_id, KIND, time.time(), text)
        tick += 1
        await asyncio.sleep(max(0.0, start + tick * period_s - time.monotonic()))


async def bounded_call(read: Callable[..., T], *args: Any, bound_s: float) -> T:
    """`read(*args, reading)` in a daemon thread of its own; its result, its exception, or
    `SourceLost` once `bound_s` passed without either, naming the last path `read` appended to
    `reading` (the file it is stuck in). A cancelled wait leaves the thread too: it is never joined."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()
    reading: list[Path] = []

    def settle(value: Any, error: BaseException | None) -> None:
        if done.done():  # the wait gave up or was cancelled
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(value)

    def work() -> None:
        try:
            value, error = read(*args, reading), None
        except Exception as exc:
            value, error = None, exc
        try:
            loop.call_soon_threadsafe(settle, value, error)
        except RuntimeError:  # the loop is closed: the session ended while this read was stuck
            pass

    threading.Thread(target=work, name=f"bounded {getattr(read, '__name__', 'read')}", daemon=True).start()
    try:
        # Not `asyncio.wait_for`: in Python 3.11 it swallows a cancellation that arrives with the
        # result (it returns the result), so a sampler cancelled at the session's end sampled on
        # for ever and the session never ended (a 2 s `--duration` still running at 120 s on a
        # loaded machine).
        async with asyncio.timeout(bound_s):
            return await done
    except TimeoutError:
        where = reading[-1] if reading else (args[0] if args else "?")
        raise SourceLost(
            f"a read of {where} has not returned in {bound_s:g} s (a wedged driver attribute or a stalled "
            "mount?): not read again this session"
        ) from None


def remote_reader_command(root: str, period_s: float) -> str:
    """The remote command that samples `root` on its host each period: the sampler's own source
    as the program of `python3 -c` (nothing to install there)."""
    program = Path(sysfs_reader.__file__).read_text(encoding="utf-8")
    return shlex.join(["python3", "-c", program, root, f"{period_s:g}"])
