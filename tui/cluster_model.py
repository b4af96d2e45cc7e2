"""The cluster view's model: one row per UltraServer and where the job's suspects run, plain data."""

from dataclasses import dataclass

from trnwatch.ledger import NO_GROUP, ClusterRollup, EfaRollup, JobDiagnosis, ReadModel, UltraServerRollup

# What `s` sorts the cluster's UltraServer rows by (the same keys as the host grid's).
CLUSTER_SORT_HELP = {
    "host": "UltraServer id",
    "util": "lowest mean utilisation",
    "hbm": "fullest HBM",
    "ecc": "most chips with ECC events",
}


@dataclass(frozen=True)
class UltraServerLine:
    """One row of the cluster view: an UltraServer (or the hosts in none) over its fresh hosts."""

    group: str  # UltraServer id, or NO_GROUP
    rollup: UltraServerRollup
    suspect_ranks: tuple[int, ...]  # the job's suspect ranks on its hosts (empty: none, or no job)
    efa: EfaRollup | None = None  # EFA (between UltraServers) of its hosts; None: sysfs not sampled


@dataclass(frozen=True)
class ClusterModel:
    """Every UltraServer at once: cluster totals over fresh hosts with their boundary, one row
    per UltraServer (and one for hosts in none), and where the job's suspect ranks run."""

    rollup: ClusterRollup
    rows: tuple[UltraServerLine, ...]  # sorted
    diagnosis: JobDiagnosis | None  # None: no job telemetry connected
    suspects_unseen: tuple[int, ...]  # suspect ranks on a host the device telemetry does not show
    sort: str
    efa: EfaRollup | None = None  # EFA of every host; None: sysfs not sampled


def _cluster_sort_key(sort: str):
    def util(row: UltraServerLine) -> tuple:
        mean = row.rollup.util_mean_pct
        return (mean is None, mean or 0.0)  # no figure sorts after every figure

    def hbm(row: UltraServerLine) -> tuple:
        fill = row.rollup.hbm_fill_pct
        return (fill is None, -(fill or 0.0))

    def ecc(row: UltraServerLine) -> tuple:
        return (-row.rollup.chips_with_ecc,)

    key = {"host": lambda r: (), "util": util, "hbm": hbm, "ecc": ecc}[sort]
    # Ties in id order, hosts in no UltraServer last: the order `[` `]` step through.
    return lambda row: (key(row), row.group == NO_GROUP, row.group)


def cluster_model(read: ReadModel, sort: str = "host") -> ClusterModel:
    """The cluster view's rows: the read model's cluster rollup, sorted, with the job's suspect
    ranks placed on their UltraServer when job telemetry is connected."""
    cluster = read.cluster
    diagnosis = read.diagnosis
    placed, unseen = read.suspects_by_ultraserver
    rows = [
        UltraServerLine(r.ultraserver, r, tuple(sorted(placed.get(r.ultraserver, ()))), read.efa(r.ultraserver))
        for r in cluster.rows
    ]
    return ClusterModel(
        rollup=cluster,
        rows=tuple(sorted(rows, key=_cluster_sort_key(sort))),
        diagnosis=diagnosis,
        suspects_unseen=tuple(unseen),
        sort=sort,
        efa=read.efa_cluster,
    )
