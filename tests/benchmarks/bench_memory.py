"""Benchmark: what a hostile neuron-monitor stream costs in memory, per host kept.

    prlimit --as=4000000000 .venv/bin/python -m tests.benchmarks.bench_memory [--hosts 64] [--pids 512]
    prlimit --as=4000000000 .venv/bin/python -m tests.benchmarks.bench_memory --series 800000

With --series N: a Prometheus server's answers to one refresh (8 answers, in Prometheus' own
compact layout, each under the 16 MiB body bound) holding N distinct series between them, split
into host lines as `--prometheus` does and folded into a ledger; RSS before the split (the
answers already held), after it and after the fold.

Every report is within every decoder bound (collectors/limits.py) and as costly as the bounds
allow: a new instance id per report (a new host each), `--pids` fresh pids (runtimes), each
runtime's error 4,096 characters long (with 512 of them the report stays under the 4 MiB line
bound). The reports are folded into a ledger in this process; the command prints the process's
RSS (/proc/self/statm) before and after, per host, and what the ledger kept and counted as
dropped. Run it under an address-space limit: unbounded state is what it looks for.
"""

import argparse
import json
import os
import resource

from trnwatch.collectors.lines import Line
from trnwatch.ledger.ledger import Ledger
from tests import reports as R

TEXT_CHARS = 4096


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / (1 << 20)


def hostile_report(host: int, pids: int) -> str:
    runtimes = []
    for i in range(pids):
        entry = R.runtime(host * pids + i + 1, f"tag-{host}-{i}", [i % 8], util={i % 8: 50.0})
        entry["error"] = f"e{host}-{i}-" + "x" * (TEXT_CHARS - 16)
        runtimes.append(entry)
    return R.line(
        R.report(runtimes, hardware=R.hardware_trn3(chips=4), instance_info=R.instance(instance_id=f"i-{host:08x}"))
    )


def prometheus_answers(series: int) -> list[tuple[str | None, bytes]]:
    """8 answers of series/8 distinct series each (one refresh's query count), compact layout."""
    answers = []
    per_answer = series // 8
    for a in range(8):
        rows = ",".join(
            f'{{"metric":{{"instance_id":"i-{(a * per_answer + i) % 4096:08x}","runtime_tag":"t{a}-{i}",'
            f'"neuroncore":"{i % 32}"}},"value":[1000.0,"0.5"]}}'
            for i in range(per_answer)
        )
        body = ('{"status":"success","data":{"resultType":"vector","result":[' + rows + "]}}").encode()
        answers.append(("neuroncore_utilization_ratio", body))
    return answers


def bench_series(series: int) -> None:
    from trnwatch.collectors.prometheus_sources import host_lines

    answers = prometheus_answers(series)
    before = rss_mib()
    lines = host_lines(answers, 1.0, 1000.0)
    after = rss_mib()
    ledger = Ledger("live")
    for line in lines:
        ledger.ingest(Line("http://prom:9090", "promql", 1000.0, line))
    del lines[1:]
    folded = rss_mib()
    head = json.loads(lines[0]) if lines and lines[0].startswith('{"series_dropped"') else {}
    print(
        json.dumps(
            {
                "series": series,
                "answer_bytes_max": max(len(body) for _, body in answers),
                "rss_before_split_mib": round(before, 1),
                "rss_after_split_mib": round(after, 1),
                "rss_after_fold_mib": round(folded, 1),
                "hosts_kept": len(ledger.hosts),
                "runtimes_kept": sum(len(h.runtimes) for h in ledger.hosts.values()),
                "series_dropped": head.get("series_dropped", 0),
                "rejected": dict(ledger.sources["http://prom:9090"].rejected),
            },
            indent=1,
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=64)
    parser.add_argument("--pids", type=int, default=512)
    parser.add_argument(
        "--series", type=int, default=0, help="measure a Prometheus refresh of this many series instead"
    )
    args = parser.parse_args()
    if args.series:
        bench_series(args.series)
        return
    ledger = Ledger("live")
    sizes = []
    before = rss_mib()
    for host in range(args.hosts):
        text = hostile_report(host, args.pids)
        sizes.append(len(text))
        ledger.ingest(Line("stdin", "neuron-monitor", 1_790_000_000.0 + host, text))
        del text
    after = rss_mib()
    runtimes = sum(len(h.runtimes) for h in ledger.hosts.values())
    stats = ledger.sources["stdin"]
    print(
        json.dumps(
            {
                "hosts_fed": args.hosts,
                "pids_per_report": args.pids,
                "report_bytes_max": max(sizes),
                "rss_before_mib": round(before, 1),
                "rss_after_mib": round(after, 1),
                "mib_per_host": round((after - before) / args.hosts, 3),
                "hosts_kept": len(ledger.hosts),
                "runtimes_kept": runtimes,
                "rejected": dict(stats.rejected),
                "anomalies": dict(sum((h.anomalies for h in ledger.hosts.values()), start=type(stats.rejected)())),
                "pid": os.getpid(),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
