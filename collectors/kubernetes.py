"""`--k8s-job NAMESPACE/NAME`: the job's pods and the hosts they run on, asked of kubectl once at start.

Two commands, no client library: `kubectl get pods -n NAMESPACE -o json` and
`kubectl get nodes -o json` (each a `List` of core/v1 objects, Kubernetes API reference). A pod is
the job's when one of the labels its controller sets names the job:

- `batch.kubernetes.io/job-name` and the legacy `job-name`: the batch/v1 Job controller
  (kubernetes/kubernetes `pkg/apis/batch/types.go`, `JobNameLabel`, `LegacyJobNameLabel`);
- `training.kubeflow.org/job-name`: Kubeflow's training-operator (PyTorchJob and the other
  kubeflow.org/v1 jobs; kubeflow/training-operator `pkg/apis/kubeflow.org/v1/common_types.go`)
  and mpi-operator's MPIJob v2beta1 (kubeflow/mpi-operator `pkg/apis/kubeflow/v2beta1/constants.go`,
  set on launcher and workers by `defaultLabels` in `pkg/controller/mpi_job_controller.go`).

Each pod's `spec.nodeName` is looked up among the nodes: the node's `spec.providerID`
(`aws:///<zone>/<instance id>`) gives the instance id neuron-monitor names the host by, and its
`status.addresses` the names a hosts file may use. A pod not scheduled, on a node the list does not
have, or on a node without an AWS providerID is kept with the reason; it never stops the session.
kubectl missing, refused (RBAC), answering something else than a list (not JSON, JSON nested too
deep to decode) or more than MAX_OUTPUT_BYTES (64 MiB, read no further) is an error at start.
"""

import json
import os
import selectors
import subprocess
import time
from collections.abc import Callable

from trnwatch.collectors.scheduler import KubernetesJob, KubernetesPod
from trnwatch.collectors.topology import name_or_none

JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name", "training.kubeflow.org/job-name")
ADDRESS_TYPES = ("Hostname", "InternalDNS", "InternalIP")
MAX_PODS = 16_384
MAX_OUTPUT_BYTES = 64 << 20  # each command's stdout: read no further (the command is killed there)
READ_BYTES = 1 << 20
STDERR_KEEP_BYTES = 4096  # the end of kubectl's stderr, for its last line
TIMEOUT_S = 60.0  # each command's longest wait
PROGRESS_EVERY_S = 5.0  # a line on stderr this often while kubectl has not answered


class KubernetesError(ValueError):
    """The job cannot be resolved; the message says why and what to do."""


def parse_job_ref(text: str) -> tuple[str, str]:
    """`NAMESPACE/NAME` -> (namespace, name)."""
    namespace, sep, name = text.partition("/")
    if not sep or name_or_none(namespace) is None or name_or_none(name) is None or "/" in name:
        raise KubernetesError(f"--k8s-job takes NAMESPACE/NAME (e.g. training/llama-pretrain), not {text!r}")
    return namespace, name


def node_identity(node: object) -> tuple[str | None, str | None, list[str]]:
    """(metadata.name, instance id from spec.providerID, status.addresses of ADDRESS_TYPES) of a
    core/v1 Node; None / [] where the node does not say."""
    if not isinstance(node, dict):
        return None, None, []
    meta, spec, status = node.get("metadata"), node.get("spec"), node.get("status")
    name = name_or_none(meta.get("name")) if isinstance(meta, dict) else None
    provider = spec.get("providerID") if isinstance(spec, dict) else None
    instance = None
    if isinstance(provider, str) and provider.startswith("aws://"):
        instance = name_or_none(provider.rsplit("/", 1)[-1])
    addresses = status.get("addresses") if isinstance(status, dict) else None
    names = [
        n
        for a in (addresses if isinstance(addresses, list) else [])
        if isinstance(a, dict) and a.get("type") in ADDRESS_TYPES and (n := name_or_none(a.get("address")))
    ]
    return name, instance, names


def _items(text: str, command: list[str]) -> list:
    said = f"--k8s-job: `{' '.join(command)}` printed"
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise KubernetesError(f"{said} something that is not JSON ({exc})") from None
    except RecursionError:  # the decoder's depth bound: arrays or objects nested past it
        raise KubernetesError(f"{said} JSON nested too deep to read (a Kubernetes list is never that deep)") from None
    if not isinstance(data, dict) or not isinstance(data.get("items"), list):
        raise KubernetesError(f"{said} no list of {command[2]} (no 'items')")
    return data["items"]


def pods_command(namespace: str) -> list[str]:
    return ["kubectl", "get", "pods", "-n", namespace, "-o", "json"]


NODES_COMMAND = ["kubectl", "get", "nodes", "-o", "json"]


def _owner(meta: dict) -> str | None:
    refs = meta.get("ownerReferences")
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, dict) and ref.get("controller") is True:
            kind, name = name_or_none(ref.get("kind")), name_or_none(ref.get("name"))
            return f"{kind}/{name}" if kind and name else None
    return None


def _pod(item: dict, meta: dict, nodes: dict[str, tuple[str | None, list[str]]]) -> KubernetesPod:
    spec, status = item.get("spec"), item.get("status")
    node = name_or_none(spec.get("nodeName")) if isinstance(spec, dict) else None
    status = status if isinstance(status, dict) else {}
    phase = name_or_none(status.get("phase"))
    host_ip = name_or_none(status.get("hostIP"))
    instance, names, problem = None, [], None
    if node is None:
        problem = "not scheduled to a node (no spec.nodeName)"
    elif node not in nodes:
        problem = f"node {node} is not in `kubectl get nodes`"
        names = [node]
    else:
        instance, addresses = nodes[node]
        names = [node, *([instance] if instance else []), *addresses]
        if instance is None:
            problem = f"node {node} has no AWS spec.providerID (no instance id)"
    if host_ip and host_ip not in names:
        names.append(host_ip)
    return KubernetesPod(
        name=meta["name"],
        phase=phase,
        owner=_owner(meta),
        node=node,
        instance_id=instance,
        node_names=tuple(names),
        problem=problem,
    )


def job_of(namespace: str, job: str, pods_text: str, nodes_text: str) -> KubernetesJob:
    """The job's pods, each placed on its node's instance, from the two commands' outputs (pure)."""
    nodes: dict[str, tuple[str | None, list[str]]] = {}
    for item in _items(nodes_text, NODES_COMMAND):
        name, instance, addresses = node_identity(item)
        if name is not None:
            nodes[name] = (instance, addresses)
    pods: list[KubernetesPod] = []
    matched: set[str] = set()
    dropped = 0
    for item in _items(pods_text, pods_command(namespace)):
        meta = item.get("metadata") if isinstance(item, dict) else None
        labels = meta.get("labels") if isinstance(meta, dict) else None
        hits = [k for k in JOB_NAME_LABELS if isinstance(labels, dict) and labels.get(k) == job]
        if not hits or not isinstance(meta, dict):
            continue
        if name_or_none(meta.get("name")) is None or len(pods) >= MAX_PODS:
            dropped += 1
            continue
        matched.update(hits)
        pods.append(_pod(item, meta, nodes))
    if not pods:
        raise KubernetesError(
            f"--k8s-job {namespace}/{job}: no pod in namespace {namespace} has a job-name label of {job} "
            f"(labels read: {', '.join(JOB_NAME_LABELS)}); is the job running, and its name and namespace right?"
        )
    return KubernetesJob(
        kind="kubernetes",
        namespace=namespace,
        job=job,
        labels=tuple(k for k in JOB_NAME_LABELS if k in matched),
        pods=tuple(sorted(pods, key=lambda p: p.name)),
        pods_dropped=dropped,
    )


def kubectl(argv: list[str], say: Callable[[str], None], timeout_s: float = TIMEOUT_S) -> str:
    """Run one kubectl command to its end (at most `timeout_s`), saying every PROGRESS_EVERY_S
    that it is still waiting; its stdout, or KubernetesError in words. Stdout is read as it comes
    and the command is killed once it has written more than MAX_OUTPUT_BYTES (never held whole)."""
    command = " ".join(argv)
    try:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
        )
    except OSError as exc:
        raise KubernetesError(
            f"--k8s-job: cannot run {argv[0]} ({exc.strerror or exc}); it must be on PATH with a kubeconfig"
        ) from None
    try:
        out, err = _read_to_end(proc, command, say, timeout_s)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    if proc.returncode != 0:
        lines = err.decode("utf-8", "replace").strip().splitlines()
        last = "".join(ch for ch in lines[-1] if ch.isprintable())[:300] if lines else "no message"
        raise KubernetesError(f"--k8s-job: `{command}` exited with status {proc.returncode}: {last}")
    return out.decode("utf-8", "replace")


def _read_to_end(
    proc: subprocess.Popen, command: str, say: Callable[[str], None], timeout_s: float
) -> tuple[bytes, bytes]:
    """(stdout, the last STDERR_KEEP_BYTES of stderr) of `proc` once it closed both and exited."""
    assert proc.stdout is not None and proc.stderr is not None
    out, err = bytearray(), bytearray()
    started = time.monotonic()
    said_s = started
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ, out)
        selector.register(proc.stderr, selectors.EVENT_READ, err)
        while selector.get_map():
            now = time.monotonic()
            if now - started >= timeout_s:
                raise KubernetesError(f"--k8s-job: `{command}` gave no answer in {timeout_s:g} s")
            if now - said_s >= PROGRESS_EVERY_S:
                said_s = now
                say(f"--k8s-job: waiting for `{command}` ({now - started:.0f} s of at most {timeout_s:g} s)")
            wait_s = min(PROGRESS_EVERY_S - (now - said_s), timeout_s - (now - started))
            for key, _ in selector.select(max(0.0, wait_s)):
                chunk = os.read(key.fd, READ_BYTES)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                key.data.extend(chunk)
                if key.data is err:
                    del err[:-STDERR_KEEP_BYTES]
                elif len(out) > MAX_OUTPUT_BYTES:
                    raise KubernetesError(
                        f"--k8s-job: `{command}` wrote more than {MAX_OUTPUT_BYTES >> 20} MiB; stopped reading it there"
                    )
    try:
        proc.wait(timeout=max(0.0, timeout_s - (time.monotonic() - started)))
    except subprocess.TimeoutExpired:
        raise KubernetesError(f"--k8s-job: `{command}` gave no answer in {timeout_s:g} s") from None
    return bytes(out), bytes(err)


def resolve_job(ref: str, say: Callable[[str], None], run: Callable[..., str] = kubectl) -> KubernetesJob:
    """`--k8s-job NAMESPACE/NAME` -> the job, its pods placed on their nodes' instances: two
    kubectl calls, once. KubernetesError when kubectl cannot say."""
    namespace, job = parse_job_ref(ref)
    pods_text = run(pods_command(namespace), say)
    nodes_text = run(NODES_COMMAND, say)
    return job_of(namespace, job, pods_text, nodes_text)
