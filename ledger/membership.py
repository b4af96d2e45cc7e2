"""Which UltraServer a host is in, and who said so: pure, no I/O.

Asked in this order, the first that answers wins (issue 23):

1. `config`: the `--ultraservers` file or the hosts file's column (by host id or stream label);
   it overrides all.
2. `kubernetes`: the node label `topology.k8s.aws/ultraserver-id` (`kubectl get nodes -o json`),
   by host id, stream label or instance name.
3. `sysfs`: the host's own `class/neuron_device/reservation_id` and `node_id` (Trn3), or
   `server_id_4` / `node_id_4`, else `server_id_2` / `node_id_2` (Trn2 UltraServers); a driver that
   says the host is in no UltraServer (all-zero id, node -1) is an answer too: "in none".
4. `slurm`: the block `scontrol show topology` puts the node in.
5. `report`: `instance_info.ultraserver_id` in the host's neuron-monitor reports.

Nothing is guessed from names or indices: a host none of them places is in no UltraServer, and
the receipt says which source (if any) said so.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from trnwatch.collectors.topology import Origin, TopologyAnswer
from trnwatch.ledger.hosts import HostState
from trnwatch.ledger.sysfs_host import HostSysfs

MembershipOrigin = Literal["config", "kubernetes", "sysfs", "slurm", "report"]


@dataclass(frozen=True, slots=True)
class Membership:
    ultraserver: str | None
    origin: MembershipOrigin | None  # None: no source placed the host, nor said it is in none
    detail: str = ""


NOT_PLACED = Membership(None, None)


def _names(host: HostState) -> tuple[str, ...]:
    return tuple(n for n in (host.host_id, host.source_id, host.instance_name) if n)


def _from_scheduler(answer: TopologyAnswer | None, host: HostState) -> str | None:
    if answer is None:
        return None
    return next((answer.members[n] for n in _names(host) if n in answer.members), None)


def membership_of(
    host: HostState,
    overrides: Mapping[str, str],
    discovered: Mapping[Origin, TopologyAnswer],
    sysfs: Mapping[str, HostSysfs],
) -> Membership:
    """The first answer, in the order above, for `host`."""
    configured = overrides.get(host.host_id) or overrides.get(host.source_id)
    if configured:
        return Membership(configured, "config")
    if us := _from_scheduler(discovered.get("kubernetes"), host):
        return Membership(us, "kubernetes")
    nodes = sysfs[host.host_id].ultraserver if host.host_id in sysfs else None
    if nodes is not None:
        us, said, where = nodes.membership
        if said == "member":
            return Membership(us, "sysfs", where)
        if said == "none":
            return Membership(None, "sysfs", "in no UltraServer")
    if us := _from_scheduler(discovered.get("slurm"), host):
        return Membership(us, "slurm")
    if host.ultraserver_reported:
        return Membership(host.ultraserver_reported, "report")
    return NOT_PLACED
