"""Small `trnwatch.job/1` stories for receipt, goodput and compare tests: events as the contract
writes them (collectors/job_events.py), fed through the real parser."""

import json

from trnwatch.collectors.job_events import parse_job_line
from trnwatch.collectors.lines import Line

RUN = "story"


def event(kind: str, ts: float, rank: int = 0, **fields) -> dict:
    return {"v": "trnwatch.job/1", "ts": ts, "run": RUN, "rank": rank, "event": kind, **fields}


def run_start(
    ts: float,
    rank: int = 0,
    world_size: int = 2,
    restart: int = 0,
    precision: str = "bf16",
    host: str = "trn-a",
    chip: int | None = None,
    **overrides,
) -> dict:
    fields = dict(
        world_size=world_size,
        host=host,
        pid=100 + rank,
        local_rank=rank,
        backend="neuron",
        core=rank,
        chip=rank // 4 if chip is None else chip,
        model={"name": "tiny", "params": 1_000_000},
        precision=precision,
        global_batch=8,
        micro_batch=1,
        seq_len=128,
        parallel={"tp": 1, "pp": 1, "dp": world_size},
        versions={"neuronx-cc": "2.23", "torch": "2.9"},
        restart=restart,
        lnc=2,
    )
    fields.update(overrides)
    return event("run_start", ts, rank, **fields)


def phase(ts: float, name: str, state: str, rank: int = 0, **extra) -> dict:
    return event("phase", ts, rank, phase=name, state=state, **extra)


def step(ts: float, n: int, step_time_s: float, rank: int = 0, tokens: int = 1024, **extra) -> dict:
    return event(
        "step", ts, rank, step=n, step_time_s=step_time_s, compute_s=step_time_s * 0.8, tokens=tokens, loss=1.0, **extra
    )


def parsed(events: list[dict]):
    return [parse_job_line(json.dumps(e)) for e in events]


def lines(events: list[dict], received_s: float | None = None) -> list[Line]:
    """Job lines as a `--job-dir` source delivers them (received when written unless told)."""
    return [
        Line(f"job:rank-{e['rank']:05d}.jsonl", "job", e["ts"] if received_s is None else received_s, json.dumps(e))
        for e in events
    ]


def steady_run(
    step_times_s: list[float],
    t0: float = 1000.0,
    compile_s: float = 10.0,
    warmup_steps: int = 2,
    ranks: int = 2,
    chips: int = 2,
    **start_fields,
) -> list[dict]:
    """init, compile, warm-up steps, then steady steps with the given step times, on every rank."""
    out = []
    for rank in range(ranks):
        t = t0
        out += [
            run_start(t, rank, world_size=ranks, chip=rank % chips, **start_fields),
            phase(t, "init", "begin", rank),
            phase(t + 1, "init", "end", rank),
            phase(t + 1, "compile", "begin", rank),
        ]
        t += 1 + compile_s
        out += [phase(t, "compile", "end", rank), phase(t, "warmup", "begin", rank)]
        n = 0
        for _ in range(warmup_steps):
            n, t = n + 1, t + 1.0
            out.append(step(t, n, 1.0, rank))
        out += [phase(t, "warmup", "end", rank), phase(t, "steady", "begin", rank)]
        for seconds in step_times_s:
            n, t = n + 1, t + seconds
            out.append(step(t, n, seconds, rank))
    return out
