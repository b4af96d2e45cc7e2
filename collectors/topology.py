"""UltraServer membership as a scheduler knows it: the `topology` line and its record (pure).

collectors/topology_source.py runs the command once, parses its output and writes one
`trnwatch.topology/1` line of what it answered (so a recording replays it); the decoder here
types it as a `TopologyAnswer`. The parsers there read the public formats:

- Kubernetes (`kubectl get nodes -o json`): a `NodeList` of `Node` objects (Kubernetes API,
  core/v1). A node carrying the EKS label `topology.k8s.aws/ultraserver-id` is in that
  UltraServer; it is named by `metadata.name`, by the instance id at the end of
  `spec.providerID` (`aws:///<zone>/<instance id>`, the AWS cloud provider's form) and by its
  `Hostname` / `InternalDNS` / `InternalIP` addresses (collectors/kubernetes.py `node_identity`),
  so it joins the host neuron-monitor names by any of them.
  A node without the label says nothing (the label may simply not be applied).
- Slurm (`scontrol show topology` with the topology/block plugin): one line per block,
  `BlockName=<name> BlockIndex=<n> Nodes=<hostlist> BlockSize=<n>` (SchedMD/slurm
  `src/plugins/topology/block/topology_block.c`, `_print_topo_record`). A base block is taken
  as one UltraServer (the block plugin's purpose: a domain of fast interconnect); an
  `AggregatedBlock=` line groups blocks and is not one. The tree plugin's `SwitchName=` lines
  describe switches, not UltraServers, and are ignored.
"""

import json
from dataclasses import dataclass, field
from typing import Literal

SCHEMA = "trnwatch.topology/1"
Origin = Literal["kubernetes", "slurm"]
ORIGINS: tuple[Origin, ...] = ("kubernetes", "slurm")
# Bounds: names and ids past these are cut; members past MAX_MEMBERS are dropped and counted.
MAX_NAME_CHARS = 253  # a DNS name's longest
MAX_MEMBERS = 16_384


class TopologyRejected(ValueError):
    """An answer that cannot be used; the message says why."""


@dataclass(frozen=True, slots=True)
class TopologyAnswer:
    """What one scheduler said: host name (node name, instance id, DNS name) -> UltraServer id."""

    origin: Origin
    command: str
    members: dict[str, str] = field(default_factory=dict)
    dropped: int = 0  # names past MAX_MEMBERS or unreadable


def name_or_none(value: object) -> str | None:
    if isinstance(value, str) and value and value.isprintable() and len(value) <= MAX_NAME_CHARS:
        return value
    return None


def topology_line(origin: Origin, command: str, members: dict[str, str], dropped: int) -> str:
    return json.dumps(
        {"v": SCHEMA, "origin": origin, "command": command, "members": members, "dropped": dropped},
        separators=(",", ":"),
        sort_keys=True,
    )


def decode_topology(text: str) -> TopologyAnswer:
    """The typed answer of one `topology` line; `TopologyRejected` when it is not one."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise TopologyRejected(f"not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("v") != SCHEMA:
        raise TopologyRejected(f"not a {SCHEMA} line")
    origin, raw = data.get("origin"), data.get("members")
    if origin not in ORIGINS or not isinstance(raw, dict):
        raise TopologyRejected(f"no origin of {ORIGINS} or no members")
    members = {k: v for k, v in list(raw.items())[:MAX_MEMBERS] if name_or_none(k) and name_or_none(v)}
    dropped = data.get("dropped")
    command = data.get("command")
    return TopologyAnswer(
        origin,
        command[:200] if isinstance(command, str) else "",
        members,
        (dropped if isinstance(dropped, int) and dropped >= 0 else 0) + len(raw) - len(members),
    )
