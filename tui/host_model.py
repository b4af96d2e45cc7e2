"""The host view's model: one host's identity, figures, processes and history, plain data."""

from dataclasses import dataclass

from trnwatch.ledger import NO_GROUP, HostState, HostSummary, ReadModel, RuntimeState


@dataclass(frozen=True)
class RuntimeLine:
    pid: int | None
    tag: str
    chips: tuple[int, ...]
    cores: tuple[int, ...]
    vcpu_user_pct: float | None
    vcpu_system_pct: float | None
    device_bytes: int | None
    error: str
    group_errors: tuple[tuple[str, str], ...]
    running: bool  # listed in the latest report


@dataclass(frozen=True)
class HostModel:
    row: HostSummary
    group: str | None
    instance_type: str | None
    device_type: str | None
    neuroncore_version: str | None
    lnc: int | None
    cores_per_chip: int | None
    vcpu_busy_pct: float | None
    vcpu_count: int | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    runtimes: tuple[RuntimeLine, ...]
    group_errors: tuple[tuple[str, str], ...]
    anomalies: tuple[tuple[str, int], ...]
    util_history: tuple[tuple[tuple[float, float | None], ...], ...]  # per chip, (t_s, util)
    period_s: float | None  # report period, for history spans
    source_rejected: int  # lines its stream delivered that could not be used
    source_last_rejection: str
    # sysfs (None: not sampled for this host): EFA rates per counter, and per device
    # (index, power status, power average %, unhealthy components); a figure left out is unavailable.
    efa_rates_per_s: tuple[tuple[str, float], ...] | None = None
    devices_health: tuple[tuple[int, str | None, float | None, str | None], ...] = ()
    pods: tuple[str, ...] = ()  # the Kubernetes job's pods on this host (--k8s-job), "name (phase)"


def _runtime_line(host: HostState, rt: RuntimeState) -> RuntimeLine:
    per = host.cores_per_chip
    chips = tuple(sorted({c // per for c in rt.cores})) if per else ()
    return RuntimeLine(
        rt.pid,
        rt.tag,
        chips,
        rt.cores,
        rt.vcpu_user_pct,
        rt.vcpu_system_pct,
        rt.device_bytes,
        rt.error,
        tuple(sorted(rt.group_errors.items())),
        rt.last_seen_s == host.last_s,
    )


def host_model(read: ReadModel, host_id: str) -> HostModel | None:
    ledger = read.ledger
    host = ledger.hosts.get(host_id)
    if host is None:
        return None
    group = ledger.ultraserver_of(host)
    source = ledger.sources.get(host.source_id)
    sysfs = ledger.sysfs.get(host.host_id)
    row = next(r for r in read.hosts(read.group_hosts(group or NO_GROUP)) if r.host_id == host_id)
    runtimes = sorted(
        host.runtimes.values(), key=lambda r: (r.last_seen_s != host.last_s, min(r.cores, default=1 << 30), r.order)
    )
    return HostModel(
        row=row,
        group=group,
        instance_type=host.instance_type,
        device_type=host.device_type,
        neuroncore_version=host.neuroncore_version,
        lnc=host.lnc,
        cores_per_chip=host.cores_per_chip,
        vcpu_busy_pct=host.vcpu_busy_pct,
        vcpu_count=host.vcpu_count,
        memory_used_bytes=host.memory_used_bytes,
        memory_total_bytes=host.memory_total_bytes,
        runtimes=tuple(_runtime_line(host, r) for r in runtimes),
        group_errors=tuple(sorted(host.group_errors.items())),
        anomalies=tuple(sorted(host.anomalies.items())),
        util_history=tuple(tuple((s.t_s, s.util_pct) for s in c.history) for c in host.chips),
        period_s=host.period_s,
        source_rejected=sum(source.rejected.values()) if source else 0,
        source_last_rejection=source.last_rejection if source else "",
        pods=tuple(f"{p.name} ({p.phase or 'phase n/a'})" for p in ledger.pods_on(host)),
        efa_rates_per_s=None if sysfs is None else tuple(sorted(sysfs.efa_rates_per_s.items())),
        devices_health=()
        if sysfs is None
        else tuple(
            (d, h.power.status if h.power else None, h.power.avg_pct if h.power else None, h.unhealthy_components)
            for d, h in sorted(sysfs.devices.items())
        ),
    )
