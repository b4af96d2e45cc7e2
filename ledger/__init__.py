"""The ledger's public face: what the screen (tui/) reads of the model.

The fold (`Ledger`) and its read side (`Ledger.read(now_s)`: a `ReadModel` of typed figures per
scope and the findings, ledger/read_model.py), the typed pieces the views lay out, and the
snapshot the screen exports. tests/test_layering.py holds tui/ to importing these names only.

Each name is imported on first use (`__getattr__`), so a command that reads one ledger module
(`trnwatch compare`: ledger/compare.py) does not import the whole fold.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trnwatch.ledger import units
    from trnwatch.ledger.chip_history import HBM_TREND_MIN_SAMPLES, HBM_TREND_WINDOW_S
    from trnwatch.ledger.chips import CoreState
    from trnwatch.ledger.findings import Finding, HbmTrend, Site, trend_text
    from trnwatch.ledger.hosts import ChipState, HostState, RuntimeState
    from trnwatch.ledger.job import JobDiagnosis, JobLedger
    from trnwatch.ledger.job_summary import JobSection, Percentiles, Suspect
    from trnwatch.ledger.ledger import WORST_STATE_FIRST, Evidence, Ledger
    from trnwatch.ledger.read_model import NO_GROUP, ChipSummary, HostSummary, ReadModel
    from trnwatch.ledger.receipt import ExitReason
    from trnwatch.ledger.rollups import HBM_HIGH_PCT, ClusterRollup, Rollup, UltraServerRollup, hbm_high
    from trnwatch.ledger.runtimes import is_execution_error
    from trnwatch.ledger.snapshot import Snapshot, build_snapshot, session_now_s, snapshot_json
    from trnwatch.ledger.sysfs_host import EfaRollup

# name -> the ledger module that defines it (a module's own name: the module)
_FACE = {
    "units": "units",
    "HBM_TREND_MIN_SAMPLES": "chip_history",
    "HBM_TREND_WINDOW_S": "chip_history",
    "CoreState": "chips",
    "Finding": "findings",
    "HbmTrend": "findings",
    "Site": "findings",
    "trend_text": "findings",
    "ChipState": "hosts",
    "HostState": "hosts",
    "RuntimeState": "hosts",
    "JobDiagnosis": "job",
    "JobLedger": "job",
    "JobSection": "job_summary",
    "Percentiles": "job_summary",
    "Suspect": "job_summary",
    "WORST_STATE_FIRST": "ledger",
    "Evidence": "ledger",
    "Ledger": "ledger",
    "NO_GROUP": "read_model",
    "ChipSummary": "read_model",
    "HostSummary": "read_model",
    "ReadModel": "read_model",
    "ExitReason": "receipt",
    "HBM_HIGH_PCT": "rollups",
    "ClusterRollup": "rollups",
    "Rollup": "rollups",
    "UltraServerRollup": "rollups",
    "hbm_high": "rollups",
    "is_execution_error": "runtimes",
    "Snapshot": "snapshot",
    "build_snapshot": "snapshot",
    "session_now_s": "snapshot",
    "snapshot_json": "snapshot",
    "EfaRollup": "sysfs_host",
}


if not TYPE_CHECKING:  # mypy reads the imports above, so a name not in the face is an error there

    def __getattr__(name: str) -> Any:
        module = _FACE.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = importlib.import_module(f"{__name__}.{module}")
        if name != module:
            value = getattr(value, name)
        globals()[name] = value
        return value


__all__ = [
    "HBM_HIGH_PCT",
    "HBM_TREND_MIN_SAMPLES",
    "HBM_TREND_WINDOW_S",
    "NO_GROUP",
    "WORST_STATE_FIRST",
    "ChipState",
    "ChipSummary",
    "ClusterRollup",
    "CoreState",
    "EfaRollup",
    "Evidence",
    "ExitReason",
    "Finding",
    "HbmTrend",
    "HostState",
    "HostSummary",
    "JobDiagnosis",
    "JobLedger",
    "JobSection",
    "Ledger",
    "Percentiles",
    "ReadModel",
    "Rollup",
    "RuntimeState",
    "Site",
    "Snapshot",
    "Suspect",
    "UltraServerRollup",
    "build_snapshot",
    "hbm_high",
    "is_execution_error",
    "session_now_s",
    "snapshot_json",
    "trend_text",
    "units",
]
