"""A dead rank's pid given to another process, for real: run as the first process of a new pid
namespace (`unshare --pid --fork --mount-proc python -m tests.pid_reuse RUN_DIR MODE`).

A rank (a real process writing its `run_start` with the in-job emitter) is folded by a ledger and
seen by a StackCapturer; it is killed, and its pid is given to another process (the namespace's
`ns_last_pid` set to the pid before it, as CRIU does), one whose command line holds a token. Then
the rank's stack is asked for, as the job view's key does. MODE `emitter`: the run_start as the
emitter wrote it (with its start time); `first-seen`: the run_start without it, the capturer
having seen the rank's pid while the rank ran; `during`: the rank is alive when asked, and a
py-spy stand-in kills it, gives its pid to the other process and prints that one's stack (the pid
changed hands during the capture). Prints JSON: both pids and the stack line.
"""

import asyncio
import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from trnwatch.collectors.lines import Line
from trnwatch.collectors.stacks import StackOptions
from trnwatch.ledger.ledger import Ledger
from trnwatch.stacks import StackCapturer, rank_request

TOKEN = "--api-token=sk-not-the-ranks-0123456789"
RANK = """
import sys, time
from trnwatch.workloads.emitter import JobEmitter
em = JobEmitter(sys.argv[1], rank=0)
em.run_start(world_size=1, local_rank=0, backend="cpu", core=None, chip=None, model_name="tiny", params=1,
             precision="fp32", global_batch=1, micro_batch=1, seq_len=8, tp=1, pp=1, dp=1, versions={},
             restart=0, lnc=None)
em.close()
print("ready", flush=True)
time.sleep(600)
"""
OTHER = """
import sys, time
def someone_elses_loop():
    print("ready", flush=True)
    while True:
        time.sleep(1.0)
someone_elses_loop()
"""
PY_SPY = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
# Run as `py-spy dump --pid PID`: ends the rank, waits for it to be gone (reaped by the parent),
# starts the other process under its pid (its pid written to OTHER_PID), prints that one's "stack".
SWAPPING_PY_SPY = """
import os, signal, subprocess, sys, time
pid = int(sys.argv[sys.argv.index("--pid") + 1])
os.kill(pid, signal.SIGKILL)
deadline = time.monotonic() + 60
while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
    time.sleep(0.01)
open("/proc/sys/kernel/ns_last_pid", "w").write(str(pid - 1))
other = subprocess.Popen([sys.executable, "-c", OTHER, TOKEN], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
other.stdout.readline()
open(OTHER_PID, "w").write(str(other.pid))
print(f"Process {other.pid}: python {TOKEN}")
print('Thread 1 (idle): "MainThread"')
print("    someone_elses_loop (<string>:6)")
"""


def started(argv: list[str]) -> subprocess.Popen:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


async def ask(ledger: Ledger, capturer: StackCapturer, delivered: list[Line]) -> None:
    request = rank_request(ledger, 0, "key")
    assert request is not None
    capturer.request([request])
    while not delivered:
        await asyncio.sleep(0.05)


def main() -> None:
    run_dir, mode = Path(sys.argv[1]), sys.argv[2]
    rank = started([sys.executable, "-c", RANK, str(run_dir)])
    event = json.loads((run_dir / "rank-00000.jsonl").read_text().splitlines()[0])
    if mode == "first-seen":
        del event["start_ticks"]
    ledger = Ledger("live")
    ledger.ingest(Line("job:rank-00000", "job", time.time(), json.dumps(event)))
    delivered: list[Line] = []
    py_spy, other_pid_file = PY_SPY, run_dir / "other.pid"
    if mode == "during":
        py_spy = str(run_dir / "py-spy")
        head = f"#!{sys.executable}\nOTHER = {OTHER!r}\nTOKEN = {TOKEN!r}\nOTHER_PID = {str(other_pid_file)!r}\n"
        Path(py_spy).write_text(head + SWAPPING_PY_SPY)
        Path(py_spy).chmod(0o755)
        threading.Thread(target=rank.wait, daemon=True).start()  # reaps the rank when the stand-in ends it
    capturer = StackCapturer(ledger, StackOptions(py_spy=py_spy, timeout_s=60.0), delivered.append)
    if mode == "first-seen":
        capturer.learn_identities()
    if mode != "during":
        rank.kill()
        rank.wait()
        Path("/proc/sys/kernel/ns_last_pid").write_text(str(rank.pid - 1))
        other = started([sys.executable, "-c", OTHER, TOKEN])
        other_pid_file.write_text(str(other.pid))
    other_pid = int(other_pid_file.read_text()) if mode != "during" else None
    if other_pid is None or other_pid == rank.pid:
        asyncio.run(asyncio.wait_for(ask(ledger, capturer, delivered), 120))
    other_pid = int(other_pid_file.read_text())
    print(json.dumps({"rank_pid": rank.pid, "other_pid": other_pid, "line": delivered[0].text if delivered else None}))


if __name__ == "__main__":
    main()
