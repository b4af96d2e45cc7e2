"""Recordings made for tests and benchmarks: synthetic /2 recordings of any length, and /1
recordings in the first format exactly as its recorder wrote them (docs/contracts.md, "Recording")."""

import functools
import json
from pathlib import Path

from trnwatch.collectors.lines import ClockMark, Line, SourceEvent
from trnwatch.collectors.recording import Recorder, RecordingError
from trnwatch.collectors.recording_reader import Recording
from tests import reports as R

T0 = 1_790_000_000.0  # a fixed start: figures of a synthetic recording do not depend on today


@functools.cache
def small_report_line(util_pct: float = 40.0) -> str:
    """A one-chip neuron-monitor report (hand-written, tests/reports.py)."""
    return R.line(
        R.report(
            [R.runtime(1000, "train", [0, 1], util={0: util_pct, 1: util_pct})],
            hardware=R.hardware_trn3(chips=1),
            system_data=R.system(chips=1),
            instance_info=R.instance(instance_id="i-0synthetic0000001"),
        )
    )


def synthetic_items(seconds: int, start_s: float = T0, source_id: str = "host-a"):
    """A source opening, one report a second for `seconds`, and its end."""
    yield SourceEvent(source_id, "neuron-monitor", start_s, "open")
    for i in range(seconds):
        yield Line(source_id, "neuron-monitor", start_s + i + 0.5, small_report_line(30.0 + i % 40))
    yield SourceEvent(source_id, "neuron-monitor", start_s + seconds, "end")


def write_synthetic(path: Path, seconds: int, **recorder_kw) -> Recorder:
    """A /2 recording of `synthetic_items(seconds)`, a frame per second of data."""
    recorder = Recorder.to_file(path, "simulated", {}, **recorder_kw)
    for item in synthetic_items(seconds):
        recorder.write(item)
    recorder.close()
    return recorder


def write_v1(path: Path, items, evidence: str = "simulated") -> None:
    """A `trnwatch.recording/1` file holding `items`, as the /1 recorder wrote it: a header line,
    then one JSON entry per line or source event (json.dumps, ensure_ascii=False)."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(
            json.dumps(
                {
                    "recording": "trnwatch.recording/1",
                    "tool": "trnwatch 0.1.0",
                    "started": T0,
                    "evidence": evidence,
                    "ultraservers": {},
                }
            )
            + "\n"
        )
        for item in items:
            if isinstance(item, ClockMark):
                continue  # /1 had no clock marks
            if isinstance(item, SourceEvent):
                entry = {
                    "t": item.t_s,
                    "src": item.source_id,
                    "kind": item.kind,
                    "event": item.event,
                    "error": item.error,
                }
            elif item.oversize_bytes:
                entry = {
                    "t": item.received_s,
                    "src": item.source_id,
                    "kind": item.kind,
                    "oversize": item.oversize_bytes,
                }
            else:
                entry = {"t": item.received_s, "src": item.source_id, "kind": item.kind, "line": item.text}
            f.write(json.dumps(entry, ensure_ascii=False) + "\n")


def read_all(path: Path, **window) -> tuple[list, Recording]:
    recording = Recording(path)
    items = list(recording.items(**window))
    recording.close()
    return items, recording


def recorded_lines(path: Path) -> list[Line]:
    """The lines in a recording's whole frames so far (none while it or its header is not written yet)."""
    try:
        return [item for item in read_all(path)[0] if isinstance(item, Line)]
    except RecordingError:
        return []


def plain_bytes(path: Path) -> bytes:
    """A file's bytes as a person would read them: a /2 recording decompressed (as `zstd -dc`
    does: metas are skippable frames), anything else as it is."""
    import zstandard

    with open(path, "rb") as f:
        if f.read(4) != b"\x5e\x2a\x4d\x18":
            return path.read_bytes()
        f.seek(0)
        return zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True).read()


SCENARIO_T0 = 1_800_000_000.0
SCENARIO_JOB_SOURCE = "job-dir:/sim-run"


def write_scenario_recording(path: Path, scenario: str, ticks: int, start_s: float = SCENARIO_T0) -> float:
    """The demo scenario's lines (36 hosts of trn3-gen2-us and their 576 ranks) for `ticks`
    ticks at the demo's pace (tick t's job events at start + t + 0.5, its reports at start + t + 1
    + host/100), written by trnwatch's recorder; returns the ground truth for the hang: the time
    of the last step event."""
    from trnwatch.workloads.sim.fleet import fleet_hosts
    from trnwatch.workloads.sim.job import rank_events
    from trnwatch.workloads.sim.source import host_source_id
    from trnwatch.workloads.sim.topology import get_topology

    hosts = fleet_hosts(get_topology("trn3-gen2-us"), 0, scenario, 1.0)
    recorder = Recorder.to_file(path, "simulated", {})
    last_step_s = 0.0
    for host in hosts:
        recorder.write(SourceEvent(host_source_id(host), "neuron-monitor", start_s, "open"))
    recorder.write(SourceEvent(SCENARIO_JOB_SOURCE, "job", start_s, "open"))
    for tick in range(ticks):
        ts = start_s + tick + 0.5
        for host in hosts:
            for chip in range(host.topology.chips_per_host):
                for core in range(host.topology.cores_per_chip):
                    for event in rank_events(host, chip, core, tick, ts):
                        if event["event"] == "step":
                            last_step_s = max(last_step_s, event["ts"])
                        recorder.write(Line(SCENARIO_JOB_SOURCE, "job", ts, json.dumps(event)))
        for host in hosts:
            if host.alive(tick):
                received = start_s + tick + 1 + host.host_index / 100
                recorder.write(Line(host_source_id(host), "neuron-monitor", received, host.report_line(tick)))
        recorder.flush()
    recorder.close()
    assert recorder.error is None, recorder.error
    return last_step_s
