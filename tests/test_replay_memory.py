"""A replay holds a frame or two in memory, not every frame the reader got ahead by (issue 36
item 9): frames that each hold one line of tens of MB (each within the frame cap) replay at the
same peak memory whether the recording has 2 of them or 12. Real `trnwatch replay` children,
their peak RSS read by a parent that runs nothing else."""

import subprocess
import sys
from pathlib import Path

from trnwatch.collectors.lines import Line, SourceEvent
from trnwatch.collectors.recording import Recorder

LINE_CHARS = 20 << 20
T0 = 1_790_000_000.0

# A parent whose only child is the replay: RUSAGE_CHILDREN's peak is that child's.
PEAK_OF_CHILD = """
import resource, subprocess, sys
subprocess.run(sys.argv[1:], capture_output=True, timeout=600)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
"""


def big_frames(path: Path, frames: int) -> Path:
    """`frames` frames, each one neuron-monitor line of LINE_CHARS (a JSON string of one
    character repeated: a few KB once compressed)."""
    recorder = Recorder.to_file(path, "live", {})
    recorder.write(SourceEvent("local", "neuron-monitor", T0, "open"))
    for k in range(frames):
        text = '{"neuron_runtime_data": "' + "x" * LINE_CHARS + '"}'
        recorder.write(Line("local", "neuron-monitor", T0 + k, text))
        recorder.flush()
    recorder.close()
    return path


def peak_rss(recording: Path, receipt: Path) -> int:
    replay = [sys.executable, "-m", "trnwatch", "replay", str(recording), "--headless", "--receipt", str(receipt)]
    done = subprocess.run(
        [sys.executable, "-c", PEAK_OF_CHILD, *replay], capture_output=True, text=True, timeout=660, check=True
    )
    assert receipt.exists()  # the lines are rejected (not a report), the exit says so: 1
    return int(done.stdout.split()[-1])


def test_replay_peak_memory_does_not_grow_with_the_count_of_large_frames(tmp_path):
    two = peak_rss(big_frames(tmp_path / "two.trnrec", 2), tmp_path / "two.json")
    twelve = peak_rss(big_frames(tmp_path / "twelve.trnrec", 12), tmp_path / "twelve.json")
    # Before the bound the queue held all twelve lines at once (ten more lines than two frames'
    # worth: 200 MB); a frame or two in memory makes the peaks about equal.
    assert twelve - two < 3 * LINE_CHARS, (two, twelve)
