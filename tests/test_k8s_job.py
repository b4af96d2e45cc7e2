"""`--k8s-job NAMESPACE/NAME` (issue 23 item 4, Kubernetes part): the job's pods, from
`kubectl get pods -n NAMESPACE -o json` and `kubectl get nodes -o json` printed by
tests/scheduler_outputs.py (core/v1 Pod and Node in kubectl's List form, with the labels the
batch Job controller, Kubeflow's training-operator and mpi-operator set, each source named there),
placed on the hosts a real child `trnwatch watch` sees, in its receipt, header and host view;
kubectl missing, refused or printing garbage is an error at start, never a traceback."""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from trnwatch.collectors import kubernetes
from trnwatch.collectors.kubernetes import KubernetesError, job_of, parse_job_ref
from trnwatch.collectors.scheduler import KubernetesJob, KubernetesPod
from trnwatch.ledger.compare import compare, render_markdown
from trnwatch.ledger.receipt import Receipt
from trnwatch.workloads.sim.fleet import fleet_hosts
from trnwatch.workloads.sim.job import SimJobWriter
from trnwatch.workloads.sim.topology import get_topology
from tests.scheduler_outputs import K8sNode, K8sPod, kubectl_get_nodes_json, kubectl_get_pods_json
from tests.test_tui_app import drive
from tests.tui_fleet import make_app

TRNWATCH = [sys.executable, "-m", "trnwatch"]
T0 = 1_764_700_000.0
SIM = fleet_hosts(get_topology("trn3-gen1-us"), 0, "healthy", 1.0)  # 4 hosts x 16 chips x 4 cores: 256 ranks
NODES = [
    K8sNode(f"ip-10-0-1-{17 + i}.us-east-2.compute.internal", h.instance_id, f"10.0.1.{17 + i}", None)
    for i, h in enumerate(SIM[:2])
] + [
    # A node that is not an AWS cloud-provider node (no spec.providerID): joined by its name,
    # which here is the host's instance name.
    K8sNode(SIM[2].instance_name, None, "10.0.1.19", None),
    K8sNode("ip-10-0-9-9.us-east-2.compute.internal", "i-0cpuonly000000001", "10.0.9.9", None),
]
PODS = [
    K8sPod(
        "llama-master-0",
        "llama",
        "PyTorchJob",
        NODES[0].name,
        replica="master",
        pod_ip="10.0.1.200",
        host_ip="10.0.1.17",
    ),
    K8sPod("llama-worker-0", "llama", "PyTorchJob", NODES[1].name, index=0, host_ip="10.0.1.18"),
    K8sPod("llama-worker-1", "llama", "PyTorchJob", NODES[2].name, index=1, host_ip="10.0.1.19"),
    K8sPod("llama-worker-2", "llama", "PyTorchJob", None, phase="Pending", index=2),
    # Another job in the namespace: an MPIJob's launcher (owned by the batch Job mistral-launcher)
    # and a worker, and a batch Job's pod.
    K8sPod("mistral-launcher-x7k2p", "mistral", "MPIJob", NODES[3].name, replica="launcher", host_ip="10.0.9.9"),
    K8sPod("mistral-worker-0", "mistral", "MPIJob", NODES[0].name, host_ip="10.0.1.17"),
    K8sPod("tokenize-0-5sd8f", "tokenize", "Job", NODES[3].name, phase="Succeeded", host_ip="10.0.9.9"),
]


def _job(name: str) -> KubernetesJob:
    return job_of("training", name, kubectl_get_pods_json(PODS), kubectl_get_nodes_json(NODES))


def test_a_pytorchjobs_pods_are_found_by_their_label_and_placed_on_their_nodes_instances():
    job = _job("llama")
    assert job.labels == ("training.kubeflow.org/job-name",)
    by_name = {p.name: p for p in job.pods}
    assert list(by_name) == ["llama-master-0", "llama-worker-0", "llama-worker-1", "llama-worker-2"]
    master = by_name["llama-master-0"]
    assert (master.phase, master.owner, master.node, master.instance_id, master.problem) == (
        "Running",
        "PyTorchJob/llama",
        NODES[0].name,
        SIM[0].instance_id,
        None,
    )
    assert SIM[0].instance_id in master.node_names and "10.0.1.17" in master.node_names
    no_provider = by_name["llama-worker-1"]
    assert no_provider.instance_id is None and "no AWS spec.providerID" in no_provider.problem
    assert SIM[2].instance_name in no_provider.node_names
    pending = by_name["llama-worker-2"]
    assert (pending.phase, pending.node, pending.node_names) == ("Pending", None, ())
    assert "not scheduled" in pending.problem


def test_an_mpijob_and_a_batch_job_are_found_by_the_labels_their_controllers_set():
    mistral = _job("mistral")
    assert [(p.name, p.owner) for p in mistral.pods] == [
        ("mistral-launcher-x7k2p", "Job/mistral-launcher"),
        ("mistral-worker-0", "MPIJob/mistral"),
    ]
    assert mistral.labels == ("training.kubeflow.org/job-name",)
    # The launcher's own batch Job, by its batch.kubernetes.io/job-name and legacy job-name labels.
    launcher = _job("mistral-launcher")
    assert [p.name for p in launcher.pods] == ["mistral-launcher-x7k2p"]
    assert launcher.labels == ("batch.kubernetes.io/job-name", "job-name")
    assert [p.phase for p in _job("tokenize").pods] == ["Succeeded"]


def test_a_pod_on_a_node_the_node_list_lacks_is_kept_with_the_reason():
    job = job_of("training", "llama", kubectl_get_pods_json(PODS), kubectl_get_nodes_json(NODES[1:]))
    master = next(p for p in job.pods if p.name == "llama-master-0")
    assert master.instance_id is None and "is not in `kubectl get nodes`" in master.problem
    assert master.node_names == (NODES[0].name, "10.0.1.17")  # its node's name and the pod's hostIP


def test_no_pod_garbage_and_a_bad_reference_are_refused_in_words():
    with pytest.raises(KubernetesError, match="no pod in namespace training has a job-name label of gpt"):
        _job("gpt")
    with pytest.raises(KubernetesError, match="not JSON"):
        job_of("training", "llama", "<html>502 Bad Gateway</html>", kubectl_get_nodes_json(NODES))
    with pytest.raises(KubernetesError, match="no list of nodes"):
        job_of("training", "llama", kubectl_get_pods_json(PODS), '{"kind": "Status"}')
    assert parse_job_ref("training/llama") == ("training", "llama")
    for bad in ("llama", "training/", "/llama", "a/b/c", "ns/\x1b[31m"):
        with pytest.raises(KubernetesError, match="NAMESPACE/NAME"):
            parse_job_ref(bad)


def _fake_kubectl(bin_dir: Path, pods: str, nodes: str, status: int = 0, stderr: str = "") -> None:
    """A kubectl on PATH that prints the recorded pods or nodes answer for `get pods` / `get nodes`."""
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "pods.json").write_text(pods)
    (bin_dir / "nodes.json").write_text(nodes)
    (bin_dir / "argv.log").write_text("")
    script = bin_dir / "kubectl"
    script.write_text(
        f"#!{sys.executable}\nimport sys\n"
        f"open({str(bin_dir / 'argv.log')!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
        f"sys.stderr.write({stderr!r})\n"
        f"if {status}: sys.exit({status})\n"
        f"sys.stdout.write(open({str(bin_dir)!r} + '/' + sys.argv[2] + '.json').read())\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def _run(args: list[str], bin_dir: Path | None, stdin: str = "", path: str | None = None):
    env = dict(os.environ, PATH=path if path is not None else f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    env = {k: v for k, v in env.items() if not k.startswith("SLURM_")}
    return subprocess.run(TRNWATCH + args, input=stdin, capture_output=True, text=True, timeout=180, env=env)


def _fleet_run(tmp_path: Path) -> tuple[str, Path]:
    """Three ticks of the four simulated hosts' reports (one stream, as neuron-monitor text) and
    their 256 ranks' job files."""
    writer = SimJobWriter(SIM, tmp_path / "run")
    reports = []
    for tick in range(3):
        writer.write_tick(tick, T0 + tick)
        reports += [h.report_line(tick) + "\n" for h in SIM]
    writer.close()
    return "".join(reports), tmp_path / "run"


def _watch(tmp_path: Path, bin_dir: Path, name: str, job: str, *extra: str) -> dict:
    reports, run_dir = _fleet_run(tmp_path / name)
    receipt = tmp_path / f"{name}.json"
    result = _run(
        ["watch", "--stdin", "--job-dir", str(run_dir), "--headless", "--k8s-job", f"training/{job}"]
        + ["--duration", "3", "--receipt", str(receipt), *extra],
        bin_dir,
        reports,
    )
    assert result.returncode in (0, 1), result.stderr
    assert "Traceback" not in result.stderr
    return json.loads(receipt.read_text())


@pytest.mark.slow
def test_a_watch_child_puts_the_jobs_pods_on_its_hosts_and_ranks_and_a_replay_keeps_them(tmp_path):
    bin_dir = tmp_path / "bin"
    _fake_kubectl(bin_dir, kubectl_get_pods_json(PODS), kubectl_get_nodes_json(NODES))
    recording = tmp_path / "run.trnrec"
    r = _watch(tmp_path, bin_dir, "llama", "llama", "--record", str(recording))
    Receipt.model_validate(r)
    # Two kubectl calls at start, nothing more.
    assert (bin_dir / "argv.log").read_text().splitlines() == ["get pods -n training -o json", "get nodes -o json"]
    job = r["boundary"]["scheduler"]
    assert (job["kind"], job["namespace"], job["job"]) == ("kubernetes", "training", "llama")
    placed = {p["name"]: (p["host"], p["ranks"], p["phase"]) for p in job["pods"]}
    assert placed == {
        "llama-master-0": (SIM[0].instance_id, "0-63", "Running"),  # by its node's providerID instance id
        "llama-worker-0": (SIM[1].instance_id, "64-127", "Running"),
        "llama-worker-1": (SIM[2].instance_id, "128-191", "Running"),  # by its node's name (no providerID)
        "llama-worker-2": (None, None, "Pending"),
    }
    assert job["ranks_unmapped"] == "192-255"  # the fourth host runs no pod of the job
    pods_of_host = {h["host"]: h["pods"] for h in r["hosts"]}
    assert pods_of_host == {
        SIM[0].instance_id: ["training/llama-master-0"],
        SIM[1].instance_id: ["training/llama-worker-0"],
        SIM[2].instance_id: ["training/llama-worker-1"],
        SIM[3].instance_id: [],
    }
    md = (tmp_path / "llama.md").read_text()
    assert "kubernetes job training/llama, 4 pods (1 not Running)" in md
    assert "pods labelled training.kubeflow.org/job-name" in md
    assert f"| llama-master-0 | Running | {NODES[0].name} | {SIM[0].instance_id} | {SIM[0].instance_id} | 0-63 |" in md
    assert "| llama-worker-2 | Pending | - | - | - | - | not scheduled to a node (no spec.nodeName) |" in md
    assert "Ranks on no pod's host: 192-255." in md

    # A replay reports the recorded job, from a shell with no kubectl at all.
    replayed = tmp_path / "replayed.json"
    result = _run(["replay", str(recording), "--headless", "--receipt", str(replayed)], None, path="/nonexistent")
    assert result.returncode == 0, result.stderr
    assert json.loads(replayed.read_text())["boundary"]["scheduler"] == job

    # compare: another job is information, shown, never a mismatch.
    other = _watch(tmp_path, bin_dir, "mistral", "mistral")
    result = compare(r, other)
    assert not result.refused and result.mismatched == []
    assert result.scheduler_jobs == (
        "kubernetes job training/llama, 4 pods (1 not Running)",
        "kubernetes job training/mistral, 2 pods",
    )
    text = render_markdown(result, "llama.json", "mistral.json")
    assert (
        "Scheduler jobs (different; information, not a boundary field): baseline kubernetes job training/llama" in text
    )


@pytest.mark.parametrize(
    ("status", "stderr", "pods", "said"),
    [
        (
            1,
            'Error from server (Forbidden): pods is forbidden: User "system:serviceaccount:training:trnwatch" '
            'cannot list resource "pods" in API group "" in the namespace "training"\n',
            "",
            "exited with status 1: Error from server (Forbidden): pods is forbidden",
        ),
        (0, "", "<html>502 Bad Gateway</html>", "printed something that is not JSON"),
        (0, "", kubectl_get_pods_json(PODS[4:]), "no pod in namespace training has a job-name label of llama"),
    ],
    ids=["forbidden", "garbage", "no-pods"],
)
def test_kubectl_refused_or_garbage_is_an_error_at_start_with_the_option_errors_status(
    tmp_path, status, stderr, pods, said
):
    bin_dir = tmp_path / "bin"
    _fake_kubectl(bin_dir, pods, kubectl_get_nodes_json(NODES), status, stderr)
    result = _run(["watch", "--stdin", "--headless", "--k8s-job", "training/llama"], bin_dir)
    assert result.returncode == 2  # as every option that cannot work (cli.py UsageError)
    assert said in result.stderr and result.stderr.startswith("trnwatch: --k8s-job")
    assert "Traceback" not in result.stderr


def test_kubectl_printing_json_nested_past_the_decoders_depth_is_an_error_at_start(tmp_path):
    """400 KB of `[` from `kubectl get pods`: a RecursionError traceback and exit 1, no words."""
    bin_dir = tmp_path / "bin"
    _fake_kubectl(bin_dir, "[" * 400_000, kubectl_get_nodes_json(NODES))
    result = _run(["watch", "--stdin", "--headless", "--k8s-job", "training/llama"], bin_dir)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("trnwatch: --k8s-job: `kubectl get pods -n training -o json` printed JSON nested")
    assert "Traceback" not in result.stderr and "RecursionError" not in result.stderr


def test_kubectl_writing_without_end_is_read_no_further_than_the_cap(tmp_path):
    """A kubectl that writes for ever: the answer is read only up to MAX_OUTPUT_BYTES, then the
    command is killed and the option refused (before: read whole, however large, until the 60 s
    timeout). The fake counts what it wrote: past the cap by no more than the pipe and a read or two."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    written = bin_dir / "written"
    script = bin_dir / "kubectl"
    script.write_text(
        f"#!{sys.executable}\nimport os\nchunk = b' ' * (1 << 20)\nn = 0\n"
        f"counter = os.open({str(written)!r}, os.O_WRONLY | os.O_CREAT)\n"
        "while True:\n    n += os.write(1, chunk)\n    os.pwrite(counter, b'%20d' % n, 0)\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    result = _run(["watch", "--stdin", "--headless", "--k8s-job", "training/llama"], bin_dir)
    assert result.returncode == 2, result.stderr
    assert "`kubectl get pods -n training -o json` wrote more than 64 MiB; stopped reading it there" in result.stderr
    assert "Traceback" not in result.stderr
    assert kubernetes.MAX_OUTPUT_BYTES <= int(written.read_text()) <= kubernetes.MAX_OUTPUT_BYTES + 4 * (1 << 20)


def test_kubectl_missing_and_a_bad_reference_are_errors_at_start(tmp_path):
    result = _run(["watch", "--stdin", "--headless", "--k8s-job", "training/llama"], None, path=str(tmp_path))
    assert result.returncode == 2
    assert "--k8s-job: cannot run kubectl (No such file or directory)" in result.stderr
    result = _run(["watch", "--stdin", "--headless", "--k8s-job", "llama"], None, path=str(tmp_path))
    assert result.returncode == 2 and "--k8s-job takes NAMESPACE/NAME" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_kubectl_that_does_not_answer_is_waited_for_with_progress_then_refused(tmp_path, monkeypatch):
    # kubectl that never answers: it opens a FIFO nobody writes, until it is killed.
    fifo = tmp_path / "never"
    os.mkfifo(fifo)
    hang = tmp_path / "kubectl"
    hang.write_text(f"#!{sys.executable}\nopen({str(fifo)!r}).read()\n")
    hang.chmod(hang.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(kubernetes, "PROGRESS_EVERY_S", 0.05)
    said: list[str] = []
    with pytest.raises(KubernetesError, match=r"`.*kubectl get pods -n training -o json` gave no answer in 0.3 s"):
        kubernetes.kubectl([str(hang), "get", "pods", "-n", "training", "-o", "json"], said.append, timeout_s=0.3)
    assert said and all("waiting for" in line for line in said)


def test_the_header_shows_the_kubernetes_job_where_it_fits_and_the_host_view_its_pod():
    app = make_app()
    host = next(iter(app.ledger.hosts.values()))
    pod = KubernetesPod(
        name="llama-worker-0",
        phase="Running",
        owner="PyTorchJob/llama",
        node="ip-10-0-1-18",
        instance_id=host.host_id,
        node_names=("ip-10-0-1-18", host.host_id),
    )
    job = KubernetesJob(
        kind="kubernetes", namespace="training", job="llama", labels=("training.kubeflow.org/job-name",), pods=(pod,)
    )

    def shown(width: int, scheduler: KubernetesJob | None, keys=()) -> str:
        app = make_app()
        app.ledger.scheduler = scheduler
        seen = drive(app, keys=keys, size=(width, 24))
        return seen.header + "\n" + seen.text

    # 80 columns: the UltraServer view's scope line is full, the job is left out (snapshots unchanged).
    assert shown(80, job).split("\n")[0] == shown(80, None).split("\n")[0]
    assert "36 hosts · 144 chips · k8s training/llama" in shown(200, job)
    long = job.model_copy(update={"namespace": "n" * 150})
    assert "36 hosts · 144 chips · k8s llama" in shown(200, long)
    # The host view: the selected host's pod, and no pod line on a host where none runs.
    selected = drive(make_app(), keys=("h",), size=(200, 30)).app.selection.host_id
    other = next(h for h in app.ledger.hosts if h != selected)
    for host_id, want in ((selected, True), (other, False)):
        app = make_app()
        app.ledger.scheduler = job.model_copy(
            update={"pods": (pod.model_copy(update={"instance_id": host_id, "node_names": (host_id,)}),)}
        )
        text = drive(app, keys=("h",), size=(200, 30)).text
        assert ("pod llama-worker-0 (Running)" in text) is want
