"""The whole path for real: the reference workload under torchrun (gloo) with rank 1 hung in its
dataloader, `trnwatch watch --capture-stacks` following its rank files, the stall confirmed, rank
1's stack taken with the real py-spy through the test sshd, and the function it hangs in found in
the receipt, its Markdown, and the receipt of the session's replay."""

import json
import os
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="the reference workload needs torch (CPU wheel torch==2.13.0)")

from trnwatch.workloads import train  # noqa: E402
from tests.sshd import alias, free_port  # noqa: E402
from tests.test_stacks import NO_PY_SPY, PY_SPY, sshd  # noqa: E402, F401 - the fixture
from tests.torchrun import stop_torchrun  # noqa: E402
from tests.waiting import run_until_said  # noqa: E402

# workloads/fault_injection.py, where --hang-rank loops (py-spy names a method by its qualified name)
HUNG_FUNCTION = "Faults.before_step"


def unshare_refusal() -> str | None:
    """Why the job cannot be given a host name of its own here (None: it can)."""
    if shutil.which("unshare") is None:
        return "needs unshare (util-linux)"
    probe = subprocess.run(["unshare", "--uts", "hostname", "probe"], capture_output=True, text=True)
    return None if probe.returncode == 0 else f"cannot unshare the UTS namespace: {probe.stderr.strip()}"


@pytest.mark.slow
@pytest.mark.skipif(NO_PY_SPY is not None, reason=NO_PY_SPY or "")
def test_a_hung_rank_stack_taken_over_ssh_is_in_the_receipt_and_its_replay(tmp_path, sshd):  # noqa: F811
    refusal = unshare_refusal()
    if refusal:
        pytest.skip(refusal)
    run = tmp_path / "run"
    # The job runs as host trn-00 (its own UTS namespace): its ranks report that name, which is
    # not this machine's, so trnwatch reaches them over ssh; the test sshd's alias trn-00 is here.
    job = [
        "unshare",
        "--uts",
        "sh",
        "-c",
        'hostname "$0" && exec "$@"',
        alias(0),
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "1",
        "--master-addr",  # not --standalone: its rendezvous would look up the name trn-00
        "127.0.0.1",
        "--master-port",
        str(free_port()),
        "--nproc-per-node",
        "2",
        train.__file__,
        "--run-dir",
        str(run),
        "--heartbeat-interval",
        "0.5",
        "--tp",
        "2",
        "--steps",
        "100000",
        "--hang-rank",
        "1",
        "--hang-step",
        "12",
        "--hang-region",
        "dataloader",
    ]
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo"}  # the name trn-00 resolves nowhere: gloo binds loopback
    with open(tmp_path / "torchrun.log", "w") as log:
        torchrun = subprocess.Popen(
            job, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path, env=env, start_new_session=True
        )
    receipt, recording = tmp_path / "receipt.json", tmp_path / "session.trnrec"
    watch = [
        sys.executable,
        "-m",
        "trnwatch",
        "watch",
        "--job-dir",
        str(run / "telemetry"),
        "--headless",
        "--capture-stacks",
        "--late-after",
        "1",
        "--stall-after",
        "2",
        "--ssh-config",
        str(sshd.ssh_config),
        "--py-spy",
        PY_SPY,
        "--record",
        str(recording),
        "--receipt",
        str(receipt),
    ]
    try:
        done = run_until_said(watch, [f"stack of rank 1 on {alias(0)}", f"stack of rank 0 on {alias(0)}"])
    finally:
        stop_torchrun(torchrun)
    said = [line for line in done.stderr.splitlines() if "stack of rank" in line]
    if any("permission-denied" in line for line in said):
        pytest.skip(f"the kernel refused ptrace here: {said}")
    assert f"stack of rank 1 on {alias(0)}" in done.stderr, done.stderr

    captures = json.loads(receipt.read_text())["stacks"]["captures"]
    hung = next(c for c in captures if c["rank"] == 1)
    assert (hung["outcome"], hung["via"], hung["trigger"], hung["contrast"]) == ("ok", "ssh", "stall", False), hung
    main = next(t for t in hung["threads"] if t["name"] == "MainThread")
    functions = [f["function"] for f in main["frames"]]
    assert functions[0] == HUNG_FUNCTION and main["frames"][0]["file"].endswith("fault_injection.py"), functions
    waiting = next(c for c in captures if c["rank"] == 0)
    assert waiting["contrast"] and waiting["incident"] == hung["incident"]
    assert HUNG_FUNCTION not in [f["function"] for t in waiting["threads"] for f in t["frames"]]
    # The same captures are the evidence of the job incident they were taken for (issue 24).
    [job_incident] = [i for i in json.loads(receipt.read_text())["incidents"] if i["kind"] == "job"]
    kept = {c["rank"]: c for c in job_incident["evidence"]["stacks"]}
    assert kept[1] == hung and kept[0] == waiting
    markdown = receipt.with_suffix(".md").read_text()
    assert f"    - {HUNG_FUNCTION} (" in markdown and "## Stacks (py-spy dump)" in markdown

    replayed = tmp_path / "replay.json"
    subprocess.run(
        [sys.executable, "-m", "trnwatch", "replay", str(recording), "--headless", "--receipt", str(replayed)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    replay = json.loads(replayed.read_text())
    assert replay["stacks"]["captures"] == captures
    [replayed_incident] = [i for i in replay["incidents"] if i["kind"] == "job"]
    assert HUNG_FUNCTION in [
        f["function"] for c in replayed_incident["evidence"]["stacks"] for t in c["threads"] for f in t["frames"]
    ]
