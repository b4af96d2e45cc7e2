"""Benchmark: issue 32's job of 18,432 ranks watched live from this machine.

    python tests/benchmarks/bench_job_scale.py [--ranks 18432] [--against REV]

A writer process (tests/job_scale_writer.py) writes the job dir as the emitter writes it: one
step a second (a collective and a step event per rank per step), a heartbeat every 5 s per
rank; at 50 s rank 9,217 stops in `dataloader` and every other rank waits in
`collective:all_reduce`. The watcher is `trnwatch watch --headless --job-dir DIR --duration 95`,
started after the writer's first step. From its receipt and its process: the verdict and
culprit (the first suspect), LATE and STALLED as seconds after the last step's `ts` (the job
incident's changes), job incidents opened before the hang (false ones), what trnwatch says of
its own lag (receipt `monitor`), the watcher's CPU (its rusage over its wall time, in cores) and
how long after its 95 s it ended. With --against REV, commit REV's watcher runs the same job
after this tree's (one at a time: the writer alone takes a good part of a core), both staged
alike (tests/benchmarks/revisions.py). With --hogs N, N busy processes run beside each side's
watcher and writer (a starved machine: the watcher must never blame the job for its own lag).
The targets are issue 32's: LATE within 7 s of the last
step, STALLED naming rank 9,217, at most half a core, ended within 5 s of the duration. The
event loop's worst stall is not measured here (bench_prometheus measures it in process).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.benchmarks.revisions import package_tree, rev_package_tree  # noqa: E402

WRITER = ROOT / "tests" / "job_scale_writer.py"


def run_side(
    python_path: Path, work: Path, name: str, ranks: int, hang_at_s: float, culprit: int, duration_s: float, hogs: int
):
    run_dir, receipt = work / f"{name}-run", work / f"{name}-receipt.json"
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]
    writer = subprocess.Popen(
        [sys.executable, str(WRITER), str(run_dir), "--ranks", str(ranks), "--hang-at", str(hang_at_s)]
        + ["--culprit", str(culprit), "--duration", str(duration_s + hang_at_s + 60)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdout is not None
    last_step_ts = None
    try:
        first = writer.stdout.readline()
        assert first.startswith("step"), first
        env = {**os.environ, "PYTHONPATH": str(python_path)}
        command = [sys.executable, "-m", "trnwatch", "watch", "--headless", "--job-dir", str(run_dir)]
        command += ["--receipt", str(receipt), "--duration", str(duration_s)]
        started = time.monotonic()
        watcher = subprocess.Popen(command, cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for line in writer.stdout:
            if line.startswith("hang"):
                last_step_ts = float(line.split()[1])
                break
        _pid, status, usage = os.wait4(watcher.pid, 0)
        wall_s = time.monotonic() - started
        watcher.returncode = os.waitstatus_to_exitcode(status)
        err = watcher.stderr.read().decode(errors="replace") if watcher.stderr else ""
    finally:
        writer.kill()
        writer.communicate()
        for hog in busy:
            hog.kill()
            hog.wait()
    if not receipt.exists():
        return {"side": name, "error": f"no receipt (exit {watcher.returncode}): {err[-400:]}"}
    r = json.loads(receipt.read_text())
    job = r.get("job") or {}
    incidents = r.get("incidents", [])
    job_incidents = [i for i in incidents if i["kind"] == "job"]
    changes = [(c["label"], c["at"]) for i in job_incidents for c in i["changes"]]

    def after_last_step(label: str) -> float | None:
        times = [at for lab, at in changes if lab == label]
        return None if not times or last_step_ts is None else round(min(times) - last_step_ts, 1)

    false_before = [i for i in job_incidents if last_step_ts is not None and i["first"] < last_step_ts]
    suspects = job.get("suspects") or []
    return {
        "side": name,
        "verdict": job.get("verdict"),
        "culprit": suspects[0]["rank"] if suspects else None,
        "dead_ranks": (job.get("ranks") or {}).get("dead"),
        "late_after_last_step_s": after_last_step("LATE"),
        "stalled_after_last_step_s": after_last_step("STALLED"),
        "dead_after_last_step_s": after_last_step("DEAD"),
        "job_incidents_before_hang": len(false_before),
        "first_false_incident_before_hang_s": round(last_step_ts - min(i["first"] for i in false_before), 1)
        if false_before and last_step_ts is not None
        else None,
        "monitor": r.get("monitor"),
        "cpu_cores": round((usage.ru_utime + usage.ru_stime) / wall_s, 2),
        "ended_after_duration_s": round(wall_s - duration_s, 1),
        "exit": watcher.returncode,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=18432)
    p.add_argument("--hang-at", type=float, default=50.0)
    p.add_argument("--culprit", type=int, default=9217)
    p.add_argument("--duration", type=float, default=95.0)
    p.add_argument("--against", metavar="REV", help="also run commit REV's watcher on the same job, after this tree's")
    p.add_argument("--hogs", type=int, default=0, metavar="N", help="N busy processes beside each side's run")
    args = p.parse_args()
    print(f"load: {os.getloadavg()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-job-scale-") as tmp:
        work = Path(tmp)
        sides = [("this", package_tree(ROOT, work / "this"))]
        if args.against:
            sides.append((args.against, rev_package_tree(args.against, work)))
        for name, tree in sides:
            result = run_side(
                tree, work, name.replace("/", "_"), args.ranks, args.hang_at, args.culprit, args.duration, args.hogs
            )
            print(json.dumps(result), flush=True)
            print(f"load: {os.getloadavg()}", flush=True)
    print(
        "targets: LATE <= 7 s after the last step, STALLED naming rank "
        f"{args.culprit}, no job incident before the hang, <= 0.5 core, ended <= 5 s after the duration"
    )


if __name__ == "__main__":
    main()
