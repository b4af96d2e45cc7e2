"""The vendor Prometheus exporter's view of simulated hosts: what `neuron-monitor |
neuron-monitor-prometheus.py` would serve for them on /metrics.

`ExporterState` keeps what the vendor script keeps for one host (its prometheus_client gauges,
counters and info metrics), updated report by report with the script's rules, and renders it the
way prometheus_client's text exposition does (`generate_latest`: HELP/TYPE lines, labels sorted,
values through its `floatToGoString`). Rules taken from the script (neuron-telemetry.md 2.1):

- instance labels on everything: instance_name, instance_id, instance_type, availability_zone,
  region, subnet_id; runtime series add runtime_tag; a runtime with an error string is skipped;
  a group with an error keeps its previous values;
- `neuroncore` and `neuron_device_index` labels are the integers as text; per-core memory gauges
  carry `memory_location="None"` (the script leaves that label None);
- counters add each report's per-period counts, and are served as `<name>_total` plus a
  separate `<name>_created` gauge family (what prometheus_client writes);
- latency gauges are only set when `total_latency` is not null; gauges of a core that left
  `neuroncores_in_use` keep their last value (the script only sets listed cores);
- a report without runtimes clears every gauge and counter the script made, system ones too,
  before the report's system groups are set again (so ECC counters restart);
- instance_info and neuron_hardware_info (with neuron_device_memory_size, as real scrapes of
  newer versions show) are set once, from the first report.

One series is not the vendor's: `trnwatch_simulator_info{topology,host,seed,scenario} 1`, so a
scrape of the simulator can never pass as live (the JSON reports carry `trnwatch_simulator`).

`FleetExporter` serves many simulated hosts from one HTTP server: `/hosts/<n>/metrics` (and
`/metrics` when it serves one host). Each host consumes its reports tick by tick up to the tick
`TickClock` says it is (or a frozen tick, for tests that compare with the hosts' own streams).
A host that is lost (host-loss scenario) answers 503, which Prometheus records as a failed scrape.
"""

import argparse
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import REGISTRY, generate_latest
from prometheus_client.utils import floatToGoString

from trnwatch.workloads.sim.fleet import SimHost, fleet_hosts
from trnwatch.workloads.sim.scenarios import SCENARIOS, fleet_ultraservers
from trnwatch.workloads.sim.topology import TOPOLOGIES, get_topology

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MEMORY_CATEGORIES = ("constants", "model_code", "model_shared_scratchpad", "runtime_memory", "tensors")
_PATH = re.compile(r"/hosts/(\d+)/metrics")


def _label_text(labels: dict[str, str]) -> str:
    """`{k="v",...}` sorted by name, values escaped as prometheus_client escapes them."""
    escaped = (
        k + '="' + v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"") + '"'
        for k, v in sorted(labels.items())
    )
    return "{" + ",".join(escaped) + "}"


@dataclass
class _Family:
    name: str  # the exposition name: counters without `_total`, info metrics with `_info`
    doc: str
    kind: str  # "gauge", "counter" or "info"
    # label text -> [value, created unix seconds]; insertion order is the output order
    series: dict[str, list[float]] = field(default_factory=dict)

    def set(self, labels: dict[str, str], value: float) -> None:
        key = _label_text(labels)
        entry = self.series.get(key)
        if entry is None:
            self.series[key] = [float(value), time.time()]
        else:
            entry[0] = float(value)

    def inc(self, labels: dict[str, str], amount: float) -> None:
        key = _label_text(labels)
        entry = self.series.get(key)
        if entry is None:
            self.series[key] = [float(amount), time.time()]
        else:
            entry[0] += amount

    def render(self, out: list[str]) -> None:
        doc = self.doc.replace("\\", r"\\").replace("\n", r"\n")
        sample = self.name + ("_total" if self.kind == "counter" else "")
        out.append(f"# HELP {sample} {doc}\n# TYPE {sample} {'counter' if self.kind == 'counter' else 'gauge'}\n")
        out.extend(f"{sample}{key} {floatToGoString(v[0])}\n" for key, v in self.series.items())
        if self.kind == "counter" and self.series:
            out.append(f"# HELP {self.name}_created {doc}\n# TYPE {self.name}_created gauge\n")
            out.extend(f"{self.name}_created{key} {floatToGoString(v[1])}\n" for key, v in self.series.items())


class ExporterState:
    """The vendor exporter's metrics for one host, fed neuron-monitor report dicts in order."""

    def __init__(self) -> None:
        self._families: dict[str, _Family] = {}
        self._infos: dict[str, _Family] = {}  # set once, never cleared

    def _family(self, name: str, doc: str, kind: str = "gauge") -> _Family:
        family = self._families.get(name)
        if family is None:
            family = self._families[name] = _Family(name, doc, kind)
        return family

    def _info(self, name: str, doc: str, labels: dict[str, str]) -> None:
        if name not in self._infos:
            info = self._infos[name] = _Family(name, doc, "info")
            info.set(labels, 1.0)

    def consume(self, report: dict) -> None:
        """Apply one report as the vendor script's `process_data` does."""
        info = report.get("instance_info") or {}
        instance = {
            "instance_name": info.get("instance_name", ""),
            "instance_id": info.get("instance_id", ""),
            "instance_type": info.get("instance_type", ""),
            "availability_zone": info.get("instance_availability_zone", ""),
            "region": info.get("instance_region", ""),
            "subnet_id": info.get("subnet_id", ""),
        }
        runtimes = report.get("neuron_runtime_data") or []
        if runtimes:
            for runtime in runtimes:
                if runtime.get("error"):
                    continue
                labels = {**instance, "runtime_tag": str(runtime.get("neuron_runtime_tag", ""))}
                self._groups(runtime.get("report") or {}, labels)
        else:
            for family in self._families.values():
                family.series.clear()
        if report.get("system_data") is not None:
            self._groups(report["system_data"], instance)
        self._info("instance_info", "EC2 instance information", instance)
        hardware = report.get("neuron_hardware_info")
        if hardware is not None:
            labels = {
                name: str(hardware[name])
                for name in ("neuron_device_count", "neuroncore_per_device_count", "neuron_device_memory_size")
                if name in hardware
            }
            self._info("neuron_hardware_info", "Neuron Hardware Information", {**labels, **instance})
        simulator = report.get("trnwatch_simulator")
        if simulator is not None:
            self._info(
                "trnwatch_simulator_info",
                "trnwatch simulator: this host is simulated",
                {**{k: str(v) for k, v in simulator.items()}, **instance},
            )

    def _groups(self, groups: dict, labels: dict[str, str]) -> None:
        for name, data in groups.items():
            handler = getattr(self, f"_{name}", None)
            if handler is not None and isinstance(data, dict) and not data.get("error"):
                handler(data, labels)

    def _neuroncore_counters(self, data: dict, labels: dict[str, str]) -> None:
        family = self._family("neuroncore_utilization_ratio", "NeuronCore utilization ratio")
        for core, counters in data["neuroncores_in_use"].items():
            family.set({**labels, "neuroncore": str(int(core))}, counters["neuroncore_utilization"] / 100.0)

    def _neuron_runtime_vcpu_usage(self, data: dict, labels: dict[str, str]) -> None:
        family = self._family("neuron_runtime_vcpu_usage_ratio", "Runtime vCPU utilization ratio")
        for usage in ("user", "system"):
            family.set({**labels, "usage_type": usage}, data["vcpu_usage"][usage] / 100.0)

    def _memory_used(self, data: dict, labels: dict[str, str]) -> None:
        used = data["neuron_runtime_used_bytes"]
        family = self._family("neuron_runtime_memory_used_bytes", "Runtime memory used bytes")
        for location in ("host", "neuron_device"):
            family.set({**labels, "memory_location": location}, used[location])
        for category in MEMORY_CATEGORIES:
            family = self._family(
                f"neuroncore_memory_usage_{category}", f"NeuronCore memory utilization for {category}"
            )
            for core, usage in used["usage_breakdown"]["neuroncore_memory_usage"].items():
                family.set({**labels, "neuroncore": str(int(core)), "memory_location": "None"}, usage[category])

    def _execution_stats(self, data: dict, labels: dict[str, str]) -> None:
        family = self._family("execution_errors", "Execution errors total", "counter")
        for error_type, count in data["error_summary"].items():
            family.inc({**labels, "error_type": error_type}, count)
        family = self._family("execution_status", "Execution status total", "counter")
        for status_type, count in data["execution_summary"].items():
            family.inc({**labels, "status_type": status_type}, count)
        family = self._family("execution_latency_seconds", "Execution latency in seconds")
        total = data["latency_stats"]["total_latency"]
        if total is not None:
            for percentile, seconds in total.items():
                family.set({**labels, "percentile": percentile}, seconds)

    def _neuron_hw_counters(self, data: dict, labels: dict[str, str]) -> None:
        family = self._family("hardware_ecc_events", "Hardware ecc events total", "counter")
        for device in data["neuron_devices"]:
            for event in ("mem_ecc_corrected", "mem_ecc_uncorrected", "sram_ecc_corrected", "sram_ecc_uncorrected"):
                family.inc(
                    {**labels, "event_type": event, "neuron_device_index": str(device["neuron_device_index"])},
                    device[event],
                )

    def _vcpu_usage(self, data: dict, labels: dict[str, str]) -> None:
        self._family("system_vcpu_count", "System vCPU count").set(labels, len(data["usage_data"]))
        family = self._family("system_vcpu_usage_ratio", "System CPU utilization ratio")
        average = data["average_usage"]
        for usage, parts in (("user", ("user", "nice")), ("system", ("system", "io_wait", "irq", "soft_irq"))):
            family.set({**labels, "usage_type": usage}, min(sum(average[p] for p in parts), 100.0) / 100.0)

    def _memory_info(self, data: dict, labels: dict[str, str]) -> None:
        for kind, prefix in (("memory", "system_memory"), ("swap", "system_swap")):
            for stat in ("total_bytes", "used_bytes"):
                self._family(f"{prefix}_{stat}", f"System {kind} {stat} bytes").set(labels, data[f"{kind}_{stat}"])

    def render(self) -> str:
        """The exposition text of the host's exporter metrics (without the process's own series)."""
        out: list[str] = []
        for family in (*self._families.values(), *self._infos.values()):
            family.render(out)
        return "".join(out)


class TickClock:
    """Which simulated tick it is: `start_tick` + whole periods since start, or always `frozen_tick`."""

    def __init__(self, period_s: float, start_tick: int = 0, frozen_tick: int | None = None):
        self.period_s = period_s
        self.start_tick = frozen_tick if frozen_tick is not None else start_tick
        self.frozen = frozen_tick is not None
        self._start_s = time.monotonic()

    def tick(self) -> int:
        if self.frozen:
            return self.start_tick
        return self.start_tick + int((time.monotonic() - self._start_s) / self.period_s)


class HostExporter:
    """One simulated host behind the exporter: consumes its reports up to the clock's tick."""

    def __init__(self, host: SimHost, clock: TickClock):
        self.host = host
        self.clock = clock
        self.state = ExporterState()
        self._next_tick = clock.start_tick
        self._lock = threading.Lock()

    def metrics_text(self) -> str | None:
        """The exporter's text now, or None once the host is lost."""
        with self._lock:
            now = self.clock.tick()
            while self._next_tick <= now:
                if not self.host.alive(self._next_tick):
                    return None
                self.state.consume(self.host.report(self._next_tick))
                self._next_tick += 1
            return self.state.render()


def _process_series() -> str:
    """The exporter process's own python_* and process_* series, as every real scrape has them."""
    return generate_latest(REGISTRY).decode()


class FleetExporter:
    """An HTTP server on 127.0.0.1 answering for many simulated hosts (see module docstring)."""

    def __init__(self, hosts: list[SimHost], clock: TickClock, port: int = 0, bind: str = "127.0.0.1"):
        self.hosts = [HostExporter(h, clock) for h in hosts]
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                match = _PATH.fullmatch(self.path)
                index = (
                    int(match.group(1))
                    if match
                    else (0 if self.path == "/metrics" and len(exporter.hosts) == 1 else None)
                )
                if index is None or index >= len(exporter.hosts):
                    self.send_error(404, "no such simulated host")
                    return
                text = exporter.hosts[index].metrics_text()
                if text is None:
                    self.send_error(503, "simulated host lost")
                    return
                body = (_process_series() + text).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", CONTENT_TYPE)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the scraper gave up (timeout): its next scrape will say so

            def log_message(self, format: str, *args) -> None:  # noqa: A002
                pass  # one line per scrape would drown the benchmark's output

        self.server = ThreadingHTTPServer((bind, port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name="sim-exporter", daemon=True)

    def start(self) -> "FleetExporter":
        self._thread.start()
        return self

    def path(self, index: int) -> str:
        return f"/hosts/{index}/metrics"

    def url(self, index: int) -> str:
        return f"http://127.0.0.1:{self.port}{self.path(index)}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def serve_host(host: SimHost, port: int, count: int | None, log) -> int:
    """`trnwatch sim --serve-prometheus PORT`: serve one host's exporter text on
    http://127.0.0.1:PORT/metrics until `count` periods have passed (or forever); exit status 1
    when the host is lost, as the drop-in does."""
    exporter = FleetExporter([host], TickClock(host.period_s), port).start()
    log(1, f"serving the exporter format on {exporter.url(0)} and http://127.0.0.1:{exporter.port}/metrics")
    try:
        tick = 0
        while count is None or tick < count:
            if not host.alive(tick):
                print(host.lost_message(tick), file=sys.stderr, flush=True)
                return 1
            time.sleep(host.period_s)
            tick += 1
        return 0
    finally:
        exporter.close()


def fleet(topology_name: str, ultraservers: int, seed: int, scenario: str, period_s: float) -> list[SimHost]:
    """Hosts of `ultraservers` simulated UltraServers running one job, as the demo's
    `--ultraservers` (fleet.py `fleet_hosts`): each host has its own instance id and each
    UltraServer its own ultraserver_id."""
    return fleet_hosts(get_topology(topology_name), seed, scenario, period_s, ultraservers=ultraservers)


def main(argv: list[str] | None = None) -> int:
    """`python -m trnwatch.workloads.sim.exporter`: many simulated hosts' exporters on one port."""
    parser = argparse.ArgumentParser(
        prog="python -m trnwatch.workloads.sim.exporter",
        description="Serve the vendor exporter's format for a simulated fleet at "
        "http://127.0.0.1:PORT/hosts/<n>/metrics (n = 0 .. hosts-1).",
    )
    parser.add_argument("--topology", choices=list(TOPOLOGIES), default="trn3-gen2-us")
    parser.add_argument(
        "--ultraservers",
        type=int,
        default=None,
        help="number of simulated UltraServers, one job over all of them (default 1; efa-link: 2, and refuses 1)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scenario", choices=list(SCENARIOS), default="healthy")
    parser.add_argument("--period", type=float, default=1.0, help="seconds per simulated tick (default 1)")
    parser.add_argument("--start-tick", type=int, default=0, help="first tick served (default 0)")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: any free one)")
    args = parser.parse_args(argv)
    try:
        ultraservers = fleet_ultraservers(get_topology(args.topology), args.scenario, args.ultraservers)
    except ValueError as exc:
        parser.error(str(exc))
    hosts = fleet(args.topology, ultraservers, args.seed, args.scenario, args.period)
    exporter = FleetExporter(hosts, TickClock(args.period, args.start_tick), args.port).start()
    print(f"serving {len(hosts)} hosts on http://127.0.0.1:{exporter.port}/hosts/<n>/metrics", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        exporter.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
