"""The cluster view driven by Textual's pilot: rows per UltraServer, drill-down, sort, the job's
stalls, one UltraServer, and (slow) keys answered at 32 UltraServers = 1,152 hosts while a
refresh folds."""

import json

import pytest

from trnwatch.collectors.lines import Line
from trnwatch.ledger.ledger import Ledger
from trnwatch.tui.app import TrnwatchApp
from trnwatch.tui.widgets import TextLines
from trnwatch.workloads.sim.fleet import SimHost
from trnwatch.workloads.sim.job import rank_events
from trnwatch.workloads.sim.topology import get_topology
from tests.test_tui_app import drive, header
from tests.tui_fleet import (
    cluster_hosts,
    cluster_line,
    cluster_view_latency,
    make_app,
    make_cluster_app,
    now_at,
    scale_app,
)


def rows(text: str) -> list[str]:
    """The table rows of the cluster view's text: the lines under the column heads."""
    lines = text.splitlines()
    heads = next(i for i, line in enumerate(lines) if line.startswith("UltraServer "))
    return [line for line in lines[heads + 1 :] if line.strip()]


def ultraserver_id(seed: int) -> str:
    """The UltraServer id the simulator reports for the UltraServer of `seed`."""
    return next(h for h in cluster_hosts() if h.seed == seed).report(0)["instance_info"]["ultraserver_id"]


def test_cluster_key_shows_every_ultraserver_as_a_row_and_the_header_names_the_cluster_and_its_boundary():
    seen = drive(make_cluster_app(), keys=("l",))
    assert seen.app.selection.scope == "cluster"
    assert "CLUSTER · 3 UltraServers · 109 hosts · 448 chips" in seen.header
    text = seen.text
    assert "over 444 chips on 108/109 fresh hosts  stale 1  lost 0  (left out)" in text
    assert "ECC 1 (1 uncorr.)" in text and "idle 140" in text  # the short wording that fits 80 columns
    lines = rows(seen.text)
    assert len(lines) == 4
    stale = next(line for line in lines if line.startswith(ultraserver_id(2)[:15]))
    assert stale.split()[1:4] == ["35/36", "140", "16.61/19.69"]  # the stale host is left out
    ecc = next(line for line in lines if line.startswith(ultraserver_id(1)[:15]))
    assert ecc.split()[-2:] == ["0", "1"]  # idle chips, chips with ECC; no stalls figure
    assert lines[-1].startswith("(no UltraServer)   1/1    16")
    # no job telemetry: the stalls column says nothing at all, and the summary says why
    assert "stalls: no job telemetry" in text and "STALLED" not in text and "SLOW" not in text


def test_enter_drills_into_the_selected_ultraserver_and_escape_comes_back_to_its_row():
    async def check(app, pilot):
        second = app.view.row_groups[1]
        await pilot.press("down", "enter")
        await pilot.pause()
        assert (app.selection.scope, app.selection.group) == ("ultraserver", second)
        assert f"ULTRASERVER {second[:11]}" in header(app) and "(2/4) · 36 hosts · 144 chips" in header(app)
        await pilot.press("escape")
        await pilot.pause()
        assert (app.selection.scope, app.selection.group) == ("cluster", second)

    drive(make_cluster_app(), keys=("l",), check=check)


def test_the_ultraserver_views_brackets_and_the_cluster_selection_are_one_choice():
    def check(app, pilot):
        assert app.selection.group == "" == app.view.row_groups[-1]  # the hosts in no UltraServer: last

    drive(
        make_cluster_app(),
        keys=("u", "right_square_bracket", "right_square_bracket", "right_square_bracket", "l"),
        check=check,
    )


def test_sort_key_puts_the_idle_then_the_ecc_ultraserver_first():
    util = drive(make_cluster_app(), keys=("l", "s"))
    assert "sort lowest mean utilisation" in util.text
    assert rows(util.text)[0].startswith(ultraserver_id(2)[:15])  # the job on it stalled: every chip idle
    ecc = drive(make_cluster_app(), keys=("l", "s", "s", "s"))
    assert "sort most chips with ECC events" in ecc.text
    assert rows(ecc.text)[0].startswith(ultraserver_id(1)[:15])


def test_clicking_a_row_opens_that_ultraserver():
    async def check(app, pilot):
        detail = app.view.query_one(".detail", TextLines)
        region = detail.content_region
        await pilot.click(offset=(region.x + 2, region.y + 2))
        await pilot.pause()
        assert (app.selection.scope, app.selection.group) == ("ultraserver", app.query_one("#cluster").row_groups[2])

    drive(make_cluster_app(), keys=("l",), check=check)


def test_arrows_keep_the_selected_row_on_screen_when_the_rows_scroll():
    async def check(app, pilot):
        detail = app.view.query_one(".detail", TextLines)
        for _ in range(40):
            await pilot.press("down")
        await pilot.pause()
        assert app.selection.group == app.view.row_groups[-1]
        assert detail.scroll_offset.y > 0 and detail.scroll_offset.y + detail.size.height == len(app.view.row_groups)

    ledger = Ledger("simulated")
    topology = get_topology("trn3-gen2-us")
    for seed in range(24):  # 24 UltraServers of 2 hosts: more rows than 80x24 shows
        for h in range(2):
            ledger.ingest(cluster_line(SimHost(topology, h, seed, "healthy"), 25))
    drive(TrnwatchApp(ledger, clock=lambda: now_at(25), theme="dark"), keys=("l",), check=check)


def test_one_ultraserver_is_one_row():
    seen = drive(make_app(), keys=("l",))
    assert "CLUSTER · 1 UltraServer · 36 hosts · 144 chips" in seen.header
    assert len(rows(seen.text)) == 1 and "36/36" in rows(seen.text)[0]


def test_stalls_column_marks_the_ultraserver_holding_the_hung_rank():
    hung = [SimHost(get_topology("trn3-gen1-us"), h, 0, "hang") for h in range(4)]  # suspect: host 3 chip 2
    healthy = [SimHost(get_topology("trn3-gen2-us"), h, 1, "healthy") for h in range(36)]
    ledger = Ledger("simulated")
    last_tick = 69
    for tick in range(last_tick + 1):
        for host in hung:
            for chip in range(host.topology.chips_per_host):
                for core in range(host.topology.cores_per_chip):
                    for event in rank_events(host, chip, core, tick, now_at(tick) - 0.5):
                        ledger.ingest(Line(f"job:rank-{event['rank']}", "job", event["ts"], json.dumps(event)))
    for tick in (last_tick - 1, last_tick):
        for host in hung + healthy:
            ledger.ingest(cluster_line(host, tick))
    seen = drive(TrnwatchApp(ledger, clock=lambda: now_at(last_tick), theme="dark"), keys=("l",))
    lines = rows(seen.text)
    hung_id = hung[0].report(0)["instance_info"]["ultraserver_id"]
    hung_row = next(line for line in lines if line.startswith(hung_id[:15]))
    healthy_row = next(line for line in lines if line is not hung_row)
    assert hung_row.rstrip().endswith("STALLED r200")  # logical core 0 of host 3 chip 2: (3 * 16 + 2) * 4
    assert healthy_row.rstrip().endswith(" 0")  # its ECC count ends the row: no stalls figure
    assert "job STALLED  1 suspect rank on 1 row  rank 200 (host " in seen.text


@pytest.mark.slow
def test_keys_are_answered_at_1152_hosts_before_the_refresh_that_folds_meanwhile_ends():
    """Each "down" is pressed just after a refresh's 1,152 host lines start to fold on the event
    loop; the selection moves (and the view repaints) before that fold is done. How long a key
    takes is a figure for `tests/benchmarks/bench_tui.py`, not a threshold here."""
    app, next_refresh = scale_app(32)
    figures = {}

    async def check(app, pilot):
        figures.update(await cluster_view_latency(app, pilot, next_refresh, keys=10))
        assert "CLUSTER · 32 UltraServers · 1152 hosts · 4608 chips" in header(app)
        assert len(rows(app.view.plain_text())) == 32
        assert app.selection.group == app.view.row_groups[10]

    drive(app, check=check)
    assert len(figures["key_ms"]) == 10 and all(figures["answered_while_folding"]), figures
