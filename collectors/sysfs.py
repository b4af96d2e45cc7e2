"""sysfs as a source of `sysfs` lines: this host's, or each remote host's over the SSH fan-out.

What is read and where it is documented: collectors/sysfs_reader.py (the sampler, standard library
only). Here, this host's tree is sampled each period in a worker thread (sysfs files answer at
once, but a stuck driver must not stop the screen); a remote host's runs the same sampler there,
sent as the program of `python3 -c` (`remote_reader_command`): one ssh connection and one python3
process per host for the session, writing one line per period. The remote host needs python3
(3.8 or later; Amazon Linux and the Neuron DLAMI have it) and read access to its /sys.
"""

import asyncio
import shlex
import time
from collections.abc import AsyncIterator
from pathlib import Path

from trnwatch.collectors import sysfs_reader
from trnwatch.collectors.lines import Line, LineKind
from trnwatch.collectors.sysfs_reader import sample_sysfs

KIND: LineKind = "sysfs"


async def sysfs_lines(root: Path, period_s: float, source_id: str) -> AsyncIterator[Line]:
    """One sample of `root` each period, from now on."""
    start = time.monotonic()
    tick = 0
    while True:
        text = await asyncio.to_thread(sample_sysfs, root)
        yield Line(source_id, KIND, time.time(), text)
        tick += 1
        await asyncio.sleep(max(0.0, start + tick * period_s - time.monotonic()))


def remote_reader_command(root: str, period_s: float) -> str:
    """The remote command that samples `root` on its host each period: the sampler's own source
    as the program of `python3 -c` (nothing to install there)."""
    program = Path(sysfs_reader.__file__).read_text(encoding="utf-8")
    return shlex.join(["python3", "-c", program, root, f"{period_s:g}"])
