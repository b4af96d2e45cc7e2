"""Neuron runtime and kernel lines as the public sources print them, with real time and pid
(the runtime does not run here: no Trainium). Each function names the file whose layout it follows.

The runtime's log line (neuron-runtime/nrt-troubleshoot.rst, neuron-runtime/explore/device-memory.rst,
aws-neuron-sdk issues #1014 and #1019): `<YYYY-Mon-DD HH:MM:SS.ffffff> <pid>:<tid> <level right-aligned
in 5>  <COMPONENT:function left-aligned in 45><message>`; continuation lines have no prefix.
"""

import os
import threading
import time
from datetime import datetime


def runtime_line(level: str, where: str, message: str, ts: float | None = None) -> str:
    stamp = datetime.fromtimestamp(time.time() if ts is None else ts).strftime("%Y-%b-%d %H:%M:%S.%f")
    return f"{stamp} {os.getpid()}:{threading.get_native_id()} {level:>5}  {where:<45}{message}"


def device_oom_2_23(size: str, usage: str, nd: int, nc: int) -> list[str]:
    """A device OOM as Neuron 2.23+ reports it (aws-neuron/aws-neuron-sdk
    neuron-runtime/explore/device-memory.rst, "Out-of-memory (OOM) Errors"), table shortened to
    its header and one row per level as the file shows them."""
    return [
        runtime_line(
            "ERROR",
            "TDRV:print_lnc_hbm_details",
            f"LNC size is 1. Neuron Cores using this HBM: NC {nc} and NC {nc + 1}",
        ),
        runtime_line(
            "ERROR",
            "TDRV:log_dev_mem",
            f"Failed to allocate {size} (alignment: none, usage: {usage}) on ND {nd}:NC {nc}",
        ),
        runtime_line("ERROR", "TDRV:log_dev_mem_usage_table", "Displaying Current Memory Utilization:"),
        "(NOTE: the lines are LONG, and NEFF id to name mapping is printed after)",
        "",
        "              |          |  Model   |  Model   |          |  Shared  |",
        "              |  TOTAL   |   Code   |Constants | Tensors  |Scratchpad|",
        f"ND {nd} Overall  | 20.188GB |192.102MB | 82.344KB | 20.000GB |  0.000B  |",
        f"\\_NC {nc}        | 20.094GB | 96.065MB | 58.344KB | 20.000GB |  0.000B  |",
    ]


def device_oom_2_20(size: str, usage: str, nd: int, nc: int) -> list[str]:
    """A device OOM as the runtime of late 2024 reports it (aws-neuron/aws-neuron-sdk issue #1014:
    `TDRV:log_dev_mem Failed to allocate 172.000MB (usage: tensors) on ND 0:NC 0, current
    utilization:`), with the `* <category>: <size>` lines under it as issue #1019 shows the same
    function's INFO form."""
    return [
        runtime_line(
            "ERROR",
            "TDRV:log_dev_mem",
            f"Failed to allocate {size} (usage: {usage}) on ND {nd}:NC {nc}, current utilization:",
        ),
        "        * total: 15.938GB",
        f"        * {usage}: 15.938GB",
    ]


def hardware_error(kind: str, nd: int, nc: int, action: str) -> str:
    """The kernel's hardware-error line (aws-neuron/aws-neuron-sdk neuron-runtime/nrt-troubleshoot.rst:
    `NEURON_HW_ERR=SRAM_UNCORRECTABLE_ERROR instance-id=i-0592464924bd45322 hostname=ip-172-31-61-252
    nd-id=0 nc-id=0 serial-num=19fcda00f5ff6eb9 action=TERMINATE_INSTANCE`)."""
    return (
        f"NEURON_HW_ERR={kind} instance-id=i-0592464924bd45322 hostname=ip-172-31-61-252 "
        f"nd-id={nd} nc-id={nc} serial-num=19fcda00f5ff6eb9 action={action}"
    )
