"""Prometheus data as neuron-monitor `Report`s, so it reaches the ledger by the one fold path.

Two line kinds carry it (collectors/lines.py), both raw enough that a recording replays exactly:

- "prometheus": one scrape of an exporter's /metrics, as JSON
  `{"url": URL, "interval_s": S, "body": "<exposition text>"}`; the body is parsed with
  prometheus_client's text parser (only the families read below are handed to it);
- "promql": one host's answers to one refresh of the server's PromQL query set
  (collectors/prometheus_sources.py), as JSON `{"interval_s": S, "eval_s": T, "instance_id": ID,
  "samples": [[name, {labels}, "value"], ...]}` (values as the API wrote them).

A line gives one Report per `instance_id` label (hosts are identified by it), each validated on its
own: one malformed host never takes the others down with it.

How the vendor exporter's series (neuron-monitor-prometheus.py; neuron-telemetry.md section 2.1)
map back to report fields, labels R = instance labels + runtime_tag:

| series                                             | report field                                           |
|----------------------------------------------------|--------------------------------------------------------|
| instance_info{I}                                   | instance_info (availability_zone, region renamed back)  |
| neuron_hardware_info{neuron_device_count, neuroncore_per_device_count, neuron_device_memory_size} | neuron_hardware_info |
| neuroncore_utilization_ratio{R, neuroncore}        | neuroncores_in_use[core].neuroncore_utilization x 100   |
| neuroncore_memory_usage_<category>{R, neuroncore}  | usage_breakdown.neuroncore_memory_usage[core][category] |
| neuron_runtime_memory_used_bytes{R, memory_location} | neuron_runtime_used_bytes.host / .neuron_device       |
| neuron_runtime_vcpu_usage_ratio{R, usage_type}     | neuron_runtime_vcpu_usage.vcpu_usage x 100              |
| execution_errors_total{R, error_type}              | execution_stats.error_summary                           |
| execution_status_total{R, status_type}             | execution_stats.execution_summary                       |
| execution_latency_seconds{R, percentile}           | execution_stats.latency_stats.total_latency             |
| hardware_ecc_events_total{I, event_type, neuron_device_index} | neuron_hw_counters.neuron_devices              |
| system_vcpu_usage_ratio{I, usage_type}             | vcpu_usage.average_usage user / system x 100, idle = 100 - both |
| system_memory_*_bytes, system_swap_*_bytes         | memory_info                                             |
| trnwatch_simulator_info{topology, host, seed, scenario} | trnwatch_simulator (trnwatch's simulator only)     |

Readings decided here, from the exporter's code and real scrapes:
- What the exporter does not carry stays None, so views show it as unavailable, never zero:
  flops, the per-physical-core split, device latency, loaded models, per-vCPU usage, context
  switches. The exporter carries no pid either: runtimes are keyed by tag, with no pid.
- Group periods are the source's poll interval (scrape or query interval): the figures are only as
  fresh as that, and staleness is judged against it.
- The exporter removes every runtime series when no runtime runs, so a host with no runtime_tag
  series has no runtime: utilisation 0, HBM 0, as neuron-monitor's empty runtime list reads.
- Counters are the exporter's running totals (it adds each report's counts), passed on as they
  are; the ledger's counter rule reads their series (ledger/counters.py).
- The server's query set sums the five per-core categories in PromQL (5x fewer series at
  cluster scale): such a core's breakdown has the one category `total`.
- A device total with no `event_type` label (server mode) stands for all four ECC counters; the
  counters that are not listed beside it are zero. A device with a non-zero total but no listed
  counter (cannot happen within one evaluation time) gives no ECC figure.
"""

import json
import math

from prometheus_client.parser import text_string_to_metric_families
from trnwatch.collectors.neuron_monitor import MAX_LINE_BYTES, Report, ReportRejected, validate_report

PROMETHEUS_KINDS = ("prometheus", "promql")
# A scrape body may be larger than one neuron-monitor line: a Gen1 host's exposition with long
# runtime tags is ~1 MiB.
MAX_BODY_BYTES = 4 * MAX_LINE_BYTES

INSTANCE_LABELS = {  # exporter label -> instance_info field
    "instance_name": "instance_name",
    "instance_id": "instance_id",
    "instance_type": "instance_type",
    "availability_zone": "instance_availability_zone",
    "region": "instance_region",
    "subnet_id": "subnet_id",
    # Only in one unconfirmed variant of the exporter (neuron-telemetry.md section 2.1).
    "ultraserver_id": "ultraserver_id",
}
HARDWARE_LABELS = ("neuron_device_count", "neuroncore_per_device_count", "neuron_device_memory_size",
                   "logical_neuroncore_config")
HARDWARE_TEXT_LABELS = ("neuron_device_type", "neuroncore_version")
MEMORY_PREFIX = "neuroncore_memory_usage_"
ECC_EVENTS = ("mem_ecc_corrected", "mem_ecc_uncorrected", "sram_ecc_corrected", "sram_ecc_uncorrected")
SIMULATOR_INFO = "trnwatch_simulator_info"
# Families handed to the text parser; the rest of a scrape (python_*, process_*, *_created) is
# skipped before parsing, which halves the parse time of a typical body.
READ_PREFIXES = ("neuroncore_", "neuron_", "execution_", "hardware_ecc_", "system_", "instance_info", SIMULATOR_INFO)

Sample = tuple[str, dict[str, str], float]


def _count(value: float, what: str) -> int:
    if not (value >= 0 and math.isfinite(value) and value == int(value)):
        raise ReportRejected("schema", f"{what}: {value!r} is not a whole non-negative number")
    return int(value)


def _pct(ratio: float, what: str) -> float:
    pct = ratio * 100.0
    # ratio x 100 can land a hair above 100 in floating point; anything further is bad data.
    if 100.0 < pct <= 100.0 + 1e-6:
        return 100.0
    if not math.isfinite(pct):
        raise ReportRejected("schema", f"{what}: {ratio!r} is not a finite ratio")
    return pct


def _label_int(labels: dict[str, str], name: str, what: str) -> int:
    text = labels.get(name, "")
    if not (isinstance(text, str) and text.isdigit()):
        raise ReportRejected("schema", f"{what}: label {name}={text!r} is not a whole number")
    return int(text)


def host_report(instance_id: str, samples: list[Sample], interval_s: float | None) -> Report:
    """One host's Report from its exporter series (name, labels, value); `ReportRejected` if unusable."""
    identity: dict[str, str] | None = None
    hardware: dict | None = None
    simulator: dict | None = None
    runtimes: dict[str, dict[str, dict]] = {}
    ecc_by_type: dict[int, dict[str, int]] = {}
    ecc_totals: dict[int, int] = {}
    average_usage: dict[str, float] = {}
    memory_info: dict[str, int] = {}

    def runtime(labels: dict[str, str]) -> dict[str, dict]:
        return runtimes.setdefault(labels.get("runtime_tag", ""), {
            "util": {}, "memory": {}, "used": {}, "vcpu": {}, "errors": {}, "status": {}, "latency": {},
        })

    for name, labels, value in samples:
        if name == "instance_info" or (name == "neuron_hardware_info" and identity is None):
            identity = labels
        if name == "neuron_hardware_info":
            hardware = {field: _label_int(labels, field, name) for field in HARDWARE_LABELS if field in labels}
            hardware.update({field: labels[field] for field in HARDWARE_TEXT_LABELS if field in labels})
            hardware["error"] = ""
        elif name == "neuroncore_utilization_ratio":
            runtime(labels)["util"][_label_int(labels, "neuroncore", name)] = _pct(value, name)
        elif name.startswith(MEMORY_PREFIX):
            core = _label_int(labels, "neuroncore", name)
            runtime(labels)["memory"].setdefault(core, {})[name[len(MEMORY_PREFIX):]] = _count(value, name)
        elif name == "neuron_runtime_memory_used_bytes":
            runtime(labels)["used"][labels.get("memory_location", "")] = _count(value, name)
        elif name == "neuron_runtime_vcpu_usage_ratio":
            runtime(labels)["vcpu"][labels.get("usage_type", "")] = _pct(value, name)
        elif name == "execution_errors_total":
            runtime(labels)["errors"][labels.get("error_type", "")] = _count(value, name)
        elif name == "execution_status_total":
            runtime(labels)["status"][labels.get("status_type", "")] = _count(value, name)
        elif name == "execution_latency_seconds":
            if not (math.isfinite(value) and value >= 0):
                raise ReportRejected("schema", f"{name}: {value!r} is not a duration")
            runtime(labels)["latency"][labels.get("percentile", "")] = value
        elif name == "hardware_ecc_events_total":
            device = _label_int(labels, "neuron_device_index", name)
            if "event_type" in labels:
                ecc_by_type.setdefault(device, {})[labels["event_type"]] = _count(value, name)
            else:
                ecc_totals[device] = _count(value, name)
        elif name == "system_vcpu_usage_ratio":
            average_usage[labels.get("usage_type", "")] = _pct(value, name)
        elif name.startswith(("system_memory_", "system_swap_")) and name.endswith("_bytes"):
            memory_info[name[len("system_"):]] = _count(value, name)
        elif name == SIMULATOR_INFO:
            try:
                seed = int(labels.get("seed", ""))
            except ValueError:
                raise ReportRejected("schema", f"{name}: label seed={labels.get('seed')!r} is not a number") from None
            simulator = {"topology": labels.get("topology", ""), "host": _label_int(labels, "host", name),
                         "seed": seed, "scenario": labels.get("scenario", "")}
    if identity is None and samples:
        identity = samples[0][1]  # scrape series all carry the instance labels

    report: dict = {
        "neuron_runtime_data": [_runtime_entry(tag, r, interval_s) for tag, r in runtimes.items()],
        "system_data": _system_data(ecc_by_type, ecc_totals, average_usage, memory_info, interval_s),
        "instance_info": _instance_info(identity, instance_id),
        "neuron_hardware_info": hardware,
        "trnwatch_simulator": simulator,
    }
    try:
        return validate_report(report)
    except ReportRejected as exc:
        raise ReportRejected("schema", f"{instance_id}: {exc.detail}") from None


def _instance_info(labels: dict[str, str] | None, instance_id: str) -> dict:
    info = {field: labels[label] for label, field in INSTANCE_LABELS.items() if label in (labels or {})}
    info["instance_id"] = instance_id
    info["error"] = ""
    return info


def _runtime_entry(tag: str, r: dict[str, dict], interval_s: float | None) -> dict:
    report: dict = {}
    if r["util"]:
        report["neuroncore_counters"] = {
            "period": interval_s, "error": "",
            "neuroncores_in_use": {core: {"neuroncore_utilization": pct} for core, pct in r["util"].items()},
        }
    if r["memory"] or r["used"]:
        used: dict = {"host": r["used"].get("host"), "neuron_device": r["used"].get("neuron_device")}
        if r["memory"]:
            used["usage_breakdown"] = {"neuroncore_memory_usage": r["memory"]}
        report["memory_used"] = {"period": interval_s, "error": "", "neuron_runtime_used_bytes": used}
    if r["errors"] or r["status"] or r["latency"]:
        report["execution_stats"] = {
            "period": interval_s, "error": "",
            "error_summary": r["errors"] or None,
            "execution_summary": r["status"] or None,
            "latency_stats": {"total_latency": r["latency"] or None, "device_latency": None},
        }
    if r["vcpu"]:
        report["neuron_runtime_vcpu_usage"] = {"period": interval_s, "error": "", "vcpu_usage": r["vcpu"]}
    return {"pid": None, "neuron_runtime_tag": tag, "error": "", "report": report}


def _system_data(ecc_by_type: dict[int, dict[str, int]], ecc_totals: dict[int, int],
                 average_usage: dict[str, float], memory_info: dict[str, int], interval_s: float | None) -> dict:
    devices = []
    for device in sorted(set(ecc_by_type) | set(ecc_totals)):
        counts = ecc_by_type.get(device, {})
        if device in ecc_totals:
            if sum(counts.values()) != ecc_totals[device]:
                continue  # listed counters do not add up to the total: no figure rather than a wrong one
            counts = {event: counts.get(event, 0) for event in ECC_EVENTS}
        devices.append({"neuron_device_index": device, **counts})
    system: dict = {}
    if devices:
        system["neuron_hw_counters"] = {"period": interval_s, "error": "", "neuron_devices": devices}
    usage = dict(average_usage)
    if "user" in usage and "system" in usage:
        # The exporter folds nice into user and io_wait/irq/soft_irq into system: what is left is idle.
        usage["idle"] = max(0.0, 100.0 - usage["user"] - usage["system"])
    # Always present: its period tells the ledger how often this host's figures are refreshed.
    system["vcpu_usage"] = {"period": interval_s, "error": "", "average_usage": usage or None}
    if memory_info:
        system["memory_info"] = {"period": interval_s, "error": "", **memory_info}
    return system


# --- line kinds ---------------------------------------------------------------------------------


def _read_families(body: str) -> str:
    """The lines of the families this module reads (with their HELP/TYPE lines), nothing else."""
    kept = []
    for line in body.splitlines():
        if line.startswith("#"):
            parts = line.split(None, 3)
            name = parts[2] if len(parts) > 2 else ""
        else:
            name = line.split("{", 1)[0].split(None, 1)[0] if line.strip() else ""
        if name.startswith(READ_PREFIXES) and not name.endswith("_created"):
            kept.append(line)
    return "\n".join(kept) + "\n"


def scrape_samples(body: str) -> list[Sample]:
    """Samples of the families read here, parsed by prometheus_client; ValueError if malformed."""
    return [(s.name, s.labels, s.value)
            for family in text_string_to_metric_families(_read_families(body)) for s in family.samples]


def _group_by_instance(samples: list[Sample]) -> dict[str, list[Sample]]:
    hosts: dict[str, list[Sample]] = {}
    for sample in samples:
        instance_id = sample[1].get("instance_id")
        if instance_id is not None:
            hosts.setdefault(instance_id, []).append(sample)
    return hosts


def _reports(hosts: dict[str, list[Sample]], interval_s: float | None) -> list[Report | ReportRejected]:
    out: list[Report | ReportRejected] = []
    for instance_id, samples in hosts.items():
        try:
            out.append(host_report(instance_id, samples, interval_s))
        except ReportRejected as exc:
            out.append(exc)
    return out


def _interval(doc: dict) -> float | None:
    interval = doc.get("interval_s")
    return float(interval) if isinstance(interval, (int, float)) and interval > 0 else None


def parse_prometheus_line(kind: str, text: str) -> list[Report | ReportRejected]:
    """The Reports one "prometheus" or "promql" line holds (one per host, or its rejection).

    A line that is unusable as a whole gives a single `ReportRejected`: `oversize`, `not-json`,
    `not-object`, `not-exposition` (body the text parser refuses) or `schema`. A scrape with no
    host series yet (an exporter that has not had a report) gives no Report and no rejection.
    """
    if len(text) > MAX_BODY_BYTES + 4096:
        return [ReportRejected("oversize", f"{len(text)} characters > {MAX_BODY_BYTES}")]
    try:
        doc = json.loads(text)
    except ValueError as exc:
        return [ReportRejected("not-json", str(exc)[:120])]
    if not isinstance(doc, dict):
        return [ReportRejected("not-object", f"a {kind} line must be a JSON object")]
    interval_s = _interval(doc)
    if kind == "prometheus":
        body = doc.get("body")
        if not isinstance(body, str):
            return [ReportRejected("schema", "no exposition text in 'body'")]
        try:
            samples = scrape_samples(body)
        except ValueError as exc:  # prometheus_client's parser raises ValueError subclasses
            return [ReportRejected("not-exposition", str(exc)[:200])]
        return _reports(_group_by_instance(samples), interval_s)
    instance_id, rows = doc.get("instance_id"), doc.get("samples")
    if not isinstance(instance_id, str) or not isinstance(rows, list):
        return [ReportRejected("schema", "a promql line needs 'instance_id' and 'samples'")]
    samples = []
    for row in rows:
        # Label values that are not text are caught where they are read (_label_int) or by the
        # Report's validation; checking every one here would double the parse time.
        try:
            name, labels, value = row
            if type(name) is not str or type(labels) is not dict:
                raise ValueError
            samples.append((name, labels, float(value)))
        except (ValueError, TypeError):
            return [ReportRejected("schema", f"{instance_id}: sample {str(row)[:80]} is not [name, labels, value]")]
    return _reports({instance_id: samples}, interval_s)
