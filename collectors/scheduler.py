"""Which scheduler job this session serves, read from trnwatch's own environment at start.

Inside a Slurm allocation (sbatch, salloc, srun) Slurm sets, among its documented output
environment variables, `SLURM_JOB_ID`, `SLURM_JOB_NAME` and `SLURM_JOB_NODELIST` (the nodes
in Slurm's hostlist form, e.g. `trn[001-004]`). Outside one there is no job: None. The answer
goes into the receipt's boundary and the recording's header, so a replay reports the recorded
job and not the replaying shell's.
"""

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict

MAX_CHARS = 1024  # a value past this is cut (a node list of thousands of nodes, in Slurm's compressed form, fits)


class SchedulerJob(BaseModel):
    """The scheduler job the watched hosts serve."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["slurm"]
    job_id: str
    name: str | None
    nodelist: str | None


def _value(environ: Mapping[str, str], name: str) -> str | None:
    text = "".join(ch for ch in environ.get(name, "") if ch.isprintable()).strip()[:MAX_CHARS]
    return text or None


def slurm_job(environ: Mapping[str, str]) -> SchedulerJob | None:
    """The Slurm job of `environ` (os.environ at start), or None outside an allocation."""
    job_id = _value(environ, "SLURM_JOB_ID")
    if job_id is None:
        return None
    return SchedulerJob(
        kind="slurm",
        job_id=job_id,
        name=_value(environ, "SLURM_JOB_NAME"),
        nodelist=_value(environ, "SLURM_JOB_NODELIST"),
    )


def job_words(job: SchedulerJob) -> str:
    """ "slurm job 4242 (pretrain) on trn[001-004]": the job in words (plain text; a caller
    escapes it for its medium)."""
    text = f"{job.kind} job {job.job_id}"
    if job.name:
        text += f" ({job.name})"
    if job.nodelist:
        text += f" on {job.nodelist}"
    return text
