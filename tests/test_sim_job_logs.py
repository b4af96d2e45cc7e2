"""The simulated job written as each framework's log reads back, through the detected profile,
to the simulated ground truth: steps, steady tokens/s, checkpoints, and the hang's stall."""

import re

import pytest

from trnwatch.collectors.job_events import Checkpoint, Step
from trnwatch.collectors.log_profiles import LogTranslator, profile_registry
from trnwatch.ledger.job import JobLedger
from trnwatch.workloads.sim.fleet import fleet_hosts
from trnwatch.workloads.sim.job import GLOBAL_BATCH, SEQ_LEN
from trnwatch.workloads.sim.job_logs import LOG_FORMATS, SimLogWriter
from trnwatch.workloads.sim.scenarios import HANG_START_TICK
from trnwatch.workloads.sim.topology import get_topology

T0 = 1_800_000_000.0


def read_back(tmp_path, log_format, scenario, ticks):
    hosts = fleet_hosts(get_topology("trn3-gen2-us"), 0, scenario, 1.0)
    path = tmp_path / f"{log_format}.log"
    writer = SimLogWriter(hosts, path, log_format)
    translator = LogTranslator("sim", profile_registry(), global_batch=GLOBAL_BATCH, seq_len=SEQ_LEN)
    job = JobLedger()
    events = []
    with open(path, encoding="utf-8") as log:
        for tick in range(ticks):
            writer.write_tick(tick, T0 + tick)
            # Read what was written this tick, received at its end (bars have no timestamp).
            for line in re.split(r"\r\n|\r|\n", log.read()):
                for event in translator.feed(line, T0 + tick):
                    events.append(event)
                    job.ingest(event, T0 + tick)
    writer.close()
    return translator, job, events


@pytest.mark.parametrize("log_format", LOG_FORMATS)
def test_each_format_reads_back_through_its_profile_with_steady_tokens_per_s(tmp_path, log_format):
    translator, job, events = read_back(tmp_path, log_format, "healthy", 70)
    assert translator.profile_name == log_format
    steps = [e for e in events if isinstance(e, Step)]
    assert len(steps) == 70 - 10 - 3  # one per tick after the compile ticks, none during the save
    assert job.throughput_tokens_per_s(T0 + 70) == pytest.approx(GLOBAL_BATCH * SEQ_LEN, rel=0.01)
    saves = [(e.state, e.blocking) for e in events if isinstance(e, Checkpoint)]
    assert saves == [("begin", True), ("end", True)]


@pytest.mark.parametrize("log_format", LOG_FORMATS)
def test_the_hang_reads_as_a_stall_through_each_profile(tmp_path, log_format):
    _, job, events = read_back(tmp_path, log_format, "hang", HANG_START_TICK + 40)
    last_step_ts = max(e.ts for e in events if isinstance(e, Step))
    assert last_step_ts <= T0 + HANG_START_TICK
    assert job.diagnose(T0 + HANG_START_TICK + 3).verdict not in ("stalled", "late")
    assert job.diagnose(T0 + HANG_START_TICK + 40).verdict == "stalled"
