"""A Kubernetes job's pods on the hosts the telemetry names, and its ranks through their hosts (pure).

A pod is on a host when one of its node's names (name, instance id, addresses, the pod's
hostIP: collectors/kubernetes.py) is one of the host's (host id, stream label, instance name),
the same names a job rank's host is matched by (`Ledger.host_named`); nothing is guessed from a
partial match.
"""

from collections.abc import Iterable, Mapping

from trnwatch.collectors.scheduler import KubernetesJob, KubernetesPod, SchedulerJob
from trnwatch.ledger.hosts import HostState

PodIndex = dict[str, tuple[KubernetesPod, ...]]


def pod_index(job: SchedulerJob | None) -> PodIndex:
    """Node name / instance id / address -> the job's pods on that node (empty outside Kubernetes)."""
    index: dict[str, list[KubernetesPod]] = {}
    if isinstance(job, KubernetesJob):
        for pod in job.pods:
            for name in dict.fromkeys(pod.node_names):
                index.setdefault(name, []).append(pod)
    return {name: tuple(pods) for name, pods in index.items()}


def pods_of(index: PodIndex, host: HostState) -> tuple[KubernetesPod, ...]:
    """The pods on `host`, in name order."""
    found = {p.name: p for n in (host.host_id, host.source_id, host.instance_name) if n for p in index.get(n, ())}
    return tuple(found[name] for name in sorted(found))


def rank_ranges(ranks: Iterable[int]) -> str:
    """[0, 1, 2, 3, 8] -> "0-3,8"."""
    spans: list[list[int]] = []
    for rank in sorted(set(ranks)):
        if spans and rank == spans[-1][1] + 1:
            spans[-1][1] = rank
        else:
            spans.append([rank, rank])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)


def placed_job(
    job: KubernetesJob, hosts: Iterable[HostState], rank_hosts: Mapping[int, HostState | None]
) -> KubernetesJob:
    """The job with each pod's host and ranks filled in, and the ranks on no pod's host (the receipt's)."""
    index = pod_index(job)
    host_of_pod: dict[str, HostState] = {}
    for host in hosts:
        for pod in pods_of(index, host):
            host_of_pod.setdefault(pod.name, host)
    ranks_on: dict[str, list[int]] = {}
    unmapped: list[int] = []
    for rank, rank_host in rank_hosts.items():
        pods = pods_of(index, rank_host) if rank_host is not None else ()
        for pod in pods:
            ranks_on.setdefault(pod.name, []).append(rank)
        if not pods:
            unmapped.append(rank)
    pods = tuple(
        pod.model_copy(
            update={
                "host": host_of_pod[pod.name].host_id if pod.name in host_of_pod else None,
                "ranks": rank_ranges(ranks_on[pod.name]) if pod.name in ranks_on else None,
            }
        )
        for pod in job.pods
    )
    return job.model_copy(update={"pods": pods, "ranks_unmapped": rank_ranges(unmapped) if unmapped else None})
