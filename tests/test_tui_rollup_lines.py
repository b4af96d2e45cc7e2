"""The rollup's figures and boundary lines: one builder (tui/rollup_lines.py) for the UltraServer
and cluster views, so both say the uncorrected ECC count and the configured hosts that never
reported, and both keep every figure on a narrow screen."""

import asyncio

from trnwatch.collectors.lines import Line
from trnwatch.ledger.ledger import Ledger
from trnwatch.ledger.rollups import Rollup
from trnwatch.themes.palettes import PALETTES
from trnwatch.tui.app import TrnwatchApp
from trnwatch.tui.rollup_lines import rollup_lines
from trnwatch.tui.widgets import TextLines
from tests import reports as R


def feed(ledger: Ledger, instance_id: str, t: float, corrected: int = 0, uncorrected: int = 0) -> None:
    system = R.system(chips=2, ecc={0: corrected})
    system["neuron_hw_counters"]["neuron_devices"][0]["mem_ecc_uncorrected"] = uncorrected
    runtime = R.runtime(1, "rank", [0, 1, 2, 3], util={c: 80.0 for c in range(4)})
    report = R.report(
        [runtime], hardware=R.hardware_trn3(chips=2), system_data=system, instance_info=R.instance(instance_id)
    )
    ledger.ingest(Line(instance_id, "neuron-monitor", t, R.line(report)))


def summary(app: TrnwatchApp) -> list[str]:
    return app.view.query_one(".summary", TextLines).lines


def test_both_views_show_uncorrected_ecc_and_hosts_that_never_reported():
    # One UltraServer of three configured hosts: one reports an uncorrected ECC error, one
    # reported long ago (stale), one never reported. The cluster is that UltraServer.
    ledger = Ledger("live", ultraservers={"i-a1": "us-a", "i-a2": "us-a", "i-a3": "us-a"})
    feed(ledger, "i-a2", 95.0)
    feed(ledger, "i-a1", 100.0)
    feed(ledger, "i-a1", 101.0, corrected=3, uncorrected=1)
    app = TrnwatchApp(ledger, clock=lambda: 101.5, theme="dark", refresh_s=3600)
    seen: dict[str, list[str]] = {}

    async def run() -> None:
        async with app.run_test(size=(120, 30)) as pilot:
            await pilot.pause()
            seen["ultraserver"] = summary(app)[1:3]  # under its title line
            await pilot.press("l")
            await pilot.pause()
            seen["cluster"] = summary(app)[0:2]

    asyncio.run(run())
    assert seen["ultraserver"] == seen["cluster"]
    figures, boundary = seen["cluster"]
    assert "ECC 1 chip (1 uncorrected)" in figures
    assert "over 2 chips on 1/3 fresh hosts  stale 1  lost 0  never reported 1  (left out of the figures)" in boundary


def rollup(**changes) -> Rollup:
    figures = dict(
        hosts_total=1152,
        hosts_fresh=1150,
        hosts_stale=1,
        hosts_lost=0,
        hosts_silent=1,
        chips=4600,
        chips_total=4604,
        hbm_used_bytes=int(52.06 * 2**40),
        hbm_capacity_bytes=int(61.69 * 2**40),
        util_mean_pct=51.9,
        util_min_pct=0.0,
        chips_idle=140,
        chips_with_ecc=1,
        chips_with_uncorrected_ecc=1,
    )
    return Rollup(**{**figures, **changes})


def test_a_narrow_screen_keeps_every_figure_in_shorter_words():
    pal = PALETTES["dark"]
    wide = [line.plain for line in rollup_lines(rollup(), pal, 200)]
    narrow = [line.plain for line in rollup_lines(rollup(), pal, 80)]
    assert wide == [
        "HBM 52.06 / 61.69 TiB (84.4%)  util mean 51.9% min 0.0%  idle 140  ECC 1 chip (1 uncorrected)",
        "over 4600 chips on 1150/1152 fresh hosts  stale 1  lost 0  never reported 1  (left out of the figures)",
    ]
    assert narrow == [
        "HBM 52.06 / 61.69 TiB (84.4%)  util 51.9% min 0.0%  idle 140  ECC 1 (1 uncorr.)",
        "over 4600 chips on 1150/1152 fresh hosts  stale 1  lost 0  never reported 1  (left out)",
    ]
    assert len(narrow[0]) <= 80
    # What fits keeps its long words.
    quiet = rollup(chips_with_uncorrected_ecc=0, hosts_silent=0, hosts_stale=0, hosts_total=1150)
    assert [line.plain for line in rollup_lines(quiet, pal, 80)] == [
        "HBM 52.06 / 61.69 TiB (84.4%)  util mean 51.9% min 0.0%  idle 140  ECC 1 chip",
        "over 4600 chips on 1150/1150 fresh hosts  stale 0  lost 0",
    ]
