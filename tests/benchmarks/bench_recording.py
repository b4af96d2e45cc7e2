"""Benchmark: what a recording costs on disk and in CPU, and how fast a window of a long one replays.

    python tests/benchmarks/bench_recording.py [--demo-s 60] [--rounds 5] [--day-s 86400]

1. Bytes per hour of the demo (36 hosts x 4 chips and the simulated job): `trnwatch demo
   --headless --record` writes /2; the same entries are written again in the /1 format (as its
   recorder wrote them, tests/recordings.py) and the two sizes are compared side by side.
2. CPU share of recording at 36 hosts: the demo's recorded lines and source events are applied
   to a fresh ledger with the recorder off and on (a /2 recorder writing to a file, a frame per
   second of data), interleaved in rounds; recording-on minus recording-off, best rounds, as a
   share of one core at the data's own rate. The recorder's own time is measured too.
3. Replay of the last minute of a synthetic 24-hour recording: one demo host's real reports,
   one a second for `--day-s` seconds (86,400 frames). Timed: opening it and reading the
   window's items (frames and bytes read counted), and `trnwatch replay R --from -60 --headless`
   end to end in a child process (Python start, ingest of the minute, receipt).

Every figure comes from this run on this machine (a shared 2-core machine: noisy; ratios of
figures taken side by side are what mean something).
"""

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trnwatch.collectors.lines import Line, SourceEvent
from trnwatch.collectors.recording import Recorder
from trnwatch.collectors.recording_reader import Recording, TimeArg
from trnwatch.ledger.ledger import Ledger

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # for tests.* helpers when run as a script
from tests.recordings import write_v1

TRNWATCH = [sys.executable, "-m", "trnwatch"]


def demo_recording(folder: Path, seconds: float) -> Path:
    path = folder / "demo.trnrec"
    subprocess.run(
        TRNWATCH
        + [
            "demo",
            "--headless",
            "--duration",
            str(seconds),
            "--record",
            str(path),
            "--receipt",
            str(folder / "demo.json"),
        ],
        check=True,
        capture_output=True,
        timeout=seconds + 120,
    )
    return path


def bytes_per_hour(path: Path, folder: Path) -> dict:
    recording = Recording(path)
    items = list(recording.items())
    first, last = recording.span()
    v1 = folder / "demo-v1.trnrec"
    write_v1(v1, items)
    span_s = last - first
    v2_bytes = path.stat().st_size + (path.with_name(path.name + ".idx")).stat().st_size
    return {
        "span_s": span_s,
        "items": items,
        "v1_bytes": v1.stat().st_size,
        "v2_bytes": v2_bytes,
        "v1_kb_s": v1.stat().st_size / span_s / 1000,
        "v2_kb_s": v2_bytes / span_s / 1000,
    }


def cpu_share(items: list, span_s: float, folder: Path, rounds: int) -> dict:
    def apply_all(recorder):
        ledger = Ledger("simulated")
        next_flush = _time_of(items[0]) + 1.0
        for item in items:
            if recorder is not None:
                recorder.write(item)
                if _time_of(item) >= next_flush:  # the session's 1 s flush timer, at the data's rate
                    recorder.flush()
                    next_flush += 1.0
            if isinstance(item, Line):
                ledger.ingest(item)
            elif item.event == "open":
                ledger.source(item.source_id, item.kind)

    def recorder_only():
        recorder = Recorder.to_file(folder / "cpu-alone.trnrec", "simulated", {})
        next_flush = _time_of(items[0]) + 1.0
        for item in items:
            recorder.write(item)
            if _time_of(item) >= next_flush:
                recorder.flush()
                next_flush += 1.0
        recorder.close()

    off, on, alone = [], [], []
    for _ in range(rounds):
        start = time.process_time()
        apply_all(None)
        off.append(time.process_time() - start)
        recorder = Recorder.to_file(folder / "cpu.trnrec", "simulated", {})
        start = time.process_time()
        apply_all(recorder)
        recorder.close()
        on.append(time.process_time() - start)
        start = time.process_time()
        recorder_only()
        alone.append(time.process_time() - start)
    return {
        "off_s": min(off),
        "on_s": min(on),
        "alone_s": min(alone),
        "share_pct": (min(on) - min(off)) / span_s * 100,
        "alone_pct": min(alone) / span_s * 100,
    }


def _time_of(item) -> float:
    return item.t_s if isinstance(item, SourceEvent) else item.received_s


def day_recording(folder: Path, host_lines: list[Line], seconds: int) -> Path:
    """`seconds` of one host's reports, one a second, cycling the demo's real lines."""
    path = folder / "day.trnrec"
    recorder = Recorder.to_file(path, "simulated", {})
    t0 = 1_790_000_000.0
    source_id, kind = host_lines[0].source_id, host_lines[0].kind
    recorder.write(SourceEvent(source_id, kind, t0, "open"))
    for i in range(seconds):
        recorder.write(Line(source_id, kind, t0 + i + 0.25, host_lines[i % len(host_lines)].text))
    recorder.write(SourceEvent(source_id, kind, t0 + seconds, "end"))
    recorder.close()
    return path


def replay_last_minute(path: Path, folder: Path, rounds: int) -> dict:
    read_s = []
    for _ in range(rounds):
        start = time.perf_counter()
        recording = Recording(path)
        from_s, to_s = recording.window(TimeArg.parse("-60"), None)
        lines = sum(isinstance(i, Line) for i in recording.items(from_s, to_s))
        read_s.append(time.perf_counter() - start)
        stats = recording.stats
        recording.close()
    cli_s = []
    for n in range(rounds):  # a receipt name per round: an existing receipt path is refused
        start = time.perf_counter()
        receipt = folder / f"minute-{n}.json"
        subprocess.run(
            TRNWATCH + ["replay", str(path), "--from", "-60", "--headless", "--receipt", str(receipt)],
            check=True,
            capture_output=True,
            timeout=120,
        )
        cli_s.append(time.perf_counter() - start)
    startup_s = []
    for _ in range(rounds):
        start = time.perf_counter()
        subprocess.run(TRNWATCH + ["--version"], check=True, capture_output=True, timeout=60)
        startup_s.append(time.perf_counter() - start)
    return {
        "lines": lines,
        "frames_read": stats.frames_read,
        "bytes_read": stats.bytes_read,
        "index_bytes": stats.index_bytes_read,
        "size": path.stat().st_size,
        "read_s": min(read_s),
        "cli_s": min(cli_s),
        "startup_s": min(startup_s),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--demo-s", type=float, default=60.0, help="demo length recorded (default 60)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds; the best counts (default 5)")
    parser.add_argument("--day-s", type=int, default=86_400, help="length of the synthetic recording (default 24 h)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-recording-") as tmp:
        folder = Path(tmp)
        demo = demo_recording(folder, args.demo_s)
        size = bytes_per_hour(demo, folder)
        print(f"demo, {size['span_s']:.1f} s of data, 36 hosts + job:")
        print(f"  /1: {size['v1_bytes']:,} bytes = {size['v1_kb_s']:.0f} KB/s = {size['v1_kb_s'] * 3.6:.0f} MB/h")
        print(
            f"  /2: {size['v2_bytes']:,} bytes (with index) = {size['v2_kb_s']:.1f} KB/s = "
            f"{size['v2_kb_s'] * 3.6:.0f} MB/h; {size['v1_bytes'] / size['v2_bytes']:.1f}x smaller than /1"
        )
        cpu = cpu_share(size["items"], size["span_s"], folder, args.rounds)
        print(f"recording CPU at 36 hosts ({len(size['items']):,} items, best of {args.rounds} interleaved rounds):")
        print(
            f"  ingest off {cpu['off_s']:.3f} s, on {cpu['on_s']:.3f} s of CPU for {size['span_s']:.1f} s of data: "
            f"recording = {cpu['share_pct']:.2f}% of a core (recorder alone: {cpu['alone_pct']:.2f}%)"
        )
        host = [i for i in size["items"] if isinstance(i, Line) and i.kind == "neuron-monitor"]
        host = [i for i in host if i.source_id == host[0].source_id]
        start = time.perf_counter()
        day = day_recording(folder, host, args.day_s)
        made_s = time.perf_counter() - start
        rep = replay_last_minute(day, folder, args.rounds)
        print(
            f"synthetic {args.day_s / 3600:.0f} h recording of one host ({rep['size']:,} bytes, written in {made_s:.0f} s):"
        )
        print(
            f"  last minute: {rep['lines']} lines, {rep['frames_read']} frames and {rep['bytes_read']:,} bytes read "
            f"({rep['bytes_read'] / rep['size'] * 100:.3f}% of the file) + index {rep['index_bytes']:,} bytes"
        )
        print(
            f"  open + read the window: {rep['read_s'] * 1000:.0f} ms; `trnwatch replay --from -60 --headless` "
            f"end to end: {rep['cli_s']:.2f} s (`trnwatch --version` alone: {rep['startup_s']:.2f} s)"
        )


if __name__ == "__main__":
    main()
