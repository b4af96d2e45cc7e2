"""What `kubectl get nodes -o json` and `scontrol show topology` print, for tests that cannot run a
Kubernetes API server or slurmctld here. Each printer follows the public source it names:

- kubectl: a list (`"kind": "List"`, `"metadata": {"resourceVersion": ""}`, kubectl's form for
  `get ... -o json`, indented 4 spaces) of `Node` objects as the Kubernetes API reference gives
  them (core/v1 Node: `metadata.name`, `metadata.labels`, `spec.providerID`, `status.addresses`
  of types InternalIP / InternalDNS / Hostname, `status.nodeInfo`); `providerID` in the AWS cloud
  provider's form `aws:///<zone>/<instance id>`; the EKS label `topology.k8s.aws/ultraserver-id`
  and the well-known labels `kubernetes.io/hostname`, `node.kubernetes.io/instance-type`,
  `topology.kubernetes.io/zone`.
- kubectl pods: the same List form of `Pod` objects (core/v1 Pod: `metadata.name`, `namespace`,
  `labels`, `ownerReferences` {apiVersion, kind, name, uid, controller, blockOwnerDeletion},
  `spec.nodeName` (absent until scheduled), `status.phase`, `status.podIP` / `podIPs`, `hostIP` /
  `hostIPs`, `conditions`). The labels each controller sets: the batch/v1 Job controller's
  `batch.kubernetes.io/job-name`, `batch.kubernetes.io/controller-uid` and the legacy `job-name`,
  `controller-uid` (kubernetes/kubernetes `pkg/apis/batch/types.go`); Kubeflow's training-operator
  (`pkg/apis/kubeflow.org/v1/common_types.go`: `training.kubeflow.org/job-name`, `replica-type`,
  `replica-index`, `operator-name`, `job-role` master) for a PyTorchJob; mpi-operator v2beta1
  (`pkg/apis/kubeflow/v2beta1/constants.go`, `defaultLabels` in `pkg/controller/mpi_job_controller.go`:
  job-name, job-role launcher/worker, operator-name mpi-operator) for an MPIJob, whose launcher
  pod belongs to the batch Job `<name>-launcher`.
- scontrol: one line per record, the statements of SchedMD/slurm
  `src/plugins/topology/block/topology_block.c` `_print_topo_record` (`"%s=%s BlockIndex=%u"` with
  `BlockName` or `AggregatedBlock`, `" Nodes=%s"`, `" BlockSize=%u"`) and
  `src/plugins/topology/tree/topology_tree.c` `_print_topo_record` (`"SwitchName=%s Level=%u
  LinkSpeed=%u"`, `" Nodes=%s"`, `" Switches=%s"`).
"""

import json
import zlib
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class K8sNode:
    name: str  # ip-10-0-1-17.us-east-2.compute.internal
    instance_id: str | None  # None: a node with no spec.providerID (not an AWS cloud-provider node)
    ip: str
    ultraserver: str | None  # the label's value; None: the node has no such label
    zone: str = "us-east-2b"
    instance_type: str = "trn3pds.48xlarge"


def kubectl_get_nodes_json(nodes: list[K8sNode]) -> str:
    items = []
    for n in nodes:
        labels = {
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/hostname": n.name,
            "kubernetes.io/os": "linux",
            "node.kubernetes.io/instance-type": n.instance_type,
            "topology.kubernetes.io/region": n.zone[:-1],
            "topology.kubernetes.io/zone": n.zone,
        }
        if n.ultraserver is not None:
            labels["topology.k8s.aws/ultraserver-id"] = n.ultraserver
        items.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
                    "creationTimestamp": "2026-12-02T08:14:03Z",
                    "labels": labels,
                    "name": n.name,
                    "resourceVersion": "4412871",
                    "uid": f"5d0b7c1e-0000-4000-8000-{zlib.crc32(n.name.encode()):012d}",
                },
                "spec": {"providerID": f"aws:///{n.zone}/{n.instance_id}"} if n.instance_id else {},
                "status": {
                    "addresses": [
                        {"address": n.ip, "type": "InternalIP"},
                        {"address": n.name, "type": "InternalDNS"},
                        {"address": n.name, "type": "Hostname"},
                    ],
                    "conditions": [
                        {
                            "lastHeartbeatTime": "2026-12-02T19:40:12Z",
                            "lastTransitionTime": "2026-12-02T08:14:33Z",
                            "message": "kubelet is posting ready status",
                            "reason": "KubeletReady",
                            "status": "True",
                            "type": "Ready",
                        }
                    ],
                    "nodeInfo": {
                        "architecture": "amd64",
                        "containerRuntimeVersion": "containerd://1.7.27",
                        "kernelVersion": "6.1.141-155.222.amzn2023.x86_64",
                        "kubeletVersion": "v1.34.2-eks-113cf36",
                        "operatingSystem": "linux",
                        "osImage": "Amazon Linux 2023.9.20251208",
                    },
                },
            }
        )
    return json.dumps(
        {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}, indent=4
    )


@dataclass(frozen=True)
class K8sPod:
    name: str
    job: str  # the controller object's name (PyTorchJob, MPIJob or Job)
    controller: Literal["Job", "PyTorchJob", "MPIJob"]
    node: str | None  # None: not scheduled yet (Pending)
    phase: str = "Running"
    pod_ip: str | None = None
    host_ip: str | None = None
    replica: str = "worker"  # PyTorchJob master/worker, MPIJob launcher/worker
    index: int = 0
    namespace: str = "training"


def _pod_owner_and_labels(p: K8sPod) -> tuple[dict, dict[str, str]]:
    uid = f"7c1f0e2a-0000-4000-8000-{zlib.crc32(f'{p.controller}/{p.job}'.encode()):012d}"
    if p.controller == "Job" or (p.controller == "MPIJob" and p.replica == "launcher"):
        job = p.job if p.controller == "Job" else f"{p.job}-launcher"
        labels = {
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": job,
            "controller-uid": uid,
            "job-name": job,
        }
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": job}
        if p.controller == "MPIJob":
            labels |= {
                "training.kubeflow.org/job-name": p.job,
                "training.kubeflow.org/job-role": "launcher",
                "training.kubeflow.org/operator-name": "mpi-operator",
            }
        else:
            labels["batch.kubernetes.io/job-completion-index"] = str(p.index)
    elif p.controller == "PyTorchJob":
        labels = {
            "training.kubeflow.org/job-name": p.job,
            "training.kubeflow.org/operator-name": "pytorchjob-controller",
            "training.kubeflow.org/replica-index": str(p.index),
            "training.kubeflow.org/replica-type": p.replica,
        }
        if p.replica == "master":
            labels["training.kubeflow.org/job-role"] = "master"
        owner = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": p.job}
    else:
        labels = {
            "training.kubeflow.org/job-name": p.job,
            "training.kubeflow.org/job-role": "worker",
            "training.kubeflow.org/operator-name": "mpi-operator",
            "training.kubeflow.org/replica-index": str(p.index),
        }
        owner = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": p.job}
    owner |= {"blockOwnerDeletion": True, "controller": True, "uid": uid}
    return owner, labels


def kubectl_get_pods_json(pods: list[K8sPod]) -> str:
    items = []
    for p in pods:
        owner, labels = _pod_owner_and_labels(p)
        spec: dict = {
            "containers": [
                {
                    "image": "763104351884.dkr.ecr.us-east-2.amazonaws.com/pytorch-training-neuronx:2.8.0-neuronx-py311-sdk2.26.0-ubuntu22.04",
                    "imagePullPolicy": "IfNotPresent",
                    "name": "pytorch",
                    "resources": {
                        "limits": {"aws.amazon.com/neuron": "16"},
                        "requests": {"aws.amazon.com/neuron": "16"},
                    },
                }
            ],
            "restartPolicy": "Never",
            "schedulerName": "default-scheduler",
        }
        status: dict = {"phase": p.phase, "qosClass": "Burstable"}
        if p.node is None:
            status["conditions"] = [
                {
                    "lastProbeTime": None,
                    "lastTransitionTime": "2026-12-02T08:20:41Z",
                    "message": "0/4 nodes are available: 4 Insufficient aws.amazon.com/neuron.",
                    "reason": "Unschedulable",
                    "status": "False",
                    "type": "PodScheduled",
                }
            ]
        else:
            spec["nodeName"] = p.node
            status["conditions"] = [
                {
                    "lastProbeTime": None,
                    "lastTransitionTime": "2026-12-02T08:20:44Z",
                    "status": "True",
                    "type": "PodScheduled",
                }
            ]
            status["startTime"] = "2026-12-02T08:20:44Z"
            if p.host_ip:
                status["hostIP"] = p.host_ip
                status["hostIPs"] = [{"ip": p.host_ip}]
            if p.pod_ip:
                status["podIP"] = p.pod_ip
                status["podIPs"] = [{"ip": p.pod_ip}]
        items.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "creationTimestamp": "2026-12-02T08:20:41Z",
                    "labels": labels,
                    "name": p.name,
                    "namespace": p.namespace,
                    "ownerReferences": [owner],
                    "resourceVersion": "4413502",
                    "uid": f"0b6e3a5d-0000-4000-8000-{zlib.crc32(p.name.encode()):012d}",
                },
                "spec": spec,
                "status": status,
            }
        )
    return json.dumps(
        {"apiVersion": "v1", "items": items, "kind": "List", "metadata": {"resourceVersion": ""}}, indent=4
    )


def scontrol_block_line(name: str, index: int, nodes: str | None, size: int, aggregated: bool = False) -> str:
    line = f"{'AggregatedBlock' if aggregated else 'BlockName'}={name} BlockIndex={index}"
    if nodes:
        line += f" Nodes={nodes}"
    return line + f" BlockSize={size}"


def scontrol_switch_line(name: str, level: int, link_speed: int, nodes: str | None, switches: str | None) -> str:
    line = f"SwitchName={name} Level={level} LinkSpeed={link_speed}"
    if nodes:
        line += f" Nodes={nodes}"
    if switches:
        line += f" Switches={switches}"
    return line
