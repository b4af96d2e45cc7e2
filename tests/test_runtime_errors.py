"""Neuron runtime device-OOM reports and the kernel's NEURON_HW_ERR lines in a job log: one failure
on the chip and core they name. Lines from tests/neuron_runtime_lines.py (the public layouts)."""

import time

import pytest

from trnwatch.collectors.job_events import Error
from trnwatch.collectors.log_profiles import LogTranslator, profile_registry
from trnwatch.ledger.job import JobLedger
from tests.neuron_runtime_lines import device_oom_2_20, device_oom_2_23, hardware_error


def fold(lines: list[str]) -> tuple[list, JobLedger, float]:
    translator = LogTranslator("run", profile_registry())
    ledger = JobLedger()
    events = []
    now = time.time()
    for line in lines:
        for event in translator.feed(line, now):
            events.append(event)
            ledger.ingest(event, now)
    return events, ledger, now


@pytest.mark.parametrize(
    ("report", "message"),
    [
        (device_oom_2_23, "Failed to allocate 4.000GB (alignment: none, usage: tensors) on ND 1:NC 4"),
        (device_oom_2_20, "Failed to allocate 4.000GB (usage: tensors) on ND 1:NC 4"),
    ],
)
def test_a_device_oom_report_is_one_failure_on_its_chip_and_core(report, message):
    lines = [f"[rank5]:{line}" for line in report("4.000GB", "tensors", 1, 4)]
    events, ledger, now = fold(lines)
    [error] = [event for event in events if isinstance(event, Error)]
    assert (error.rank, error.chip, error.core, error.source, error.message) == (5, 1, 4, "runtime", message)
    assert error.ts == pytest.approx(now, abs=2)  # the line's own time, as generated
    diagnosis = ledger.diagnose(now)
    assert diagnosis.verdict == "failed"
    assert diagnosis.reason.startswith(f"first failure rank 5 (host ? chip 1): error: {message}")
    assert (diagnosis.suspects[0].chip, diagnosis.suspects[0].core) == (1, 4)


def test_a_neuron_hw_err_line_is_a_hardware_failure_on_its_chip_and_core():
    line = hardware_error("SRAM_UNCORRECTABLE_ERROR", 3, 1, "TERMINATE_INSTANCE")
    events, ledger, now = fold(["[rank2]:step 10", f"[rank2]:{line}"])
    [error] = events
    assert (error.rank, error.chip, error.core, error.source) == (2, 3, 1, "hardware")
    assert error.message == line
    assert "action=TERMINATE_INSTANCE" in ledger.diagnose(now).reason


def test_the_job_log_and_the_kernel_log_read_neuron_hw_err_with_one_parser():
    # The fields in another order than the documented line, and a dmesg timestamp before it: the
    # kernel-log parser reads both; a job log reads them with it (no pattern of its own).
    from trnwatch.collectors.kernel_log import parse_kernel_line
    from trnwatch.collectors.log_profiles_builtin import NEURON_RUNTIME

    assert not any("NEURON_HW_ERR" in rule["pattern"] for rule in NEURON_RUNTIME["rules"])
    line = "[  298850.502143] NEURON_HW_ERR=DMA_ERROR action=RESET nc-id=6 nd-id=14 hostname=ip-10-0-0-1"
    record = parse_kernel_line(line)
    events, _, _ = fold([f"[rank7]:{line}"])
    [error] = events
    assert (error.rank, error.chip, error.core, error.source) == (7, record.device, record.core, "hardware")
    assert (error.chip, error.core, error.message) == (14, 6, record.message)
