"""Run trnwatch with every event-loop callback's CPU attributed to the screen or the data side.

    python tests/benchmarks/split_cpu.py COUNTERS.json ARGS...   (as `python -m trnwatch ARGS...`)

`bench_tui.py --split` runs the real app through this in a pseudo-terminal. Inside the process,
`asyncio.events.Handle._run` (every callback the loop runs: a task's step, a timer, a future's
callback) is wrapped: `time.thread_time()` before and after the callback, and its CPU goes to

- the screen: a task whose coroutines (the chain it awaits through) are Textual's or trnwatch's
  `tui` / `themes` only: Textual's message pumps, its timers (our refresh runs in one), the app;
- the data side: a task with any coroutine of the session, intake, sources, collectors, ledger
  or workloads in its chain (the simulator, the rank-file follower, the intake's fold, and the
  session task the app starts, which awaits `Session.run`);
- other: a callback that is neither (a future's wake-up, a threadsafe call).

Threads are read apart (`time.pthread_getcpuclockid`): Textual's `textual-output` (the writer)
and `textual-input` threads are the screen's; the main thread's CPU outside every callback is the
loop's own (`select`, scheduling); this wrapper's own work (its timing, classifying, this file's
dump thread) is counted as `bench` and left out of both sides. The app's repaints are counted
(`TrnwatchApp.render_now` calls: a loaded machine makes Textual skip late timer ticks, and fewer
refreshes cost less). Every 0.5 s the cumulative figures are written to COUNTERS.json
(atomically), with the monotonic time they were read at.

A diagnostic harness for the benchmark, not part of trnwatch.
"""

import asyncio
import json
import os
import sys
import threading
import time
import weakref

SCREEN_MODULES = ("textual", "trnwatch.tui", "trnwatch.themes")
DATA_MODULES = (
    "trnwatch.session",
    "trnwatch.intake",
    "trnwatch.sources",
    "trnwatch.scaleout",
    "trnwatch.collectors",
    "trnwatch.ledger",
    "trnwatch.workloads",
)
SCREEN_THREADS = ("textual-output", "textual-input")
DUMP_EVERY_S = 0.5

# Cumulative CPU seconds by side, and the callbacks counted (main thread only).
cpu_s = {"screen": 0.0, "data": 0.0, "other": 0.0, "bench": 0.0}
callbacks = {"screen": 0, "data": 0, "other": 0}
refreshes = [0]  # the app's repaints from the ledger (`TrnwatchApp.render_now` calls)
_data_tasks: "weakref.WeakSet[asyncio.Task]" = weakref.WeakSet()


def _module_side(module: str) -> str | None:
    if module.startswith(DATA_MODULES):
        return "data"
    if module.startswith(SCREEN_MODULES):
        return "screen"
    return None


def _coroutine_side(coro) -> str:
    """data if any coroutine of the chain `coro` awaits through is the data side's, else screen
    if any is the screen's, else other."""
    found = "other"
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            break
        side = _module_side(frame.f_globals.get("__name__", ""))
        if side == "data":
            return "data"
        if side == "screen":
            found = "screen"
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return found


def side_of(handle: asyncio.Handle) -> str:
    callback = handle._callback  # type: ignore[attr-defined]
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.Task):
        if owner in _data_tasks:
            return "data"
        side = _coroutine_side(owner.get_coro())
        if side == "data":  # a task once seen awaiting the data side's code stays the data side's
            _data_tasks.add(owner)
        return side
    return _module_side(getattr(callback, "__module__", None) or "") or "other"


_run = asyncio.events.Handle._run


def _timed_run(self: asyncio.Handle) -> None:
    enter = time.thread_time()
    side = side_of(self)
    start = time.thread_time()
    try:
        _run(self)
    finally:
        end = time.thread_time()
        cpu_s[side] += end - start
        callbacks[side] += 1
        cpu_s["bench"] += (start - enter) + (time.thread_time() - end)


def thread_cpu_s() -> dict[str, float]:
    """CPU seconds of every live thread of this process, by thread name."""
    out: dict[str, float] = {}
    for thread in threading.enumerate():
        if thread.ident is None:
            continue
        try:
            seconds = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        except (OSError, ProcessLookupError):  # the thread ended meanwhile
            continue
        out[thread.name] = out.get(thread.name, 0.0) + seconds
    return out


def dump(path: str) -> None:
    me = threading.current_thread().name
    while True:
        threads = thread_cpu_s()
        main = threads.pop(threading.main_thread().name, 0.0)
        app = sys.modules.get("trnwatch.tui.app")
        record = {
            "t_s": time.monotonic(),
            "app_file": getattr(app, "__file__", None),  # whose code runs (`--against`)
            "process_s": time.process_time(),
            "callbacks_s": dict(cpu_s),
            "callbacks": dict(callbacks),
            "refreshes": refreshes[0],
            "main_thread_s": main,
            "screen_threads_s": sum(v for k, v in threads.items() if k in SCREEN_THREADS),
            "dump_thread_s": threads.pop(me, 0.0),
            "other_threads_s": {k: v for k, v in threads.items() if k not in SCREEN_THREADS},
        }
        with open(path + ".tmp", "w") as f:
            json.dump(record, f)
        os.replace(path + ".tmp", path)
        time.sleep(DUMP_EVERY_S)


def main() -> None:
    path, argv = sys.argv[1], sys.argv[2:]
    asyncio.events.Handle._run = _timed_run  # type: ignore[method-assign]
    threading.Thread(target=dump, args=(path,), name="split-dump", daemon=True).start()
    from trnwatch.cli import main as trnwatch_main
    from trnwatch.tui.app import TrnwatchApp

    render_now = TrnwatchApp.render_now

    def counted_render_now(self, *args, **kwargs) -> None:
        refreshes[0] += 1
        render_now(self, *args, **kwargs)

    TrnwatchApp.render_now = counted_render_now  # type: ignore[method-assign]

    sys.argv = ["trnwatch", *argv]
    sys.exit(trnwatch_main())


if __name__ == "__main__":
    main()
