"""A host's sysfs as the simulator lays it out: Neuron device nodes, EFA hw_counters, the instance id.

Layouts, each from the document it copies:

- `devices/virtual/neuron_device/neuronN/stats/power/utilization`: `<status>,<epoch_s>,<min>,<max>,<avg>`
  with two decimals (aws-neuron-sdk neuron-sysfs-user-guide.rst, "power/", example
  `POWER_STATUS_VALID,1760913720,41.25,78.90,63.12` in the telemetry reference);
- `.../neuronN/stats/hardware/health_status/unhealthy_components` (driver 2.30.2 and later; where
  driver 2.31 puts it is not published where it could be read: `moved=True` puts both nodes one
  level deeper, under `health/`, as a moved node, which the reader must find by its leaf name);
- `class/infiniband/rdmapNsM/ports/1/hw_counters/<counter>`: a decimal count and a newline (Linux
  efa driver, read by the kernel's rdma core `hw_counters` attribute group);
- `class/neuron_device/{reservation_id,node_id,ultraserver_mode}`: the UltraServer a trn3pds host
  is in, `%016llx`, its node id `%d`, the supported modes `1,2,4` (aws-neuron-driver `neuron_cdev.c`
  class attributes and `npe_class_*_show_data`, each value and a newline; the three leaves as
  aws-neuron-sdk `src/k8/k8s-ultraserver-init-script.sh` reads them);
- `devices/virtual/dmi/id/board_asset_tag`: the instance id (EC2 Nitro instances).
"""

import os
from pathlib import Path


def _write(path: Path, text: str) -> None:
    """Replace the node's content at once, as a sysfs read sees it (never a half-written file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.tmp")
    partial.write_text(text + "\n")
    os.replace(partial, path)


def write_host_tree(
    root: Path,
    instance_id: str | None,
    power: dict[int, tuple[str, int, float, float, float]],
    unhealthy: dict[int, str],
    efa: dict[str, dict[str, int]],
    moved: bool = False,
    ultraserver: tuple[int, int] | None = None,
) -> None:
    """Write (or overwrite) the nodes under `root`: `power` and `unhealthy` per device index,
    `efa` per EFA device name (port 1) with its counters; a device or counter not given is absent.
    `ultraserver`: (pod serial number, node id) in the class directory, (0, -1) for a host in none."""
    if ultraserver is not None:
        serial, node = ultraserver
        write_ultraserver_nodes(root, f"{serial:016x}", str(node), "1,2,4" if serial else "")
    if instance_id is not None:
        _write(root / "devices/virtual/dmi/id/board_asset_tag", instance_id)
    for device in sorted(set(power) | set(unhealthy)):
        base = root / f"devices/virtual/neuron_device/neuron{device}"
        (base / "neuron_core0/stats/status").mkdir(parents=True, exist_ok=True)
        # The device's generic power management node (not Neuron's: the guide says so); no utilization.
        _write(base / "power/runtime_status", "unsupported")
        stats = base / "health" if moved else base / "stats"
        if device in power:
            status, at, low, high, avg = power[device]
            _write(stats / "power/utilization", f"{status},{at},{low:.2f},{high:.2f},{avg:.2f}")
        if device in unhealthy:
            _write(stats / "hardware/health_status/unhealthy_components", unhealthy[device])
    for name, counters in efa.items():
        for counter, value in counters.items():
            _write(root / f"class/infiniband/{name}/ports/1/hw_counters/{counter}", str(value))


def write_ultraserver_nodes(root: Path, reservation_id: str, node_id: str, modes: str) -> None:
    """The class directory's UltraServer leaves, and a device's link in it as the driver has it."""
    base = root / "class/neuron_device"
    _write(base / "reservation_id", reservation_id)
    _write(base / "node_id", node_id)
    _write(base / "ultraserver_mode", modes)
    link = base / "neuron0"
    if not link.is_symlink():
        link.symlink_to("../../devices/virtual/neuron_device/neuron0")


def write_trn2_ultraserver_nodes(
    root: Path, pod_serial: int, node_count: int, node_id: int, modes: str = "1,2,4", *, busy: bool = False
) -> None:
    """The class directory's UltraServer leaves of a trn2u host, as the Trainium2 driver writes them
    (aws-neuron-driver@fca19f7 `neuron_cdev.c` `ncdev_class_attrs`: `node_id_2/4`, `server_id_2/4`,
    `ultraserver_mode`; values from `v3/neuron_pelect.c` `npe_class_*_show_data`, `npe_get_modal_*`):
    the host is node `node_id` of a pod of `node_count` nodes (0: no pod, as a non-UltraServer
    instance shows it) with serial `pod_serial`; `modes` lists the supported modes (X4=1, X2H=2,
    X2V=3, X1=4); `busy`: an election is under way."""
    base = root / "class/neuron_device"
    if busy:
        values = {"node_id_4": "busy", "node_id_2": "busy", "server_id_4": f"{0:016x}", "server_id_2": f"{0:016x}"}
        modes = "busy"
    elif not node_count:
        values = {"node_id_4": "-1", "node_id_2": "-1", "server_id_4": f"{0:016x}", "server_id_2": f"{0:016x}"}
        modes = ""
    else:
        four = node_count == 4
        horizontal = "2" in modes.split(",")  # X2H when supported, else X2V (npe_class_*_show_data)
        pair_node = ((0, 0, 1, 1) if horizontal else (0, 1, 0, 1))[node_id] if four else node_id
        second = ((False, True, False, True) if horizontal else (False, False, True, True))[node_id]
        values = {
            "node_id_4": str(node_id if four else -1),
            "server_id_4": f"{pod_serial if four else 0:016x}",
            "node_id_2": str(pair_node),
            "server_id_2": f"{pod_serial - 1 if four and second else pod_serial:016x}",
        }
    for name, value in values.items():
        _write(base / name, value)
    _write(base / "ultraserver_mode", modes)
