"""Ending a torchrun job started with `start_new_session=True`, shared by tests and benchmarks."""

import os
import signal
import subprocess


def stop_torchrun(process: subprocess.Popen) -> None:
    """End torchrun and its workers if still running: SIGTERM to its process group, so torchrun
    stops its workers (they run in sessions of their own: a SIGKILL of torchrun would orphan
    them); SIGKILL only if it does not end within 30 s."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
