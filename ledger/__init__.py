"""The ledger's public face: what the screen (tui/) reads of the model.

The fold (`Ledger`) and its read side (`Ledger.read(now_s)`: a `ReadModel` of typed figures per
scope and the findings, ledger/read_model.py), the typed pieces the views lay out, and the
snapshot the screen exports. tests/test_layering.py holds tui/ to importing these names only.
"""

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
