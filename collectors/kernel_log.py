"""The Neuron lines of a kernel log: one pure line parser, no I/O.

Read from `journalctl -k -o short-iso` (`2026-12-02T15:55:39+0000 host kernel: MESSAGE`), from
`dmesg` (`[  298850.502143] MESSAGE`), or bare (a job log that echoes the message). The message
is found wherever the line puts it, so the same parser serves the kernel-log source and a job
log's passive profile.

The hardware-error line, as documented in aws-neuron/aws-neuron-sdk
`neuron-runtime/nrt-troubleshoot.rst` ("Hardware Errors": "Upon any hardware errors, you should
also expect to see the error message like the following in dmesg"):

    NEURON_HW_ERR=SRAM_UNCORRECTABLE_ERROR instance-id=i-0592464924bd45322 hostname=ip-172-31-61-252
        nd-id=0 nc-id=0 serial-num=19fcda00f5ff6eb9 action=TERMINATE_INSTANCE   (one line)

The runtime hands that text to the driver, which prints it as is (`printk(KERN_ERR "%s\\n", str)`,
aws-neuron-driver `neuron_cdev.c`, `ncdev_printk`). The types the Neuron problem detector matches
(aws-neuron-sdk `src/k8/neuron-problem-detector/k8s-neuron-problem-detector-and-recovery-config.yml`):
SRAM_UNCORRECTABLE_ERROR, NC_UNCORRECTABLE_ERROR, HBM_UNCORRECTABLE_ERROR, DMA_ERROR; the parser
keeps any type as data. Every other driver line starts with the module's `pr_fmt`
(`neuron:<function>: `, e.g. `neuron:npid_detach: pid=90193, slot=0` in the same guide) or is the
driver's start line (`Neuron Driver Started with Version:...`): counted, not shown.
"""

import re
from dataclasses import dataclass

HW_ERR_TOKEN = "NEURON_HW_ERR="
SSH_SOURCE_PREFIX = "kernel-log:"  # + a host's label: its kernel log over the SSH fan-out (kernel_source.py)
# Lengths kept of outside strings (kept as data; every output cleans them): a type, an id, an
# action are short; a line is bounded.
MAX_FIELD_CHARS = 80
MAX_LINE_CHARS = 400
# The driver's own lines: its pr_fmt prefix, or its start line, at the start of the message.
_DRIVER_LINE = re.compile(r"(?:^|\]\s*|\bkernel:\s*)(?:neuron:[A-Za-z0-9_]+:|Neuron Driver Started)")
# A journalctl short-iso line: time, host, identifier; what follows is the message.
_SHORT_ISO = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:[+-]\d\d:?\d\d|Z)?) \S+ kernel: ")
_DMESG = re.compile(r"^\[\s*(\d+\.\d+)\] ")
_CONTINUATION = re.compile(r"^[ \t]+\S")


@dataclass(frozen=True, slots=True)
class HardwareError:
    """One `NEURON_HW_ERR=` line: the error and where the runtime says it happened."""

    error_type: str  # e.g. SRAM_UNCORRECTABLE_ERROR
    device: int | None  # nd-id: the Neuron device (chip) index on its host
    core: int | None  # nc-id: the NeuronCore as the line numbers it (within the device or on the host: undocumented)
    instance_id: str | None
    hostname: str | None
    serial_number: str | None
    action: str | None  # e.g. TERMINATE_INSTANCE
    logged_at: str | None  # the log's own time: journalctl's ISO time, or dmesg's seconds since boot
    message: str  # the line from the token on, bounded (data: outputs clean it, as every outside string)


@dataclass(frozen=True, slots=True)
class DriverLine:
    """Another line of the Neuron driver: counted against its source, not shown."""


@dataclass(frozen=True, slots=True)
class OtherLine:
    """A kernel line that is not the Neuron driver's: it says the log is being read, nothing more."""


KernelRecord = HardwareError | DriverLine | OtherLine


def _field(value: str | None) -> str | None:
    if value is None:
        return None
    return value[:MAX_FIELD_CHARS] or None


def _index(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() and len(value) <= 6 else None


def in_kernel_log_layout(text: str) -> bool:
    """Whether a line is one a kernel-log source writes: journalctl's short-iso (`-- ` lines
    included, journalctl's own notes such as `-- No entries --`), dmesg's, a continuation line of a
    multi-line kernel record (dmesg and journalctl indent them, with no timestamp: the memory
    summary of an out-of-memory report is one), or a bare Neuron line."""
    return bool(
        _CONTINUATION.match(text)
        or _SHORT_ISO.match(text)
        or _DMESG.match(text)
        or text.startswith("-- ")
        or HW_ERR_TOKEN in text
        or _DRIVER_LINE.search(text)
    )


def parse_kernel_line(text: str) -> KernelRecord:
    """The record of one kernel-log line: a hardware error, another Neuron driver line, or
    another line. Never raises: a hardware-error line with a malformed field keeps the rest."""
    at = text.find(HW_ERR_TOKEN)
    if at < 0:
        return DriverLine() if _DRIVER_LINE.search(text) else OtherLine()
    iso, dmesg = _SHORT_ISO.match(text), _DMESG.match(text)
    logged_at = iso.group(1) if iso else dmesg.group(1) if dmesg else None
    message = text[at:].rstrip("\r\n")
    fields: dict[str, str] = {}
    for token in message.split():
        key, sep, value = token.partition("=")
        if sep and key not in fields:
            fields[key] = value
    return HardwareError(
        error_type=_field(fields.get("NEURON_HW_ERR")) or "unknown",
        device=_index(fields.get("nd-id")),
        core=_index(fields.get("nc-id")),
        instance_id=_field(fields.get("instance-id")),
        hostname=_field(fields.get("hostname")),
        serial_number=_field(fields.get("serial-num")),
        action=_field(fields.get("action")),
        logged_at=logged_at,
        message=message[:MAX_LINE_CHARS],
    )


def remote_source_id(label: str) -> str:
    """The source id of the kernel log of the fan-out's host `label`."""
    return SSH_SOURCE_PREFIX + label


def remote_host_label(source_id: str) -> str | None:
    """The fan-out label of the host whose kernel log a source reads over SSH (None: another source)."""
    return source_id[len(SSH_SOURCE_PREFIX) :] if source_id.startswith(SSH_SOURCE_PREFIX) else None
