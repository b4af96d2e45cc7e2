"""What `kubectl get nodes -o json` and `scontrol show topology` print, for tests that cannot run a
Kubernetes API server or slurmctld here. Each printer follows the public source it names:

- kubectl: a list (`"kind": "List"`, `"metadata": {"resourceVersion": ""}`, kubectl's form for
  `get ... -o json`, indented 4 spaces) of `Node` objects as the Kubernetes API reference gives
  them (core/v1 Node: `metadata.name`, `metadata.labels`, `spec.providerID`, `status.addresses`
  of types InternalIP / InternalDNS / Hostname, `status.nodeInfo`); `providerID` in the AWS cloud
  provider's form `aws:///<zone>/<instance id>`; the EKS label `topology.k8s.aws/ultraserver-id`
  and the well-known labels `kubernetes.io/hostname`, `node.kubernetes.io/instance-type`,
  `topology.kubernetes.io/zone`.
- scontrol: one line per record, the statements of SchedMD/slurm
  `src/plugins/topology/block/topology_block.c` `_print_topo_record` (`"%s=%s BlockIndex=%u"` with
  `BlockName` or `AggregatedBlock`, `" Nodes=%s"`, `" BlockSize=%u"`) and
  `src/plugins/topology/tree/topology_tree.c` `_print_topo_record` (`"SwitchName=%s Level=%u
  LinkSpeed=%u"`, `" Nodes=%s"`, `" Switches=%s"`).
"""

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class K8sNode:
    name: str  # ip-10-0-1-17.us-east-2.compute.internal
    instance_id: str
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
                    "uid": f"5d0b7c1e-0000-4000-8000-{n.instance_id[-12:]:0>12}",
                },
                "spec": {"providerID": f"aws:///{n.zone}/{n.instance_id}"},
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
