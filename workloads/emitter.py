"""In-job telemetry emitter for `trnwatch.job/1` (standard library only).

Any training script can use it with two lines:

    from trnwatch.workloads.emitter import JobEmitter
    em = JobEmitter("/fsx/runs/llama-8b")   # rank from $RANK; run id = directory name ("llama-8b")

then `em.run_start(...)`, `with em.region("dataloader"):`, `em.step(...)`, `em.run_end("success")`.
The file is self-contained: copying it next to a training script works as well.

Design, because the training loop must never wait on a disk:
- `emit()` serialises the event to one JSON line and puts it on a bounded queue; it never blocks.
  When the queue is full (the disk is stuck) the event is dropped and counted; the count rides on
  the next heartbeat as `dropped_events`.
- A writer thread drains the queue and appends whole lines with `os.write` on an O_APPEND file.
- A heartbeat thread reports every `heartbeat_interval_s` which step the main thread is working on
  (the last reported step + 1, or what `set_step` said) and which `region` it is in (the innermost
  open `with em.region(...)`, entered at `region_since`), so a hung main thread (heartbeats
  continue, region frozen) is told apart from a dead process (heartbeats stop). Regions are for
  the main thread only: one stack, no per-thread bookkeeping.
- Crash safety: each event is one complete line. A SIGKILL in the middle of a write can leave a
  fragment without a newline; readers never consume past the last newline, and the next emitter
  opening the file (a resumed run) ends the fragment with a newline first, so the fragment becomes
  one rejected line instead of corrupting the next event.
"""

import json
import os
import queue
import socket
import threading
import time
from contextlib import contextmanager

SCHEMA_VERSION = "trnwatch.job/1"
OUTSIDE_REGIONS = "untracked"  # heartbeat region when the main thread is in no named region
_STOP = object()


def rank_file_name(rank: int) -> str:
    """File name of a rank's event stream inside the run directory."""
    return f"rank-{rank:05d}.jsonl"


def _write_all(fd: int, data: bytes) -> None:
    """Write every byte; os.write may write fewer bytes than asked."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class JobEmitter:
    """Writes one rank's `trnwatch.job/1` events to `<run_dir>/rank-NNNNN.jsonl`."""

    def __init__(
        self,
        run_dir: str,
        run: str | None = None,
        rank: int | None = None,
        heartbeat_interval_s: float = 2.0,
        queue_events: int = 10_000,
    ):
        self.run = run or os.path.basename(os.path.abspath(run_dir))
        self.rank = int(os.environ.get("RANK", "0")) if rank is None else rank
        self.heartbeat_interval_s = heartbeat_interval_s
        self.path = os.path.join(run_dir, rank_file_name(self.rank))
        self.dropped_events = 0
        self._dropped_lock = threading.Lock()
        self._queue: queue.Queue = queue.Queue(maxsize=queue_events)
        self._step = 0
        # Region stack of the main thread; the heartbeat thread reads only its last element,
        # which is a single tuple so the read is atomic under the GIL.
        self._regions: list[tuple[str, float]] = [(OUTSIDE_REGIONS, time.time())]
        self._stopped = threading.Event()  # stops the heartbeat thread
        self._closed = False

        os.makedirs(run_dir, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._end_fragment_left_by_a_crash()
        self._writer = threading.Thread(target=self._write_loop, name="trnwatch-writer", daemon=True)
        self._heartbeat = threading.Thread(target=self._heartbeat_loop, name="trnwatch-heartbeat", daemon=True)
        self._writer.start()
        self._heartbeat.start()

    # ---- events ------------------------------------------------------------------------------

    def emit(self, event: str, **fields) -> None:
        """Queue one event; never blocks. Fields are written as given (JSON types only)."""
        record = {"v": SCHEMA_VERSION, "ts": time.time(), "run": self.run, "rank": self.rank, "event": event}
        record.update(fields)
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        try:
            self._queue.put_nowait(line)
        except queue.Full:
            self._count_dropped(1)

    def run_start(
        self,
        *,
        world_size: int,
        local_rank: int,
        backend: str,
        core: int | None,
        chip: int | None,
        model_name: str,
        params: int,
        precision: str,
        global_batch: int,
        micro_batch: int,
        seq_len: int,
        tp: int,
        pp: int,
        dp: int,
        versions: dict[str, str],
        restart: int,
        lnc: int | None,
    ) -> None:
        """Announce this rank: where it runs and what the job is."""
        self.emit(
            "run_start",
            world_size=world_size,
            host=socket.gethostname(),
            pid=os.getpid(),
            local_rank=local_rank,
            backend=backend,
            core=core,
            chip=chip,
            model={"name": model_name, "params": params},
            precision=precision,
            global_batch=global_batch,
            micro_batch=micro_batch,
            seq_len=seq_len,
            parallel={"tp": tp, "pp": pp, "dp": dp},
            versions=versions,
            restart=restart,
            lnc=lnc,
            start_ticks=_start_ticks(),
        )

    @contextmanager
    def phase(self, name: str):
        """Bracket a phase (init, compile, warmup, steady, checkpoint, probe, eval)."""
        self.emit("phase", phase=name, state="begin")
        try:
            yield
        finally:
            self.emit("phase", phase=name, state="end")

    def begin_phase(self, name: str) -> None:
        """Enter a phase that does not fit a `with` block (e.g. warmup ends inside the loop)."""
        self.emit("phase", phase=name, state="begin")

    def end_phase(self, name: str) -> None:
        """Leave a phase entered with `begin_phase`."""
        self.emit("phase", phase=name, state="end")

    def step(
        self,
        step: int,
        step_time_s: float | None,
        compute_s: float | None,
        tokens: int | None,
        loss: float | None,
    ) -> None:
        """Report a finished step; heartbeats then report `step + 1` as the step in progress."""
        self.emit("step", step=step, step_time_s=step_time_s, compute_s=compute_s, tokens=tokens, loss=loss)
        self._step = step + 1

    def set_step(self, step: int) -> None:
        """Set the step in progress that heartbeats report (e.g. after resuming)."""
        self._step = step

    def collective(self, op: str, bytes: int, latency_s: float, wait_s: float, step: int) -> None:
        """Report one timed collective; `latency_s` includes `wait_s` (waiting for peers)."""
        self.emit("collective", op=op, bytes=bytes, latency_s=latency_s, wait_s=wait_s, step=step)

    def checkpoint(
        self, action: str, state: str, step: int, tag: str | None = None, blocking: bool | None = None
    ) -> None:
        """Report a checkpoint save/load beginning or ending; `blocking=False` for a background
        save during which steps go on (None: a synchronous save, as before)."""
        extra = {} if blocking is None else {"blocking": blocking}
        self.emit("checkpoint", action=action, state=state, step=step, tag=tag, **extra)

    def error(self, message: str) -> None:
        """Report an error (the caller normally ends with run_end("failed"))."""
        self.emit("error", message=message)

    @contextmanager
    def region(self, name: str):
        """Mark what the main thread is doing now; heartbeats report the innermost region."""
        self._regions.append((name, time.time()))
        try:
            yield
        finally:
            self._regions.pop()

    def run_end(self, status: str) -> None:
        """Report the end of this rank's run and close the emitter (flushes queued events)."""
        self._stop_heartbeat()  # so that run_end is this rank's last line
        self.emit("run_end", status=status)
        self.close()

    # ---- threads -----------------------------------------------------------------------------

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the heartbeat, write what is queued and close the file. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._stop_heartbeat()
        try:
            self._queue.put(_STOP, timeout=timeout_s)
        except queue.Full:
            pass  # writer is stuck on the disk; the daemon thread dies with the process
        self._writer.join(timeout_s)
        if not self._writer.is_alive():
            os.close(self._fd)

    def _stop_heartbeat(self) -> None:
        self._stopped.set()
        self._heartbeat.join()

    def _heartbeat_loop(self) -> None:
        while not self._stopped.wait(self.heartbeat_interval_s):
            region, since = self._regions[-1]
            fields = {"step": self._step, "region": region, "region_since": since}
            if self.dropped_events:
                fields["dropped_events"] = self.dropped_events
            self.emit("heartbeat", **fields)

    def _count_dropped(self, events: int) -> None:
        with self._dropped_lock:
            self.dropped_events += events

    def _write_loop(self) -> None:
        stop = False
        while not stop:
            lines = []
            item = self._queue.get()
            while True:  # batch what is already queued into one write
                if item is _STOP:
                    stop = True
                    break
                lines.append(item)
                if len(lines) == 1024:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            try:
                _write_all(self._fd, b"".join(lines))
            except OSError:
                self._count_dropped(len(lines))  # disk full or gone: keep training, count the loss

    def _end_fragment_left_by_a_crash(self) -> None:
        size = os.fstat(self._fd).st_size
        if size == 0:
            return
        with open(self.path, "rb") as existing:
            existing.seek(size - 1)
            if existing.read(1) != b"\n":
                _write_all(self._fd, b"\n")


def _start_ticks() -> int | None:
    """This process's start in clock ticks after boot (/proc/self/stat field 22), with the pid
    what tells this process from a later one given the same pid; None without /proc."""
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        return int(stat[stat.rfind(b")") + 2 :].split()[19])
    except (OSError, IndexError, ValueError):
        return None
