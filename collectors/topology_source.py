"""Ask a scheduler once which UltraServer each node is in: one `topology` line (collectors/topology.py
says what the formats are and where they are documented).

`kubectl get nodes -o json` (needs kubectl and a kubeconfig whose user may list nodes) and
`scontrol show topology` (needs the Slurm client on a cluster with the topology/block plugin) run
once, at the start: membership does not change during a run. The output is read whole (up to
MAX_OUTPUT_BYTES), parsed, and written as one line; a command that cannot start, fails or times
out ends the source with its own words, and the other sources go on.
"""

import asyncio
import json
import time
from collections.abc import AsyncIterator

from trnwatch.collectors.hostlist import HostlistError, HostNameError, expand_hostlist
from trnwatch.collectors.kubernetes import node_identity
from trnwatch.collectors.lines import Line, LineKind
from trnwatch.collectors.streams import SourceLost
from trnwatch.collectors.topology import MAX_MEMBERS, Origin, TopologyRejected, name_or_none, topology_line

KIND: LineKind = "topology"
COMMANDS: dict[Origin, list[str]] = {
    "kubernetes": ["kubectl", "get", "nodes", "-o", "json"],
    "slurm": ["scontrol", "show", "topology"],
}
MAX_OUTPUT_BYTES = 64 << 20
TIMEOUT_S = 60.0
K8S_LABEL = "topology.k8s.aws/ultraserver-id"


def kubernetes_members(text: str) -> tuple[dict[str, str], int]:
    """(name -> UltraServer id, names dropped) from `kubectl get nodes -o json`'s output."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise TopologyRejected(f"kubectl output is not JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("items"), list):
        raise TopologyRejected("kubectl output is not a list of nodes (no 'items')")
    members: dict[str, str] = {}
    dropped = 0
    for node in data["items"]:
        meta = node.get("metadata") if isinstance(node, dict) else None
        labels = meta.get("labels") if isinstance(meta, dict) else None
        ultraserver = name_or_none(labels.get(K8S_LABEL)) if isinstance(labels, dict) else None
        if ultraserver is None:
            continue
        name, instance, addresses = node_identity(node)
        for known in (n for n in (name, instance, *addresses) if n is not None):
            if len(members) >= MAX_MEMBERS:
                dropped += 1
                continue
            members[known] = ultraserver
    return members, dropped


def slurm_members(text: str) -> tuple[dict[str, str], int]:
    """(node name -> block name, names dropped) from `scontrol show topology`'s output."""
    members: dict[str, str] = {}
    dropped = 0
    for line in text.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        block, nodes = name_or_none(fields.get("BlockName")), fields.get("Nodes")
        if block is None or not nodes:
            continue
        try:
            names = expand_hostlist(nodes)
        except (HostlistError, HostNameError):
            dropped += 1
            continue
        for name in names:
            if len(members) >= MAX_MEMBERS:
                dropped += 1
                continue
            members[name] = block
    return members, dropped


async def _run(argv: list[str]) -> str:
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
    except OSError as exc:
        raise SourceLost(f"cannot start {argv[0]}: {exc.strerror or exc}") from None
    try:
        out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise SourceLost(f"{argv[0]} gave no answer in {TIMEOUT_S:.0f} s") from None
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    if proc.returncode != 0:
        lines = err.decode("utf-8", "replace").strip().splitlines()
        raise SourceLost(f"{argv[0]} exited with status {proc.returncode}: {lines[-1] if lines else 'no message'}")
    if len(out) > MAX_OUTPUT_BYTES:
        raise SourceLost(f"{argv[0]} wrote more than {MAX_OUTPUT_BYTES >> 20} MiB")
    return out.decode("utf-8", "replace")


async def topology_lines(origin: Origin, source_id: str, argv: list[str] | None = None) -> AsyncIterator[Line]:
    """The scheduler's answer, as one line; then the source ends."""
    argv = argv or COMMANDS[origin]
    text = await _run(argv)
    try:
        members, dropped = kubernetes_members(text) if origin == "kubernetes" else slurm_members(text)
    except TopologyRejected as exc:
        raise SourceLost(str(exc)) from None
    yield Line(source_id, KIND, time.time(), topology_line(origin, " ".join(argv), members, dropped))
