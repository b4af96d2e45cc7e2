"""The `trnwatch.job/1` contract: good lines parse to typed events, bad lines fail clearly."""

import json
import math
import subprocess
import sys

import pytest

from trnwatch.collectors.job_events import SCHEMA_VERSION, JobLineError, job_event_json_schema, parse_job_line
from trnwatch.collectors.job_records import Checkpoint, Collective, Error, Heartbeat, Phase, RunEnd, RunStart, Step

BASE = {"v": SCHEMA_VERSION, "ts": 1_700_000_000.25, "run": "llama-8b", "rank": 3}
GOOD = {
    RunStart: {
        "event": "run_start",
        "world_size": 64,
        "host": "trn3-a-07",
        "pid": 4242,
        "local_rank": 3,
        "backend": "neuron",
        "core": 3,
        "chip": 0,
        "model": {"name": "llama-3-8b", "params": 8_030_261_248},
        "precision": "bf16",
        "global_batch": 256,
        "micro_batch": 1,
        "seq_len": 8192,
        "parallel": {"tp": 32, "pp": 1, "dp": 2},
        "versions": {"torch-neuronx": "2.9.0.2.12.22436", "neuronx-distributed": "0.17.26814"},
        "restart": 0,
        "lnc": 2,
    },
    Phase: {"event": "phase", "phase": "compile", "state": "begin"},
    Step: {"event": "step", "step": 41, "step_time_s": 1.25, "compute_s": 0.9, "tokens": 2_097_152, "loss": 2.31},
    Collective: {
        "event": "collective",
        "op": "all_reduce",
        "bytes": 1 << 20,
        "latency_s": 0.004,
        "wait_s": 0.001,
        "step": 41,
    },
    Checkpoint: {"event": "checkpoint", "action": "save", "state": "end", "step": 40},
    Heartbeat: {"event": "heartbeat", "step": 41, "region": "collective:all_reduce", "region_since": 1_700_000_000.0},
    Error: {"event": "error", "message": "NRT error: timed out"},
    RunEnd: {"event": "run_end", "status": "failed"},
}


def line(**fields) -> str:
    return json.dumps({**BASE, **fields})


@pytest.mark.parametrize("model", list(GOOD), ids=lambda model: model.__name__)
def test_each_event_kind_parses_to_its_model(model):
    event = parse_job_line(line(**GOOD[model]))
    assert type(event) is model
    assert (event.rank, event.run, event.ts) == (3, "llama-8b", 1_700_000_000.25)


def test_unknown_extra_fields_are_ignored():
    event = parse_job_line(line(**GOOD[Step], lr=3e-4, grad_norm=0.9))
    assert event.step == 41 and not hasattr(event, "lr")


def test_nullable_fields_accept_null():
    start = parse_job_line(line(**{**GOOD[RunStart], "core": None, "chip": None, "lnc": None}))
    step = parse_job_line(line(**{**GOOD[Step], "loss": None, "compute_s": None}))
    assert (start.core, start.chip, start.lnc, step.loss, step.compute_s) == (None, None, None, None, None)


def test_a_diverged_loss_is_data_not_a_bad_line():
    text = line(**GOOD[Step]).replace('"loss": 2.31', '"loss": NaN')
    assert math.isnan(parse_job_line(text).loss)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("not json at all", "Invalid JSON"),
        ('{"v": "trnwatch.job/1", "ts": 1.0, "run": "r", "rank": 0', "Invalid JSON"),  # a torn line
        ("[1, 2]", "object"),
        (json.dumps({**BASE, "step": 1}), "discriminator 'event'"),
        (line(event="rank_map"), "'rank_map'"),
        (line(**{**GOOD[Step], "v": "trnwatch.job/2"}), "v:"),
        (line(**{**GOOD[Step], "step": "41"}), "step: Input should be a valid integer"),
        (line(**{**GOOD[Step], "step": True}), "step: Input should be a valid integer"),
        (line(**{**GOOD[Step], "step": -1}), "step: Input should be greater than or equal to 0"),
        (line(**{**GOOD[Step], "step_time_s": "1.2"}), "step_time_s"),
        (json.dumps({**BASE, "event": "step", "step": 1}), "step_time_s: Field required"),
        (line(**{**GOOD[Phase], "phase": "graph_extract"}), "phase:"),
        (line(**{**GOOD[RunStart], "parallel": {"tp": 0, "pp": 1, "dp": 1}}), "parallel.tp"),
        (line(**{**GOOD[RunStart], "backend": "cuda"}), "backend"),
        (line(**{**GOOD[RunEnd], "status": "ok"}), "status"),
        (line(**GOOD[Collective]).replace('"latency_s": 0.004', '"latency_s": Infinity'), "latency_s"),
        (json.dumps({**BASE, "rank": "3", **GOOD[Error]}), "rank: Input should be a valid integer"),
    ],
)
def test_bad_lines_are_rejected_with_a_clear_error(text, says):
    with pytest.raises(JobLineError) as raised:
        parse_job_line(text)
    assert says in str(raised.value)
    assert str(raised.value).startswith(f"bad {SCHEMA_VERSION} line")


def test_schema_covers_every_event_kind_and_its_required_fields():
    schema = job_event_json_schema()
    assert schema["$id"] == SCHEMA_VERSION
    mapping = schema["discriminator"]["mapping"]
    assert set(mapping) == {
        "run_start",
        "phase",
        "step",
        "collective",
        "checkpoint",
        "heartbeat",
        "error",
        "run_end",
        "launcher",
    }
    step = schema["$defs"]["Step"]
    assert {"v", "ts", "run", "rank", "event", "step", "step_time_s", "compute_s", "tokens", "loss"} <= set(
        step["required"]
    )


def test_schema_export_command_prints_the_schema():
    exported = subprocess.run(
        [sys.executable, "-m", "trnwatch", "schema", "job"], capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(exported) == job_event_json_schema()
