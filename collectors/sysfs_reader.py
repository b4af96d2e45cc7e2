"""Neuron device health and power, EFA counters and UltraServer membership, read from sysfs.

The sampler (`sample_sysfs`) reads files under a root (`/sys`, or a fake tree in tests) and writes
one JSON line of what it found, values as read; the decoder (collectors/sysfs_sample.py, pure)
turns a line into a typed `SysfsSample`. This module uses the standard library only (Python 3.8
and later), so it runs alone: `python3 -c "$(cat sysfs_reader.py)" ROOT PERIOD` prints one sample
per period, which is how a remote host's sysfs is read over SSH (collectors/sysfs.py) without
trnwatch installed there. A node that is absent is absent from the line and from the sample: shown as
unavailable, never as zero. Nodes read, each where it is documented:

- per Neuron device `neuronN` under `devices/virtual/neuron_device/`: `utilization` under a
  `power` directory, `<status>,<epoch_s>,<min%>,<max%>,<avg%>` per minute (aws-neuron-sdk
  `tools/neuron-sys-tools/neuron-sysfs-user-guide.rst`, "power/"); `unhealthy_components` (driver
  2.30.2, Neuron 2.32 release notes; its content is not published where it could be read: kept as
  text, empty meaning none). Driver 2.31 moved nodes (the guide's warning, new paths not
  retrievable), so both are found by leaf name anywhere under the device's directory.
- per EFA device and port: `class/infiniband/<dev>/ports/<port>/hw_counters/<name>`, cumulative
  counts (Linux `drivers/infiniband/hw/efa/efa_verbs.c`, `EFA_DEFINE_PORT_STATS`; newer kernels
  add `rdma_write_*`, `retrans_*`, `unresponsive_remote_events`, `impaired_remote_conn_events`).
- UltraServer membership, found by leaf name under `class/neuron_device/`: on trn3pds (Trn3)
  `{reservation_id,node_id,ultraserver_mode}`; on trn2u (Trn2 UltraServers) one server id and node
  id per multi-node mode, `{server_id_4,node_id_4,server_id_2,node_id_2,ultraserver_mode}` (the
  driver's class attributes, aws-neuron-driver@fca19f7 `neuron_cdev.c` `ncdev_class_attrs`, values
  from `v3/neuron_pelect.c` `npe_class_*_show_data`; both forms as aws-neuron-sdk@81ce03a
  `src/k8/k8s-ultraserver-init-script.sh` reads them: "trn3pds exposes: node_id, reservation_id,
  ultraserver_mode / trn2u exposes: node_id_N, server_id_N, ultraserver_mode"; the Neuron sysfs
  user guide does not list them). What each says: `UltraServerNodes`.
- the instance id, `devices/virtual/dmi/id/board_asset_tag` (on EC2 Nitro instances the instance
  id), which joins the sample to the host neuron-monitor names by the same id.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path

SCHEMA = "trnwatch.sysfs/1"
EFA_COUNTERS = (
    "tx_bytes",
    "rx_bytes",
    "rx_drops",
    "retrans_pkts",
    "retrans_timeout_events",
    "unresponsive_remote_events",
    "impaired_remote_conn_events",
)
MAX_DEVICES = 64
MAX_EFA_PORTS = 64
MAX_VALUE_CHARS = 256

NEURON_DEVICES = Path("devices/virtual/neuron_device")
NEURON_CLASS = Path("class/neuron_device")
INFINIBAND = Path("class/infiniband")
BOARD_ASSET_TAG = Path("devices/virtual/dmi/id/board_asset_tag")
DEVICE_LEAVES = ("utilization", "unhealthy_components")
ULTRASERVER_LEAVES = (
    "reservation_id",
    "node_id",
    "ultraserver_mode",
    "server_id_4",
    "node_id_4",
    "server_id_2",
    "node_id_2",
)
# Bounds: a device directory is walked this deep for its leaves; values past these are dropped.
MAX_WALK_DEPTH = 6


# A leaf that is no regular file (a FIFO, a device, a socket) is never read: sysfs attributes are
# regular files, and a FIFO's open or a device's read may block for ever. Each one met is named in
# the sample's `skipped` (at most this many), which the ledger counts as rejected values.
MAX_SKIPPED = 64
_NOT_REGULAR = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _read(path: Path, skipped: dict[str, str], reading: list[Path]) -> str | None:
    """The leaf's value, at most MAX_VALUE_CHARS; None when absent or unreadable. Opened without
    blocking (O_NONBLOCK: a FIFO's open returns at once) and read only if it is a regular file;
    anything else is left unread and named in `skipped` with what it is. `reading` ends with the
    path being read (whoever waits for a stuck read can name it)."""
    reading[:] = [path]
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            if len(skipped) < MAX_SKIPPED:
                what = next((name for test, name in _NOT_REGULAR if test(mode)), "not a regular file")
                skipped[str(path)] = f"{what}, not a regular file: not read"
            return None
        data = os.read(fd, 4 * (MAX_VALUE_CHARS + 1))
    except OSError:
        return None
    finally:
        os.close(fd)
    return data.decode("utf-8", errors="replace")[:MAX_VALUE_CHARS].strip()


def _find_leaves(base: Path, names: tuple[str, ...], skipped: dict[str, str], reading: list[Path]) -> dict[str, str]:
    """The wanted leaves under `base`, found by name (power's `utilization` only under a directory
    named `power`), the shallowest first; symbolic links (the class directory's `neuronN`) are
    not followed."""
    found: dict[str, str] = {}
    base_depth = len(base.parts)
    for dirpath, dirnames, filenames in os.walk(base):
        here = Path(dirpath)
        if len(here.parts) - base_depth >= MAX_WALK_DEPTH:
            dirnames[:] = []
        dirnames.sort()
        for name in names:
            if name in filenames and name not in found and (name != "utilization" or here.name == "power"):
                value = _read(here / name, skipped, reading)
                if value is not None:
                    found[name] = value
    return found


def sample_sysfs(root: Path, reading: list[Path] | None = None) -> str:
    """One sample of the nodes under `root`, as a JSON line (nodes that are absent are left out);
    `reading`, if given, ends with the path being read while it is read."""
    reading = [] if reading is None else reading
    devices: dict[str, dict[str, str]] = {}
    skipped: dict[str, str] = {}
    neuron = root / NEURON_DEVICES
    names = [p.name for p in neuron.iterdir() if p.name.startswith("neuron")] if neuron.is_dir() else []
    for name in sorted(n for n in names if n[len("neuron") :].isdigit())[:MAX_DEVICES]:
        devices[name[len("neuron") :]] = _find_leaves(neuron / name, DEVICE_LEAVES, skipped, reading)
    efa: dict[str, dict[str, int]] = {}
    ib = root / INFINIBAND
    for counters in sorted(ib.glob("*/ports/*/hw_counters"))[:MAX_EFA_PORTS] if ib.is_dir() else []:
        values = {}
        for name in EFA_COUNTERS:
            text = _read(counters / name, skipped, reading)
            if text is not None and text.isdigit():
                values[name] = int(text)
        efa[f"{counters.parent.parent.parent.name}:{counters.parent.name}"] = values
    sample: dict = {"v": SCHEMA, "devices": devices, "efa": efa}
    ultraserver = _find_leaves(root / NEURON_CLASS, ULTRASERVER_LEAVES, skipped, reading)
    if ultraserver:
        sample["ultraserver"] = ultraserver
    instance_id = _read(root / BOARD_ASSET_TAG, skipped, reading)
    if instance_id:
        sample["instance_id"] = instance_id
    if skipped:
        sample["skipped"] = skipped
    return json.dumps(sample, separators=(",", ":"), sort_keys=True)


def main(argv: list[str]) -> int:
    """`ROOT PERIOD_S`: one sample of ROOT each period on stdout, until stdout closes."""
    try:
        root, period_s = Path(argv[0]), float(argv[1])
    except (IndexError, ValueError):
        print("usage: sysfs_reader ROOT PERIOD_S", file=sys.stderr)
        return 2
    start = time.monotonic()
    tick = 0
    try:
        while True:
            sys.stdout.write(sample_sysfs(root) + "\n")
            sys.stdout.flush()
            tick += 1
            time.sleep(max(0.0, start + tick * period_s - time.monotonic()))
    except (BrokenPipeError, KeyboardInterrupt):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
