"""Scrape mode's cost per exporter body, in this process, for bench_prometheus.py.

    python tests/benchmarks/scrape_ingest.py BODIES.json
        # one round per line read from stdin, each answered with a line [ingest_s, reader_s]

Imports only what the scrape ingest itself uses (the ledger, the line, the text reader), so
bench_prometheus.py `--against REV` can run it as a child against an older commit's trnwatch
(PYTHONPATH pointing at that commit's package tree) beside one of this tree's, and have the two
measure the same bodies in turns.
"""

import json
import sys
import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from trnwatch.collectors.lines import Line
from trnwatch.collectors.prometheus import scrape_samples
from trnwatch.ledger.ledger import Ledger


def scrape_lines(bodies: list[str]) -> list[str]:
    """The "prometheus" lines a scrape source would give for these bodies."""
    return [json.dumps({"url": "u", "interval_s": 10.0, "body": b}) for b in bodies]


def one_round(lines: list[str], bodies: list[str]) -> tuple[float, float]:
    """(ingest of one exporter body: line JSON, text reader, typed records, fold; the text reader
    alone), process CPU time per body, over all of them once."""
    ledger = Ledger("live")
    start = time.process_time()
    for text in lines:
        ledger.ingest(Line("u", "prometheus", 1000.0, text))
    ingest_s = (time.process_time() - start) / len(lines)
    start = time.process_time()
    for b in bodies:
        scrape_samples(b)
    return ingest_s, (time.process_time() - start) / len(bodies)


def scrape_ingest_s(bodies: list[str]) -> tuple[float, float, float]:
    """(ingest per body, of which the text reader, prometheus_client's parser on the same body),
    process CPU time, best of 3 interleaved rounds."""
    lines = scrape_lines(bodies)
    ingest = reader = parser = float("inf")
    for _ in range(3):  # interleaved rounds, best of each: this machine is noisy
        ingest_s, reader_s = one_round(lines, bodies)
        ingest, reader = min(ingest, ingest_s), min(reader, reader_s)
        start = time.process_time()
        for b in bodies[:6]:
            for family in text_string_to_metric_families(b):
                family.samples  # noqa: B018 - parsed, as trnwatch parsed before
        parser = min(parser, (time.process_time() - start) / 6)
    return ingest, reader, parser


if __name__ == "__main__":
    bodies = json.loads(Path(sys.argv[1]).read_text())
    lines = scrape_lines(bodies)
    for _ in sys.stdin:
        print(json.dumps(one_round(lines, bodies)), flush=True)
