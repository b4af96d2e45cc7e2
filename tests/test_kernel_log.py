"""The kernel-log source: NEURON_HW_ERR lines as the real journalctl and dmesg show them.

The messages come from the simulator's generator (workloads/sim/kernel_log.py), which prints the
exact layouts of aws-neuron-sdk's nrt-troubleshoot.rst; the lines around them are made by the real
tools: `dmesg -F` renders a raw kernel buffer file, and `journalctl --file` renders a journal that
`systemd-journal-remote` wrote from journal export entries (tests/kernel_journal.py).
"""

import shutil
import subprocess
from pathlib import Path

import pytest

from trnwatch.collectors.kernel_log import DriverLine, HardwareError, OtherLine, parse_kernel_line
from trnwatch.collectors.lines import Line
from trnwatch.ledger.findings import finding_text
from trnwatch.ledger.ledger import Ledger
from trnwatch.ledger.receipt import build_receipt
from trnwatch.ledger.receipt_markdown import render_markdown
from trnwatch.workloads.sim.kernel_log import (
    dmesg_line,
    driver_message,
    guide_example_message,
    hw_error_message,
    short_iso_line,
)
from tests import reports
from tests.kernel_journal import JOURNAL_REMOTE, write_kernel_journal

DOC_ERROR = guide_example_message()
T0 = 1_764_700_000.0


def test_generator_prints_the_guides_example_line_exactly():
    # nrt-troubleshoot.rst, "Hardware Errors": the one example line, with its fields in order.
    assert DOC_ERROR == (
        "NEURON_HW_ERR=SRAM_UNCORRECTABLE_ERROR instance-id=i-0592464924bd45322 hostname=ip-172-31-61-252 "
        "nd-id=0 nc-id=0 serial-num=19fcda00f5ff6eb9 action=TERMINATE_INSTANCE"
    )


def _hw_error(text: str) -> HardwareError:
    record = parse_kernel_line(text)
    assert isinstance(record, HardwareError), text
    return record


def test_hardware_error_fields_from_the_documented_line():
    e = _hw_error(DOC_ERROR)
    assert (e.error_type, e.device, e.core, e.instance_id, e.hostname, e.serial_number, e.action) == (
        "SRAM_UNCORRECTABLE_ERROR",
        0,
        0,
        "i-0592464924bd45322",
        "ip-172-31-61-252",
        "19fcda00f5ff6eb9",
        "TERMINATE_INSTANCE",
    )


@pytest.mark.skipif(shutil.which("dmesg") is None, reason="util-linux dmesg not installed")
def test_dmesg_rendering_of_a_raw_buffer_is_parsed(tmp_path):
    # A raw kernel buffer (`<level>[seconds.micros] message`), as `dmesg -F` reads it.
    raw = tmp_path / "kmsg.raw"
    messages = [(3, 298850.502143, hw_error_message("HBM_UNCORRECTABLE_ERROR", "i-0a", "trn3-a07", 3, 5, "ab", "X"))]
    messages += [(6, 298850.919248, driver_message(90193, 0)), (6, 298851.0, "efa 0000:a0:1a.0 rdmap160s26: up")]
    raw.write_text("".join(f"<{lvl}>[{t:.6f}] {msg}\n" for lvl, t, msg in messages))
    out = subprocess.run(["dmesg", "-F", str(raw)], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out == [dmesg_line(t, msg) for _, t, msg in messages]  # the generator's layout is dmesg's
    records = [parse_kernel_line(line) for line in out]
    assert isinstance(records[1], DriverLine) and isinstance(records[2], OtherLine)
    e = records[0]
    assert isinstance(e, HardwareError)
    assert (e.error_type, e.device, e.core, e.logged_at) == ("HBM_UNCORRECTABLE_ERROR", 3, 5, "298850.502143")


@pytest.mark.skipif(
    not JOURNAL_REMOTE.exists() or shutil.which("journalctl") is None,
    reason="journalctl and systemd-journal-remote (apt: systemd-journal-remote) not installed",
)
def test_journalctl_short_iso_rendering_is_parsed(tmp_path):
    entries = [(T0, 3, DOC_ERROR), (T0 + 1, 6, driver_message(90193, 0)), (T0 + 2, 6, "EXT4-fs (nvme0n1p1): mounted")]
    journal = tmp_path / "kernel.journal"
    write_kernel_journal(journal, entries, "trn3-a07")
    out = subprocess.run(
        ["journalctl", "--file", str(journal), "-k", "-o", "short-iso", "--no-pager", "--utc"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert out == [short_iso_line(t, "trn3-a07", msg) for t, _, msg in entries]
    records = [parse_kernel_line(line) for line in out]
    assert [type(r) for r in records] == [HardwareError, DriverLine, OtherLine]
    assert _hw_error(out[0]).logged_at == short_iso_line(T0, "h", "m").split(" ")[0]


def test_a_malformed_field_costs_that_field_only():
    e = _hw_error("job: NEURON_HW_ERR=DMA_ERROR nd-id=x nc-id=99999999 action=")
    assert (e.error_type, e.device, e.core, e.action, e.instance_id) == ("DMA_ERROR", None, None, None, None)
    assert _hw_error("NEURON_HW_ERR= nd-id=1").error_type == "unknown"


def _report(chips: int = 2) -> str:
    return reports.line(
        reports.report(
            [],
            hardware=reports.hardware_trn3(chips=chips),
            system_data=reports.system(chips=chips),
            instance_info=reports.instance("i-0a"),
        )
    )


def _ledger_with_host_and_error(message: str) -> Ledger:
    ledger = Ledger("live")
    ledger.ingest(Line("trn3-a07", "neuron-monitor", T0, _report(chips=4)))
    ledger.ingest(Line("kernel-log", "kernel-log", T0 + 1, short_iso_line(T0 + 1, "trn3-a07", message)))
    ledger.ingest(Line("kernel-log", "kernel-log", T0 + 1.5, short_iso_line(T0 + 1, "trn3-a07", driver_message(1, 0))))
    return ledger


def test_hardware_error_is_a_critical_finding_on_its_chip_naming_its_core():
    message = hw_error_message("NC_UNCORRECTABLE_ERROR", "i-0a", "trn3-a07", 2, 1, "ff", "TERMINATE_INSTANCE")
    ledger = _ledger_with_host_and_error(message)
    top = list(ledger.read(T0 + 2).findings)[0]
    assert (top.severity, top.kind, top.site.host_id, top.site.chip) == ("critical", "hw-error", "i-0a", 2)
    assert "NEURON_HW_ERR=NC_UNCORRECTABLE_ERROR nc-id 1, action TERMINATE_INSTANCE" in finding_text(top)
    cells = ledger.read(T0 + 2).chips_of(ledger.hosts["i-0a"])
    assert [c.hw_errors for c in cells] == [0, 0, 1, 0]  # the grid's `#` on chip 2 only
    # The same fault repeated is one finding, with its line count.
    ledger.ingest(Line("kernel-log", "kernel-log", T0 + 3, message))
    found = [f for f in list(ledger.read(T0 + 4).findings) if f.kind == "hw-error"]
    assert len(found) == 1 and "(2 lines)" in found[0].what


def test_receipt_carries_the_hardware_error_and_counts_driver_lines():
    message = hw_error_message("SRAM_UNCORRECTABLE_ERROR", "i-0a", "trn3-a07", 1, 0, "ff", "TERMINATE_INSTANCE")
    ledger = _ledger_with_host_and_error(message)
    receipt = build_receipt(ledger, "eof", written_at_s=T0 + 5)
    assert receipt.kernel_log is not None
    [e] = receipt.kernel_log.hardware_errors
    assert (e.error_type, e.host, e.chip, e.nc_id, e.lines, e.first) == (
        "SRAM_UNCORRECTABLE_ERROR",
        "i-0a",
        1,
        0,
        1,
        T0 + 1,
    )
    assert receipt.kernel_log.driver_lines == {"kernel-log": 1}
    markdown = render_markdown(receipt)
    assert "| SRAM_UNCORRECTABLE_ERROR | TERMINATE_INSTANCE | i-0a | 1 | 0 | 1 |" in markdown


def test_receipt_has_no_kernel_section_without_a_kernel_source():
    ledger = Ledger("live")
    ledger.ingest(Line("trn3-a07", "neuron-monitor", T0, _report()))
    assert build_receipt(ledger, "eof", written_at_s=T0 + 1).kernel_log is None


def test_hardware_error_of_an_unknown_machine_keeps_its_own_names():
    ledger = Ledger("live")
    ledger.ingest(Line("kmsg:k.log", "kernel-log", T0, DOC_ERROR))
    [f] = list(ledger.read(T0 + 1).findings)
    assert (f.site.host_id, f.site.host, f.site.chip, f.site.source_id) == (None, "ip-172-31-61-252", 0, "kmsg:k.log")


def test_a_real_multi_line_kernel_record_is_read_whole():
    """dmesg's own rendering of the kernel's out-of-memory report (tests/fixtures/kernel/README.md):
    the memory summary's continuation lines carry no timestamp and are indented. Every line is
    kernel-log text, read and counted; none is rejected."""
    lines = (Path(__file__).parent / "fixtures" / "kernel" / "dmesg_oom_report.log").read_text().splitlines()
    assert any(line[:1].isspace() for line in lines)  # the capture holds continuation lines
    ledger = Ledger("live")
    for n, text in enumerate(lines):
        ledger.ingest(Line(source_id="kernel-log", kind="kernel-log", received_s=T0 + n * 0.001, text=text))
    stats = ledger.sources["kernel-log"]
    assert (stats.reports, sum(stats.rejected.values())) == (len(lines), 0)
    assert all(isinstance(parse_kernel_line(text), OtherLine) for text in lines)
