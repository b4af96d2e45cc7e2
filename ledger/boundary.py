"""Boundary vocabulary shared by the receipt builder and `trnwatch compare`: which fields a
comparison requires equal, and how versions and mixed values are spelled."""

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # an annotation only: `trnwatch compare` reads receipts without the pydantic models
    from trnwatch.collectors.job_events import Parallelism

BOUNDARY_FIELDS = (
    "scope",
    "chips",
    "hosts",
    "ultraservers",
    "ranks",
    "fabric",
    "instance_type",
    "device_type",
    "lnc",
    "compiler_version",
    "framework_version",
    "model",
    "params",
    "precision",
    "global_batch",
    "micro_batch",
    "seq_len",
    "sequence_lengths",
    "parallel",
    "evidence",
)
COMPILER_KEYS = ("neuronx-cc", "neuronx_cc", "neuron-cc", "compiler")
FRAMEWORK_KEYS = ("torch-neuronx", "torch_neuronx", "torchneuron", "torch", "jax", "framework")


def one_value(values) -> str | None:
    """A single value as text, "mixed: a, b" for several, None for none."""
    distinct = sorted({v for v in values if v is not None}, key=str)
    if not distinct:
        return None
    return str(distinct[0]) if len(distinct) == 1 else "mixed: " + ", ".join(map(str, distinct))


def hosts_lnc(values: Iterable[object]) -> int | None:
    """The logical NeuronCore configuration of the hosts (neuron_hardware_info), when they report
    one and the same; the boundary's `lnc` where the job's run_start gives none."""
    text = one_value(values)
    return int(text) if text and text.isdigit() else None


def version_of(versions: dict | None, keys: tuple[str, ...]) -> str | None:
    """ "<package> <version>" of the first of `keys` the job's versions name."""
    for key in keys:
        if versions and versions.get(key):
            return f"{key} {versions[key]}"
    return None


def parallel_text(parallel: "Parallelism | Mapping[str, object] | None") -> str | None:
    """ "tp8 pp4 dp2": the job's parallel degrees (typed, or as an older receipt's JSON has them)."""
    if not parallel:
        return None
    return " ".join(f"{k}{v}" for k, v in (parallel.items() if isinstance(parallel, Mapping) else parallel))
