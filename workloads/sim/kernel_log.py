"""The simulated fleet's kernel log: Neuron lines in the layouts of the public documents they copy.

Messages (the text the kernel logs), each with the exact statement of its source:

- `hw_error_message`: aws-neuron/aws-neuron-sdk `neuron-runtime/nrt-troubleshoot.rst`, "Hardware
  Errors": `NEURON_HW_ERR=SRAM_UNCORRECTABLE_ERROR instance-id=i-0592464924bd45322
  hostname=ip-172-31-61-252 nd-id=0 nc-id=0 serial-num=19fcda00f5ff6eb9 action=TERMINATE_INSTANCE`
  (the fields in that order, space separated, on one line).
- `driver_message`: the same guide, "EFA Kernel messages (dmesg) after process termination":
  `neuron:npid_detach: neuron:npid_detach: pid=90193, slot=0` as the driver prints it (its
  `pr_fmt` is `"%s:%s: "` of module and function, aws-neuron-driver `neuron_pid.c`).

Lines (how a tool shows a message), each checked against the real tool in tests/test_kernel_log.py:

- `short_iso_line`: `journalctl -o short-iso` (systemd 252: `2026-12-02T15:55:39+0000 host kernel: MSG`);
- `dmesg_line`: `dmesg` (util-linux: `[  298850.502143] MSG`, seconds since boot, 5.6 wide at least).
"""

import hashlib
import time

from trnwatch.workloads.sim.fleet import SimHost
from trnwatch.workloads.sim.scenarios import HW_ERROR_TICK, fault_site, fault_ultraserver

HW_ERROR_TYPE = "SRAM_UNCORRECTABLE_ERROR"  # the guide's example, and a type the problem detector matches
HW_ERROR_ACTION = "TERMINATE_INSTANCE"


def hw_error_message(
    error_type: str, instance_id: str, hostname: str, device: int, core: int, serial: str, action: str
) -> str:
    return (
        f"NEURON_HW_ERR={error_type} instance-id={instance_id} hostname={hostname} nd-id={device} "
        f"nc-id={core} serial-num={serial} action={action}"
    )


def guide_example_message(device: int = 0, core: int = 0) -> str:
    """The guide's example line as it prints it (its instance, hostname, serial number and
    action), on `device` and `core`."""
    return hw_error_message(
        HW_ERROR_TYPE, "i-0592464924bd45322", "ip-172-31-61-252", device, core, "19fcda00f5ff6eb9", HW_ERROR_ACTION
    )


def driver_message(pid: int, slot: int) -> str:
    return f"neuron:npid_detach: neuron:npid_detach: pid={pid}, slot={slot}"


def short_iso_line(t_s: float, hostname: str, message: str) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime(t_s)) + f" {hostname} kernel: {message}"


def dmesg_line(uptime_s: float, message: str) -> str:
    seconds = int(uptime_s)
    micros = int(round((uptime_s - seconds) * 1e6))
    return f"[{seconds:5d}.{micros:06d}] {message}"


def serial_number(host: SimHost, device: int) -> str:
    """The device's serial number (16 hex digits, as `info/serial_number` in sysfs)."""
    key = f"{host.topology.name}/{host.seed}/{host.host_index}/{device}/serial"
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def host_kernel_messages(host: SimHost, tick: int) -> list[str]:
    """The Neuron kernel messages `host` logs during `tick`: in the hw-error scenario, at
    HW_ERROR_TICK on the fault site's host, the hardware error on (its chip, core 0) and the
    driver's detach of the dead runtime's process."""
    fault_host, fault_chip = fault_site(host.topology)
    at_fault = host.ultraserver == fault_ultraserver(host.scenario) and host.host_index == fault_host
    if host.scenario != "hw-error" or not at_fault or tick != HW_ERROR_TICK:
        return []
    error = hw_error_message(
        HW_ERROR_TYPE,
        host.instance_id,
        host.instance_name,
        fault_chip,
        0,
        serial_number(host, fault_chip),
        HW_ERROR_ACTION,
    )
    return [error, driver_message(host.runtime_pid(fault_chip), fault_chip)]
