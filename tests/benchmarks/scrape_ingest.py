"""Scrape mode's cost per exporter body, in this process, for bench_prometheus.py.

    python tests/benchmarks/scrape_ingest.py BODIES.json    # prints [ingest_s, reader_s]

Imports only what the scrape ingest itself uses (the ledger, the line, the text reader), so
bench_prometheus.py `--against REV` can run it as a child against an older commit's trnwatch
(PYTHONPATH pointing at that commit's package tree) and compare the same bodies side by side.
"""

import json
import sys
import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from trnwatch.collectors.lines import Line
from trnwatch.collectors.prometheus import scrape_samples
from trnwatch.ledger.ledger import Ledger


def scrape_ingest_s(bodies: list[str], reference: bool = True) -> tuple[float, float, float]:
    """(ingest of one exporter body: line JSON, text reader, typed records, fold; of which the text
    reader; prometheus_client's parser on the same body, or nan if not `reference`), process CPU
    time, best of 3 interleaved rounds."""
    lines = [json.dumps({"url": "u", "interval_s": 10.0, "body": b}) for b in bodies]
    ingest = reader = parser = float("inf")
    for _ in range(3):  # interleaved rounds, best of each: this machine is noisy
        ledger = Ledger("live")
        start = time.process_time()
        for text in lines:
            ledger.ingest(Line("u", "prometheus", 1000.0, text))
        ingest = min(ingest, (time.process_time() - start) / len(lines))
        start = time.process_time()
        for b in bodies:
            scrape_samples(b)
        reader = min(reader, (time.process_time() - start) / len(bodies))
        if reference:
            start = time.process_time()
            for b in bodies[:6]:
                for family in text_string_to_metric_families(b):
                    family.samples  # noqa: B018 - parsed, as trnwatch parsed before
            parser = min(parser, (time.process_time() - start) / 6)
    return ingest, reader, parser if reference else float("nan")


if __name__ == "__main__":
    ingest_s, reader_s, _ = scrape_ingest_s(json.loads(Path(sys.argv[1]).read_text()), reference=False)
    print(json.dumps([ingest_s, reader_s]))
