"""Benchmark: ingest cost per host report, as a ratio to bare `json.loads` of the same bytes.

    python tests/benchmarks/bench_ingest.py [--reports N]

Ingest = parse + validate (pydantic) + fold into the ledger, i.e. `Ledger.ingest(line)`. Both
sides run here, interleaved in rounds, on the same report texts (simulated steady-state hosts
of each topology, different ticks), and the best round of each is compared: this machine is
noisy, so a ratio measured side by side is the figure that means something. The projected CPU
share is best-round ingest time x hosts x 1 report/s, as a share of one core.
"""

import argparse
import json
import time

from trnwatch.collectors.lines import Line
from trnwatch.collectors.neuron_monitor import parse_report
from trnwatch.ledger.ledger import Ledger
from trnwatch.workloads.sim.fleet import SimHost
from trnwatch.workloads.sim.topology import get_topology

STEADY_TICK = 25  # past compile and warmup: every core busy, models loaded


def _best_per_report_s(fn, texts, rounds):
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        fn(texts)
        best = min(best, (time.perf_counter() - start) / len(texts))
    return best


def measure(topology_name: str, reports: int, rounds: int) -> dict:
    topology = get_topology(topology_name)
    host = SimHost(topology, 0, seed=0, scenario="healthy")
    texts = [host.report_line(STEADY_TICK + i) for i in range(reports)]

    def loads(batch):
        for t in batch:
            json.loads(t)

    def parse(batch):
        for t in batch:
            parse_report(t)

    def ingest(batch):
        ledger = Ledger("simulated")
        for i, t in enumerate(batch):
            ledger.ingest(Line("bench", "neuron-monitor", 1000.0 + i, t))

    results = {"loads": [], "parse": [], "ingest": []}
    for _ in range(rounds):  # interleave so drift on a noisy machine hits all three alike
        results["loads"].append(_best_per_report_s(loads, texts, 1))
        results["parse"].append(_best_per_report_s(parse, texts, 1))
        results["ingest"].append(_best_per_report_s(ingest, texts, 1))
    best = {k: min(v) for k, v in results.items()}
    return {"topology": topology_name, "chips_per_host": topology.chips_per_host,
            "report_bytes": sum(len(t) for t in texts) // len(texts), **best}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reports", type=int, default=200, help="report texts per round (default 200)")
    p.add_argument("--rounds", type=int, default=7, help="interleaved rounds; the best of each side is kept (default 7)")
    args = p.parse_args()
    print(f"{'topology':<16}{'bytes':>8}{'json.loads':>12}{'parse':>10}{'ingest':>10}{'ingest/loads':>14}"
          f"{'CPU 36 hosts':>14}{'CPU 1152 hosts':>16}")
    for name in ("trn3-gen2-us", "trn3-gen1-us", "trn2.48xlarge"):
        m = measure(name, args.reports, args.rounds)
        ratio = m["ingest"] / m["loads"]
        print(f"{name:<16}{m['report_bytes']:>8}{m['loads'] * 1e6:>10.0f}us{m['parse'] * 1e6:>8.0f}us"
              f"{m['ingest'] * 1e6:>8.0f}us{ratio:>13.2f}x{m['ingest'] * 36 * 100:>13.2f}%{m['ingest'] * 1152 * 100:>15.1f}%")


if __name__ == "__main__":
    main()
