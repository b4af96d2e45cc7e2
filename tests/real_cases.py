"""Run the real cases the slow tests run (torchrun 2.13 with gloo, PyTorch Lightning 2.5.0 plain and
with NxD Training's bar, Open MPI 4.1.4, real workers under srun's layout) and print, for each, the
truth the run recorded beside what trnwatch's receipt says: verdict, culprit, steps, step time,
restarts. `python -m tests.real_cases` from the repository (several minutes; uses the machine's
torchrun, mpirun and pytorch-lightning). The workers' `step N` lines are read through the same
user profile file the Open MPI hang test uses."""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tests import test_launchers_real as launchers
from tests import test_torchrun_real as torchrun
from tests.slurm_label import label, task_exit

TRNWATCH = [sys.executable, "-m", "trnwatch"]
LIGHTNING_RUN = str(Path(__file__).with_name("lightning_run.py"))


def watch(tmp: Path, *job: str) -> dict:
    profile = tmp / "steps.toml"
    profile.write_text(launchers.STEP_PROFILE)
    path = tmp / "receipt.json"
    command = [*TRNWATCH, "watch", "--headless", "--duration", "3", "--receipt", str(path), *job]
    command += ["--log-profile-file", str(profile)]
    subprocess.run(command, capture_output=True, text=True, timeout=300, check=True)
    return json.loads(path.read_text())["job"]


def said(job: dict) -> dict:
    firsts = [f for f in job["failures"] if f["role"] == "first"]
    window = job.get("throughput") or {}
    p50 = (window.get("step_time_s") or {}).get("p50")
    culprit = "; ".join(f"rank {f['rank']}: {(f['error'] or f['kind'])[:60]}" for f in firsts) or "-"
    # The last step read: the throughput window's (steps with a time), else the first suspect's.
    suspects = job["suspects"]
    last_step = window.get("last_step") or (f"rank {suspects[0]['rank']}: {suspects[0]['step']}" if suspects else None)
    return {
        "verdict": job["verdict"],
        "culprit": culprit,
        "last_step": last_step,
        "p50": None if p50 is None else round(p50, 4),
        "restarts": len(job["restarts"]),
    }


def torchrun_cases() -> list[tuple[str, str, dict]]:
    out = []
    cases = [
        ("torchrun exception", ["raise", "1", "5"], ["--role", "rank", "--tee", "3"], None, "rank 1 raises at step 5"),
        ("torchrun sys.exit(3)", ["exit", "2", "4"], ["--tee", "3"], None, "rank 2 exits 3 at step 4"),
        ("torchrun @record", ["record", "0", "4"], [], None, "rank 0 raises at step 4 (@record)"),
        (
            "torchrun SIGKILL",
            ["wait", "1", "5"],
            ["--role", "rank", "--tee", "3"],
            "worker",
            "rank 1 SIGKILLed at step 5",
        ),
        ("torchrun hang", ["hang", "1", "5"], ["--role", "rank", "--tee", "3"], None, "rank 1 hangs at step 5"),
        (
            "torchrun restart recovers",
            ["raise", "1", "4", "1", "20"],
            ["--role", "rank", "--tee", "3", "--max-restarts", "2"],
            None,
            "rank 1 raises at step 4 in attempt 0; 1 restart; attempt 1 ends (20 steps)",
        ),
        (
            "torchrun restarts run out",
            ["raise", "2", "3"],
            ["--role", "rank", "--tee", "3", "--max-restarts", "1"],
            None,
            "rank 2 raises at step 3 in attempts 0 and 1; 1 restart",
        ),
        (
            "torchrun agent SIGTERM",
            ["none", "0", "5"],
            ["--role", "rank", "--tee", "3"],
            "agent",
            "agent SIGTERMed; no rank failed",
        ),
    ]
    for name, case, flags, stop, truth in cases:
        with tempfile.TemporaryDirectory() as tmp:
            log, code = torchrun.launch(Path(tmp), case, *flags, stop=stop)
            out.append((name, f"{truth} (torchrun exit {code})", said(watch(Path(tmp), "--job-log", str(log)))))
    return out


def lightning_cases() -> list[tuple[str, str, dict]]:
    out = []
    for name, flavour in (
        ("Lightning 2.5.0 to a file", []),
        ("NxD Training bar (Lightning 2.5.0) to a file", ["--nxdt"]),
    ):
        with tempfile.TemporaryDirectory() as tmp:
            log, truth_path = Path(tmp) / "train.log", Path(tmp) / "truth.json"
            args = ["--steps", "20", "--batches", "16", "--step-s", "0.1", "--stall-step", "8", "--stall-s", "1.5"]
            with open(log, "wb") as stream:
                command = [sys.executable, LIGHTNING_RUN, str(truth_path), *args, "--save-every", "5", *flavour]
                subprocess.run(command, stdout=stream, stderr=subprocess.STDOUT, timeout=600, check=True)
            truth = json.loads(truth_path.read_text())
            steps = {int(n): s for n, s in truth["steps"].items()}
            gaps = sorted(steps[n]["end_s"] - steps[n - 1]["end_s"] for n in steps if n - 1 in steps)
            p50 = (gaps[len(gaps) // 2 - 1] + gaps[len(gaps) // 2]) / 2 if len(gaps) % 2 == 0 else gaps[len(gaps) // 2]
            text = f"finished at step {truth['last_step']}, step p50 {p50:.4f} s, step 8 {gaps[-1]:.3f} s"
            out.append((name, text, said(watch(Path(tmp), "--job-log", str(log)))))
    return out


def mpirun_cases() -> list[tuple[str, str, dict]]:
    out = []
    for name, case, rank, text in (
        ("mpirun exception", "raise", 2, "rank 2 raises at step 4"),
        ("mpirun SIGKILL", "kill", 1, "rank 1 SIGKILLs itself at step 4"),
        ("mpirun hang (silent rank)", "hang", 1, "rank 1 hangs at step 4, mpirun stops it silently"),
    ):
        with tempfile.TemporaryDirectory() as tmp:
            log, code = launchers.mpirun(Path(tmp), case, rank, 4)
            out.append((name, f"{text} (mpirun exit {code})", said(watch(Path(tmp), "--job-log", str(log)))))
    return out


def srun_case() -> list[tuple[str, str, dict]]:
    with tempfile.TemporaryDirectory() as tmp:
        lines, ended = [], []
        for task, case in ((10, "raise"), (7, "kill")):
            env = {**os.environ, "SLURM_PROCID": str(task)}
            done = subprocess.run(
                [sys.executable, str(launchers.CASE), case, str(task), "5", tmp],
                capture_output=True,
                text=True,
                env=env,
            )
            lines += [label(task, 12, line) for line in (done.stdout + done.stderr).splitlines()]
            code = done.returncode
            ended.append(
                task_exit("trn-01", [task], exit_code=code) if code > 0 else task_exit("trn-02", [task], signum=-code)
            )
        log = Path(tmp) / "srun.log"
        log.write_text("\n".join(lines + ended) + "\n")
        return [
            (
                "srun --label + srun: error lines",
                "task 10 raises at step 5, then task 7 SIGKILLed",
                said(watch(Path(tmp), "--job-log", str(log))),
            )
        ]


def main() -> None:
    rows = torchrun_cases() + lightning_cases() + mpirun_cases() + srun_case()
    print("| case | truth | verdict | culprit (first failure) | last step read | step p50 s | restarts |")
    print("|---|---|---|---|---|---|---|")
    for name, truth, got in rows:
        print(
            f"| {name} | {truth} | {got['verdict']} | {got['culprit']} | {got['last_step']} | {got['p50']} | "
            f"{got['restarts']} |"
        )


if __name__ == "__main__":
    main()
