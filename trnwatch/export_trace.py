"""A recording as a Chrome trace-event timeline (JSON Object Format), which Perfetto
(ui.perfetto.dev) and chrome://tracing open.

- One process per host (`pid`, named by its hostname and host id), in the order hosts first
  appear; a process "trnwatch" (pid 0) holds what has no host.
- Two threads per rank, side by side: "rank N" holds where the rank is, from its heartbeats:
  a slice per region (compile, compute, checkpoint, dataloader, collective:all_reduce, ...) from
  its `region_since` until the rank reports another region or the recording ends; "rank N
  steps" holds a slice per step (its end and `step_time_s`) with each collective of the step
  (its end and `latency_s`) inside it. Two threads, because a region and a step overlap without
  nesting, and slices of one thread must nest.
- Counters per chip on its host's process: "chip C HBM" (`hbm_used_bytes`) and "chip C
  utilisation" (`util_pct`), a sample per report that gave the figure (none where it did not).
- An instant event per incident at its opening, on its host's process (the whole trace when it
  names no host), with its label, severity, site and evidence.

Times are unix microseconds. Memory: each rank's open region, and the host and rank ids seen.
"""

import json
from collections.abc import Iterable
from typing import Any

from trnwatch.export_scopes import COLUMNS, Row, Scope

TRACE_SCOPES: tuple[Scope, ...] = ("chip", "rank", "incidents")
NO_HOST_PID = 0


def _us(t: float) -> int:
    return round(t * 1_000_000)


class _Trace:
    def __init__(self, sink):
        self.sink = sink
        self.first = True
        self.pids: dict[str, int] = {}
        self.host_names: dict[str, str] = {}  # host id -> hostname, from chip rows
        self.named: set[str] = set()  # hosts whose process is named with their host id
        self.named_pids: set[int] = set()
        self.ranks: set[int] = set()
        self.regions: dict[int, tuple[str, float, int]] = {}  # rank -> (region, since, pid)
        self.last_s: float | None = None
        self.events = 0
        self.col = {scope: {c.name: i for i, c in enumerate(COLUMNS[scope])} for scope in TRACE_SCOPES}
        self._write('{"displayTimeUnit":"ms","traceEvents":[\n')
        self._event({"ph": "M", "name": "process_name", "pid": NO_HOST_PID, "tid": 0, "args": {"name": "trnwatch"}})

    def _write(self, text: str) -> None:
        self.sink(text.encode())

    def _event(self, event: dict[str, Any]) -> None:
        self._write(("" if self.first else ",\n") + json.dumps(event, separators=(",", ":")))
        self.first = False
        self.events += 1

    def _pid(self, host: str | None, host_id: str | None = None) -> int:
        key = host or (self.host_names.get(host_id) if host_id else None) or host_id
        if key is None:
            return NO_HOST_PID
        pid = self.pids.get(key)
        if pid is None:
            pid = self.pids[key] = len(self.pids) + 1
            self._event({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
        if key not in self.named and (host_id is not None or pid not in self.named_pids):
            # named by its hostname first (a rank's), then again with its host id once a report gives it
            name = key if host_id is None or host_id == key else f"{key} ({host_id})"
            self._event({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}})
            self.named_pids.add(pid)
            if host_id is not None:
                self.named.add(key)
        return pid

    def _see(self, t: float) -> None:
        self.last_s = t if self.last_s is None else max(self.last_s, t)

    def chip(self, row: Row) -> None:
        c = self.col["chip"]
        host_id, name = row[c["host"]], row[c["instance_name"]]
        if name is not None:
            self.host_names.setdefault(host_id, name)
        pid = self._pid(name, host_id)
        t, chip = row[c["time"]], row[c["chip"]]
        self._see(t)
        for label, column in (("HBM", "hbm_used_bytes"), ("utilisation", "util_pct")):
            value = row[c[column]]
            if value is not None:
                self._event(
                    {"ph": "C", "name": f"chip {chip} {label}", "pid": pid, "ts": _us(t), "args": {column: value}}
                )

    def _thread(self, rank: int, pid: int) -> None:
        if rank in self.ranks:
            return
        self.ranks.add(rank)
        for tid, name in ((rank * 2, f"rank {rank}"), (rank * 2 + 1, f"rank {rank} steps")):
            self._event({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
            self._event({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}})

    def rank(self, row: Row) -> None:
        c = self.col["rank"]
        t, rank, event = row[c["time"]], row[c["rank"]], row[c["event"]]
        self._see(t)
        pid = self._pid(row[c["host"]])
        self._thread(rank, pid)
        if event == "heartbeat":
            region, since = row[c["region"]], row[c["region_since"]]
            open_region = self.regions.get(rank)
            if open_region is not None and open_region[:2] == (region, since):
                return
            if open_region is not None:
                self._region(rank, open_region, min(max(since, open_region[1]), t))
            self.regions[rank] = (region, since, pid)
        elif event == "step" and row[c["step_time_s"]] is not None:
            step_s = row[c["step_time_s"]]
            self._slice(
                f"step {row[c['step']]}", "step", pid, rank * 2 + 1, t - step_s, step_s, {"step": row[c["step"]]}
            )
        elif event == "collective":
            latency_s = row[c["latency_s"]]
            args = {"step": row[c["step"]], "wait_s": row[c["wait_s"]], "bytes": row[c["bytes"]]}
            self._slice(row[c["region"]], "collective", pid, rank * 2 + 1, t - latency_s, latency_s, args)
        elif event == "error":
            self._event(
                {
                    "ph": "i",
                    "s": "t",
                    "name": "error",
                    "pid": pid,
                    "tid": rank * 2,
                    "ts": _us(t),
                    "args": {"message": row[c["message"]]},
                }
            )

    def _slice(self, name: str, cat: str, pid: int, tid: int, start_s: float, dur_s: float, args: dict) -> None:
        self._event(
            {
                "ph": "X",
                "name": name,
                "cat": cat,
                "pid": pid,
                "tid": tid,
                "ts": _us(start_s),
                "dur": max(0, _us(start_s + dur_s) - _us(start_s)),
                "args": args,
            }
        )

    def _region(self, rank: int, region: tuple[str, float, int], end_s: float) -> None:
        name, since, pid = region
        self._slice(name, "region", pid, rank * 2, since, max(0.0, end_s - since), {"since": since})

    def incident(self, row: Row) -> None:
        c = self.col["incidents"]
        host, instance = row[c["host"]], row[c["instance_id"]]
        pid = self._pid(host, instance) if host or instance else NO_HOST_PID
        site = {k: row[c[k]] for k in ("rank", "host", "instance_id", "ultraserver", "chip", "core", "region", "step")}
        self._event(
            {
                "ph": "i",
                "s": "p" if pid != NO_HOST_PID else "g",
                "name": f"{row[c['label']]}: {row[c['title']]}",
                "cat": "incident",
                "pid": pid,
                "tid": 0,
                "ts": _us(row[c["time"]]),
                "args": {
                    "severity": row[c["severity"]],
                    "state": row[c["state"]],
                    "closed": row[c["closed"]],
                    "site": {k: v for k, v in site.items() if v is not None},
                    "evidence": row[c["evidence"]],
                },
            }
        )

    def close(self) -> None:
        end_s = self.last_s if self.last_s is not None else 0.0
        for rank, region in self.regions.items():
            self._region(rank, region, max(end_s, region[1]))
        self.regions.clear()
        self._write("\n]}\n")


def write_trace(rows: Iterable[tuple[Scope, Row]], sink) -> int:
    """The trace of (scope, row) pairs of TRACE_SCOPES; returns the number of trace events."""
    trace = _Trace(sink)
    for scope, row in rows:
        if scope == "chip":
            trace.chip(row)
        elif scope == "rank":
            trace.rank(row)
        else:
            trace.incident(row)
    trace.close()
    return trace.events
