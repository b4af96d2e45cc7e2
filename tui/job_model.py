"""The job view's model: the job as its telemetry tells it, plain data."""

from dataclasses import dataclass

from trnwatch.ledger import JobDiagnosis, JobLedger, JobSection, Percentiles, ReadModel, Suspect


@dataclass(frozen=True)
class RankLine:
    rank: int
    host: str | None  # as the job names it
    chip: int | None
    core: int | None
    status: str
    dead: bool
    last_step: int | None
    heartbeat_age_s: float | None  # None: this rank sends no heartbeats (passive source)
    region: str | None


@dataclass(frozen=True)
class CollectiveLine:
    op: str
    count: int
    bytes: int
    latency_s: Percentiles


@dataclass(frozen=True)
class JobModel:
    """The job as its telemetry tells it; every figure here comes from job events only."""

    diagnosis: JobDiagnosis
    summary: JobSection  # ReadModel.job_summary, for the run facts
    ranks: tuple[RankLine, ...]
    collectives: tuple[CollectiveLine, ...]  # empty: no collective timings in the telemetry


def job_model(job: JobLedger, read: ReadModel) -> JobModel:
    """The job view's figures; the diagnosis is the read model's (`ReadModel.diagnosis`: each
    suspect's chip utilisation from the device ledger, fresh hosts only), the one the receipt uses too."""
    now_s = read.job_judged_s  # on what was read (ledger/lag.py)
    dead = set(job.dead_ranks(now_s))  # the job ledger's own rule, not a second copy of it
    ranks = tuple(
        RankLine(
            r.rank,
            r.host,
            r.chip,
            r.core,
            r.status,
            r.rank in dead,
            r.last_step,
            None if r.heartbeat_ts is None else max(0.0, now_s - r.heartbeat_ts),
            r.region,
        )
        for r in sorted(job.ranks.values(), key=lambda r: r.rank)
    )
    summary, diagnosis = read.job_summary, read.diagnosis
    assert summary is not None and diagnosis is not None  # the read model's job is `job`
    collectives = summary.collectives
    return JobModel(
        diagnosis=diagnosis,
        summary=summary,
        ranks=ranks,
        collectives=tuple(CollectiveLine(op, c.count, c.bytes, c.latency_s) for op, c in collectives.items())
        if isinstance(collectives, dict)
        else (),
    )


def selected_suspect(suspects: tuple[Suspect, ...], rank: int | None) -> Suspect | None:
    """The suspect the job view's selection names, else the first (None: no suspect)."""
    return next((s for s in suspects if s.rank == rank), suspects[0] if suspects else None)
