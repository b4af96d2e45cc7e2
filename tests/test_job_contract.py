"""The `trnwatch.job/1` compatibility rules: an emitter written to the first published field
list loses nothing; unknown fields are ignored; a wrong-typed optional field costs that field
(counted), never the event."""

import json

from trnwatch.collectors.job_events import SCHEMA_VERSION, decode_job_line
from trnwatch.collectors.lines import Line
from trnwatch.ledger.ledger import Ledger
from trnwatch.ledger.receipt import build_receipt

T0 = 1_700_000_000.0

# Exactly the fields issue 4 published for each event (no lnc, cache, tag, blocking,
# dropped_events, seq_len on steps, error source/exit code/signal/failed_ts).
FIRST_LIST_RUN_START = {
    "world_size": 2,
    "pid": 100,
    "local_rank": 0,
    "backend": "cpu",
    "core": None,
    "chip": None,
    "model": {"name": "tiny-gpt", "params": 440_000},
    "precision": "fp32",
    "global_batch": 16,
    "micro_batch": 8,
    "seq_len": 64,
    "parallel": {"tp": 1, "pp": 1, "dp": 2},
    "versions": {"torch": "2.13.0"},
    "restart": 0,
}


def first_list_events(rank: int) -> list[dict]:
    base = {"v": SCHEMA_VERSION, "run": "old-emitter", "rank": rank}
    events = [
        {**base, "ts": T0, "event": "run_start", **FIRST_LIST_RUN_START, "host": f"node-{rank}", "local_rank": 0},
        {**base, "ts": T0 + 0.1, "event": "phase", "phase": "steady", "state": "begin"},
        {**base, "ts": T0 + 0.2, "event": "heartbeat", "step": 1, "region": "compute", "region_since": T0 + 0.2},
    ]
    for n in range(1, 6):
        events.append(
            {
                **base,
                "ts": T0 + n,
                "event": "collective",
                "op": "all_reduce",
                "bytes": 1024,
                "latency_s": 0.01,
                "wait_s": 0.002,
                "step": n,
            }
        )
        events.append(
            {
                **base,
                "ts": T0 + n,
                "event": "step",
                "step": n,
                "step_time_s": 1.0,
                "compute_s": 0.9,
                "tokens": 1024,
                "loss": 2.0,
            }
        )
    events.append({**base, "ts": T0 + 5.5, "event": "checkpoint", "action": "save", "state": "begin", "step": 5})
    events.append({**base, "ts": T0 + 5.8, "event": "checkpoint", "action": "save", "state": "end", "step": 5})
    events.append({**base, "ts": T0 + 6, "event": "run_end", "status": "success"})
    return events


def fold(events: list[dict]) -> Ledger:
    ledger = Ledger("live")
    for event in events:
        ledger.ingest(Line(f"job:rank-{event['rank']:05d}.jsonl", "job", event["ts"], json.dumps(event)))
    return ledger


def test_events_written_to_the_first_published_field_list_lose_nothing():
    ledger = fold(first_list_events(0) + first_list_events(1))
    assert all(not s.rejected for s in ledger.sources.values())
    job = build_receipt(ledger, "eof", written_at_s=0.0).model_dump(mode="json", by_alias=True)["job"]
    assert job["ranks"]["world_size"] == 2
    assert job["ranks"]["hosts"] == 2
    assert job["model"] == {"name": "tiny-gpt", "params": 440_000}
    assert (job["precision"], job["global_batch"], job["seq_len"], job["lnc"]) == ("fp32", 16, 64, None)
    assert job["verdict"] == "finished"
    assert job["checkpoint_saves"]["count"] == 1


def test_unknown_fields_are_ignored_at_every_level_of_the_line():
    event = {**first_list_events(0)[0], "rank_map": {"0": "node-0"}, "sdk": "2.28"}
    ledger = fold([event])
    assert ledger.job.run_start.world_size == 2
    assert not ledger.sources["job:rank-00000.jsonl"].rejected


def test_a_wrong_typed_optional_field_costs_that_field_and_is_counted():
    start = {**first_list_events(0)[0], "lnc": "two"}
    step = {**first_list_events(0)[4], "seq_len": 0}
    save = {**first_list_events(0)[-3], "blocking": "no", "tag": 5}
    error = {
        "v": SCHEMA_VERSION,
        "run": "old-emitter",
        "rank": 0,
        "ts": T0 + 7,
        "event": "error",
        "message": "boom",
        "exit_code": "9",
        "signal": 9,
    }
    decoded = decode_job_line(json.dumps(save))
    assert decoded.dropped_fields == ("checkpoint.blocking", "checkpoint.tag")
    assert decoded.event.blocking is None and decoded.event.step == 5
    ledger = fold([start, step, save, error])
    assert not ledger.sources["job:rank-00000.jsonl"].rejected
    assert ledger.job.run_start.lnc is None and ledger.job.run_start.world_size == 2
    assert ledger.job.ranks[0].last_step == 1
    assert ledger.job.ranks[0].error == "boom"
    assert dict(ledger.job.dropped_fields) == {
        "run_start.lnc": 1,
        "step.seq_len": 1,
        "checkpoint.blocking": 1,
        "checkpoint.tag": 1,
        "error.exit_code": 1,
        "error.signal": 1,
    }
    assert build_receipt(ledger, "eof", written_at_s=0.0).job.dropped_fields["step.seq_len"] == 1


def test_a_wrong_typed_field_of_the_first_list_still_rejects_the_line():
    step = {**first_list_events(0)[4], "step": "1", "seq_len": "x"}
    ledger = fold([step])
    assert ledger.sources["job:rank-00000.jsonl"].rejected["job-schema"] == 1
    assert ledger.job is None


def test_the_shared_optional_fields_are_read_when_present():
    save = decode_job_line(json.dumps({**first_list_events(0)[-3], "blocking": False, "tag": "step_5"})).event
    error = decode_job_line(
        json.dumps(
            {
                "v": SCHEMA_VERSION,
                "run": "r",
                "rank": 1,
                "ts": T0 + 9,
                "event": "error",
                "message": "exit -9",
                "source": "launcher",
                "exit_code": -9,
                "signal": "SIGKILL",
                "failed_ts": T0 + 8,
            }
        )
    ).event
    step = decode_job_line(json.dumps({**first_list_events(0)[4], "seq_len": 2048})).event
    assert (save.blocking, save.tag) == (False, "step_5")
    assert (error.source, error.exit_code, error.signal, error.failed_ts) == ("launcher", -9, "SIGKILL", T0 + 8)
    assert step.seq_len == 2048
