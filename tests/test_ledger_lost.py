"""Lost means lost: a device stream silent past the lost threshold is `lost`, its silence is a gap
on that source, and it comes first among the sources in trouble."""

import json

from trnwatch.collectors.lines import Line
from trnwatch.ledger.ledger import LOST_MIN_S, Ledger, lost_after_s
from trnwatch.ledger.receipt import build_receipt
from trnwatch.ledger.snapshot import build_snapshot, render_text
from trnwatch.metrics import render
from trnwatch.session import Session
from trnwatch.workloads.sim.fleet import fleet_hosts
from trnwatch.workloads.sim.topology import get_topology

T0 = 1_000_000.0


def test_a_silent_device_stream_becomes_lost_counts_a_gap_and_is_the_worst_source():
    hosts = [fleet_hosts(get_topology("trn2.48xlarge"), seed, "healthy", 1.0)[0] for seed in (0, 1)]  # two hosts
    ledger = Ledger("simulated")
    quiet_after = 10
    end = quiet_after + int(LOST_MIN_S) + 5
    for tick in range(end):
        for n, host in enumerate(hosts):
            if n == 1 and tick >= quiet_after:
                continue  # this host's stream goes silent
            ledger.ingest(Line(f"host-{n}", "neuron-monitor", T0 + tick, host.report_line(tick)))
        # a job rank file that also went quiet must not outrank the silent device stream
        if tick == 0:
            ledger.ingest(
                Line(
                    "job:rank-00000.jsonl",
                    "job",
                    T0,
                    json.dumps(
                        {
                            "v": "trnwatch.job/1",
                            "ts": T0,
                            "run": "r",
                            "rank": 0,
                            "event": "heartbeat",
                            "step": 0,
                            "region": "compute",
                            "region_since": T0,
                        }
                    ),
                )
            )
    now_s = T0 + end - 1
    assert lost_after_s(1.0) == LOST_MIN_S
    assert ledger.source_states(T0 + quiet_after + 6)["host-1"] == "stale"  # silent 7 s: stale, not yet lost
    states = ledger.source_states(now_s)
    assert states["host-1"] == "lost" and states["host-0"] == "connected"
    worst = ledger.worst_sources(now_s)
    assert [(s.source_id, state) for s, state in worst][:2] == [("host-1", "lost"), ("job:rank-00000.jsonl", "stale")]
    receipt = {s.id: s for s in build_receipt(ledger, "eof", written_at_s=0.0).sources}
    assert receipt["host-1"].gaps == 1 and receipt["host-1"].gap_seconds == now_s - (T0 + quiet_after - 1)
    assert receipt["host-0"].gaps == 0


def test_a_lost_host_is_lost_on_the_screen_in_metrics_and_in_the_snapshot():
    # One freshness rule (ReadModel.freshness): the snapshot says "lost" where the screen and
    # /metrics do, with the age the screen shows, not a "not fresh" that hides which.
    hosts = [fleet_hosts(get_topology("trn2.48xlarge"), seed, "healthy", 1.0)[0] for seed in (0, 1)]
    ledger = Ledger("simulated")
    end = 10 + int(LOST_MIN_S) + 5
    for tick in range(end):
        for n, host in enumerate(hosts):
            if n == 0 or tick < 10:
                ledger.ingest(Line(f"host-{n}", "neuron-monitor", T0 + tick, host.report_line(tick)))
    now_s = T0 + end - 1
    read = ledger.read(now_s)
    screen = {h.source_id: h for h in read.hosts(list(ledger.hosts.values()))}
    assert (screen["host-0"].state, screen["host-1"].state) == ("fresh", "lost")

    metrics = render(Session(ledger, []), now_s)
    assert 'trnwatch_hosts{state="lost"} 1' in metrics and 'trnwatch_hosts{state="fresh"} 1' in metrics

    snapshot = build_snapshot(ledger, now_s, None, written_at_s=now_s)
    entries = {h.source: h for h in snapshot.hosts}
    assert (entries["host-0"].state, entries["host-1"].state) == ("fresh", "lost")
    assert not entries["host-1"].fresh and entries["host-1"].age_s == screen["host-1"].age_s
    assert f"({entries['host-1'].host}): lost, last report" in render_text(snapshot)
