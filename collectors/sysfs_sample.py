"""A sysfs sample line (`trnwatch.sysfs/1`, written by collectors/sysfs_reader.py) as typed records: pure,
no I/O, so the ledger and the decoders load it alone. What each value is: collectors/sysfs.py."""

import json
from dataclasses import dataclass, field

from trnwatch.collectors.sysfs_reader import (
    EFA_COUNTERS,
    MAX_DEVICES,
    MAX_EFA_PORTS,
    MAX_SKIPPED,
    MAX_VALUE_CHARS,
    SCHEMA,
)

MAX_COUNTER = (1 << 64) - 1
SSH_SOURCE_PREFIX = "sysfs:"  # + a host's label: its sysfs over the SSH fan-out (collectors/sysfs.py)


class SysfsRejected(ValueError):
    """A sysfs line that cannot be used; the message says why."""


@dataclass(frozen=True, slots=True)
class DevicePower:
    """`power/utilization`: the last minute's power as a share of the device's maximum."""

    status: str  # POWER_STATUS_VALID, POWER_STATUS_NO_DATA, POWER_STATUS_INVALID
    at_s: int | None
    min_pct: float | None
    max_pct: float | None
    avg_pct: float | None


@dataclass(frozen=True, slots=True)
class DeviceHealth:
    power: DevicePower | None  # None: the node is absent (unavailable)
    unhealthy_components: str | None  # None: the node is absent; "": none unhealthy


def _hex_id(text: str | None) -> str | None:
    """A `%016llx` id as read, lower case; None when it is no such id."""
    if text is None or not (0 < len(text) <= 16 and all(c in "0123456789abcdef" for c in text.lower())):
        return None
    return text.lower()


@dataclass(frozen=True, slots=True)
class UltraServerNodes:
    """The `class/neuron_device` UltraServer nodes of a host, as read (None: the node is absent).

    Trn3 (trn3pds): `reservation_id` is `%016llx` of the pod's serial number, all zeros when the
    host is in no UltraServer (or its election is under way); `node_id` is the host's place in it,
    `-1` when in none, `busy` during the election. Trn2 (trn2u): the same pair per multi-node mode,
    `server_id_4` / `node_id_4` (the 4-node UltraServer; all zeros and `-1` unless the pod has 4
    nodes) and `server_id_2` / `node_id_2` (the 2-node pair the host is in, in either 2-node mode).
    `ultraserver_mode` lists the supported modes (`1,2,4`: X4, X2H, X1; `busy` during the election),
    empty on a host that is no UltraServer node (aws-neuron-driver@fca19f7 `neuron_cdev.c` class
    attributes, `v3/neuron_pelect.c` `npe_class_*_show_data` and `npe_get_modal_*`; the leaves as
    aws-neuron-sdk@81ce03a `src/k8/k8s-ultraserver-init-script.sh` reads them)."""

    reservation_id: str | None
    node_id: str | None
    ultraserver_mode: str | None
    server_id_4: str | None = None
    node_id_4: str | None = None
    server_id_2: str | None = None
    node_id_2: str | None = None

    @property
    def membership(self) -> tuple[str | None, str, str]:
        """(UltraServer id, what the nodes say, where in it the host is): ("<id>", "member",
        "node 2"; on Trn2 "node 1 of 4 (server_id_4)"), (None, "none", "") when the driver says the
        host is in no UltraServer, (None, "busy", "") during an election, (None, "unreadable", "")
        for a value it does not write, (None, "absent", "") without the nodes."""
        if self.node_id == "busy" or self.ultraserver_mode == "busy":
            return None, "busy", ""
        if self.reservation_id is not None:  # Trn3's form
            rid = _hex_id(self.reservation_id)
            if rid is None:
                return None, "unreadable", ""
            if int(rid, 16) == 0 or self.node_id == "-1":
                return None, "none", ""
            return rid, "member", f"node {self.node_id}"
        # Trn2's form: the 4-node UltraServer, else the 2-node pair.
        trn2 = ((4, self.server_id_4, self.node_id_4), (2, self.server_id_2, self.node_id_2))
        read = [(n, sid, node) for n, sid, node in trn2 if sid is not None]
        if not read:
            return None, "absent", ""
        if any(node == "busy" for _, _, node in trn2):
            return None, "busy", ""
        for n, sid, node in read:
            us = _hex_id(sid)
            if us is None:
                return None, "unreadable", ""
            if int(us, 16) and node not in (None, "-1"):
                return us, "member", f"node {node} of {n} (server_id_{n})"
        return None, "none", ""


@dataclass(frozen=True, slots=True)
class SysfsSample:
    instance_id: str | None
    devices: dict[int, DeviceHealth] = field(default_factory=dict)
    efa: dict[str, dict[str, int]] = field(default_factory=dict)  # "<dev>:<port>" -> counter -> value
    ultraserver: UltraServerNodes | None = None  # None: no class/neuron_device UltraServer node
    # Leaves left unread, path -> what they are (a FIFO, a device: sysfs_reader.py `_read`).
    skipped: dict[str, str] = field(default_factory=dict)


def _pct(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if 0.0 <= value <= 100.0 else None


def parse_power(text: str) -> DevicePower:
    """`<status>,<epoch_s>,<min%>,<max%>,<avg%>`; a field that does not read is unknown."""
    parts = [p.strip() for p in text.split(",")]
    parts += [""] * (5 - len(parts))
    at = int(parts[1]) if parts[1].isdigit() else None
    return DevicePower(parts[0][:40] or "unknown", at, _pct(parts[2]), _pct(parts[3]), _pct(parts[4]))


def decode_sysfs(text: str) -> SysfsSample:
    """The typed sample of one sampler line; `SysfsRejected` when it is not one."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SysfsRejected(f"not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("v") != SCHEMA:
        raise SysfsRejected(f"not a {SCHEMA} line")
    devices: dict[int, DeviceHealth] = {}
    for key, leaves in (data.get("devices") or {}).items():
        if not (isinstance(key, str) and key.isdigit() and int(key) < MAX_DEVICES and isinstance(leaves, dict)):
            continue
        power, unhealthy = leaves.get("utilization"), leaves.get("unhealthy_components")
        devices[int(key)] = DeviceHealth(
            parse_power(power) if isinstance(power, str) else None,
            unhealthy[:MAX_VALUE_CHARS] if isinstance(unhealthy, str) else None,
        )
    efa: dict[str, dict[str, int]] = {}
    for port, counters in list((data.get("efa") or {}).items())[:MAX_EFA_PORTS]:
        if isinstance(port, str) and isinstance(counters, dict):
            efa[port[:80]] = {
                k: v
                for k, v in counters.items()
                if k in EFA_COUNTERS and isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_COUNTER
            }
    instance_id = data.get("instance_id")
    skipped = data.get("skipped")
    return SysfsSample(
        instance_id[:80] if isinstance(instance_id, str) and instance_id else None,
        devices,
        efa,
        _ultraserver_nodes(data.get("ultraserver")),
        {
            path[:MAX_VALUE_CHARS]: why[:MAX_VALUE_CHARS]
            for path, why in list(skipped.items())[:MAX_SKIPPED]
            if isinstance(path, str) and isinstance(why, str)
        }
        if isinstance(skipped, dict)
        else {},
    )


def _ultraserver_nodes(leaves: object) -> UltraServerNodes | None:
    if not isinstance(leaves, dict) or not leaves:
        return None

    def leaf(name: str) -> str | None:
        value = leaves.get(name)
        return value[:MAX_VALUE_CHARS] if isinstance(value, str) else None

    return UltraServerNodes(
        leaf("reservation_id"),
        leaf("node_id"),
        leaf("ultraserver_mode"),
        leaf("server_id_4"),
        leaf("node_id_4"),
        leaf("server_id_2"),
        leaf("node_id_2"),
    )


def remote_source_id(label: str) -> str:
    """The source id of the sysfs samples of the fan-out's host `label`."""
    return SSH_SOURCE_PREFIX + label
