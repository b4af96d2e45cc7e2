"""Which scheduler job this session serves: read once at start, kept in the receipt's boundary
and the recording's header (so a replay reports the recorded job, not the replaying shell's).

- Slurm: inside an allocation (sbatch, salloc, srun) Slurm sets, among its documented output
  environment variables, `SLURM_JOB_ID`, `SLURM_JOB_NAME` and `SLURM_JOB_NODELIST` (the nodes in
  Slurm's hostlist form, e.g. `trn[001-004]`) in trnwatch's own environment. Outside one: None.
- Kubernetes: `--k8s-job NAMESPACE/NAME` (collectors/kubernetes.py asks kubectl): the job's pods,
  each with its node and that node's instance id and addresses, which join it to the hosts the
  telemetry names (ledger/ledger.py `pods_on`).
"""

from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

MAX_CHARS = 1024  # a value past this is cut (a node list of thousands of nodes, in Slurm's compressed form, fits)


class SlurmJob(BaseModel):
    """The Slurm job the watched hosts serve."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["slurm"]
    job_id: str
    name: str | None
    nodelist: str | None


class KubernetesPod(BaseModel):
    """One pod of a Kubernetes job, as `kubectl get pods` and `kubectl get nodes` gave it at start."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str  # metadata.name
    phase: str | None  # status.phase: Pending, Running, Succeeded, Failed, Unknown
    owner: str | None  # the controller in metadata.ownerReferences, "PyTorchJob/llama" ("Kind/name")
    node: str | None  # spec.nodeName; null: not scheduled to a node
    instance_id: str | None  # from the node's spec.providerID (aws:///zone/i-...); null: none there
    # The names that join the pod to a host of the telemetry: the node's name, instance id and
    # addresses (Hostname, InternalDNS, InternalIP), and the pod's status.hostIP.
    node_names: tuple[str, ...] = ()
    # Why the pod cannot be placed on a host from Kubernetes' answer alone (no node, the node not
    # listed, no providerID); null: it names its node's instance.
    problem: str | None = None
    # Filled in the receipt only (at the session's end): the ledger's host the pod ran on (null:
    # no host of the telemetry has its node's names) and the job's ranks on that host ("0-63").
    host: str | None = None
    ranks: str | None = None


class KubernetesJob(BaseModel):
    """The Kubernetes job (`--k8s-job NAMESPACE/NAME`) the watched hosts serve."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["kubernetes"]
    namespace: str
    job: str
    labels: tuple[str, ...]  # the job-name labels that matched its pods
    pods: tuple[KubernetesPod, ...]
    pods_dropped: int = 0  # past MAX_PODS, or unreadable items
    # Filled in the receipt only: the job's ranks whose host carries none of its pods ("64-127").
    ranks_unmapped: str | None = None


SchedulerJob = Annotated[SlurmJob | KubernetesJob, Field(discriminator="kind")]
SCHEDULER_JOB = TypeAdapter(SchedulerJob)


def _value(environ: Mapping[str, str], name: str) -> str | None:
    text = "".join(ch for ch in environ.get(name, "") if ch.isprintable()).strip()[:MAX_CHARS]
    return text or None


def slurm_job(environ: Mapping[str, str]) -> SlurmJob | None:
    """The Slurm job of `environ` (os.environ at start), or None outside an allocation."""
    job_id = _value(environ, "SLURM_JOB_ID")
    if job_id is None:
        return None
    return SlurmJob(
        kind="slurm",
        job_id=job_id,
        name=_value(environ, "SLURM_JOB_NAME"),
        nodelist=_value(environ, "SLURM_JOB_NODELIST"),
    )


def job_words(job: SchedulerJob) -> str:
    """ "slurm job 4242 (pretrain) on trn[001-004]", "kubernetes job team/llama, 4 pods (1 not
    Running)": the job in words (plain text; a caller escapes it for its medium)."""
    if isinstance(job, KubernetesJob):
        text = f"kubernetes job {job.namespace}/{job.job}, {len(job.pods)} pod{'s' if len(job.pods) != 1 else ''}"
        idle = sum(1 for p in job.pods if p.phase != "Running")
        return text + (f" ({idle} not Running)" if idle else "")
    text = f"{job.kind} job {job.job_id}"
    if job.name:
        text += f" ({job.name})"
    if job.nodelist:
        text += f" on {job.nodelist}"
    return text


def header_tags(job: SchedulerJob) -> tuple[str, ...]:
    """The job for the screen's header, longest first: the header shows the first that fits whole."""
    if isinstance(job, KubernetesJob):
        return (f"k8s {job.namespace}/{job.job}", f"k8s {job.job}")
    short = f"{job.kind} {job.job_id}"
    return (f"{short} {job.name}", short) if job.name else (short,)
