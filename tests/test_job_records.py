"""The records the ledger folds mirror the `trnwatch.job/1` contract's models, and one typed
decode gives the same record the contract's slow path would."""

import json

import msgspec
import pytest
from pydantic import BaseModel

from trnwatch.collectors import job_events, job_records
from trnwatch.collectors.job_events import SCHEMA_VERSION, decode_job_line
from trnwatch.collectors.job_records import RECORD_TYPES, record_of
from trnwatch.ledger.job_ranks import RankState
from trnwatch.ledger.job_suspects import suspect, with_device_evidence


@pytest.mark.parametrize("tag", sorted(RECORD_TYPES))
def test_each_record_has_the_fields_of_its_contract_model_required_alike(tag):
    record = RECORD_TYPES[tag]
    model: type[BaseModel] = getattr(job_events, record.__name__)
    fields = {name: info.is_required() for name, info in model.model_fields.items() if name != "event"}
    assert {field.name: field.required for field in msgspec.structs.fields(record)} == fields


LINES = [
    {"event": "step", "step": 3, "step_time_s": 1.0, "compute_s": None, "tokens": 10, "loss": 2.5, "seq_len": 8},
    {"event": "heartbeat", "step": 3, "region": "forward", "region_since": 1.0e9},
    {"event": "checkpoint", "action": "save", "state": "begin", "step": None, "blocking": False},
    {"event": "error", "message": "x", "severity": "warning", "chip": 1},
]


@pytest.mark.parametrize("fields", LINES, ids=lambda f: f["event"])
def test_the_fast_decode_gives_the_record_of_what_the_contract_accepts(fields):
    text = json.dumps({"v": SCHEMA_VERSION, "ts": 1.0e9, "run": "r", "rank": 2, **fields})
    fast = decode_job_line(text).event
    slow = record_of(job_events._JOB_EVENT.validate_json(text))
    assert fast == slow and type(fast) is RECORD_TYPES[fields["event"]]


@pytest.mark.parametrize(
    "bad",
    [{"ts": 1e999}, {"step_time_s": 1e999}, {"step": True}, {"step": "3"}, {"step": 3.0}, {"rank": -1}],
)
def test_what_the_contract_refuses_the_fast_decode_refuses_too(bad):
    fields = {"v": SCHEMA_VERSION, "ts": 1.0e9, "run": "r", "rank": 2, **LINES[0], **bad}
    with pytest.raises(job_records.DecodeFailed):
        job_records.decode_record(json.dumps(fields))
    with pytest.raises(job_events.JobLineError):
        decode_job_line(json.dumps(fields))


def test_a_nan_loss_is_read_by_the_contract_and_kept():
    text = json.dumps({"v": SCHEMA_VERSION, "ts": 1.0e9, "run": "r", "rank": 2, **LINES[0], "loss": float("nan")})
    loss = decode_job_line(text).event.loss
    assert loss is not None and loss != loss


def test_device_evidence_is_each_suspects_chip_and_the_median_of_the_other_chips():
    ranks = {r: RankState(r, host=f"h{r // 4}", chip=r % 4) for r in range(24)}
    utilisation = {(f"h{h}", c): float((h * 7 + c * 13) % 10) for h in range(6) for c in range(4)}
    utilisation[("h5", 3)] = None  # a chip without a figure
    suspects = tuple(suspect(ranks[r], "why", 0.0) for r in (0, 5, 23))
    got = with_device_evidence(suspects, ranks, lambda host, chip: utilisation[(host, chip)])
    for one in got:
        own = utilisation[(one.host, one.chip)]
        peers = sorted(v for chip, v in utilisation.items() if chip != (one.host, one.chip) and v is not None)
        middle = len(peers) // 2
        expected = peers[middle] if len(peers) % 2 else (peers[middle - 1] + peers[middle]) / 2
        assert (one.evidence.chip_util_pct, one.evidence.peer_chip_util_median_pct) == (own, expected)
