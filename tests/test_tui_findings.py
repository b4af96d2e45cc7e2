"""The fault line and the findings behind it: every demo scenario, every view, 80x24 and 200x60.

The ledgers are the demo's own streams (simulated reports and job telemetry) folded at fixed
ticks and times (`tests/tui_fleet.py`), so nothing waits on the wall clock.
"""

import asyncio

import pytest

from trnwatch.ledger.findings import (
    LEAK_MIN_BYTES_PER_S,
    finding_text,
    hbm_trend,
)
from trnwatch.ledger.hosts import ChipState
from trnwatch.ledger.ledger import Ledger
from trnwatch.session import Session, SourceSpec
from trnwatch.sources import SCENARIO_HELP, SCENARIO_NAMED_S
from trnwatch.themes.palettes import PALETTES
from trnwatch.tui.app import TrnwatchApp
from trnwatch.tui.fault_line import fault_line
from trnwatch.tui.scope import NO_DEVICE_SOURCE
from trnwatch.tui.widgets import TextLines
from tests.test_tui_app import drive, header
from tests.tui_fleet import (
    FAULT_SITE,
    SCENARIO_TICKS,
    make_scenario_app,
    now_at,
    scenario_fault_host,
    scenario_ledger,
)

SIZES = [(80, 24), (200, 60)]
# What the fault line must say first, per scenario: the label and the culprit's site.
EXPECTED = {
    "healthy": "no findings",
    "straggler": f"SLOW rank 120 {FAULT_SITE}/2",
    "hang": f"LATE rank 120 {FAULT_SITE}/2",
    "hbm-leak": f"LEAK {FAULT_SITE}/2",
    "ecc": f"ECC {FAULT_SITE}/2",
    "host-loss": f"DEAD rank 112 {FAULT_SITE}/0",
}
VIEWS = (("u", "ULTRASERVER"), ("h", "HOST"), ("c", "CHIP"), ("j", "JOB"), ("l", "CLUSTER"))


def fault_text(app) -> str:
    return app.query_one("#fault-line", TextLines).lines[0]


def fault_lines_of(app) -> list[str]:
    return app.query_one("#fault-line", TextLines).lines


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_every_view_names_the_fault_and_its_site_first(scenario, size):
    seen = {}

    async def check(app, pilot):
        for key, scope in VIEWS:
            await pilot.press(key)
            await pilot.pause()
            seen[scope] = (header(app), fault_text(app))

    drive(make_scenario_app(scenario), size=size, check=check)
    for scope, (head, fault) in seen.items():
        assert scope in head, (scope, head)
        assert fault.lstrip().startswith(EXPECTED[scenario]), (scope, fault)
        assert len(fault.rstrip()) <= size[0]


def test_hang_names_the_dataloader_rank_and_where_its_peers_wait():
    faults = []
    drive(make_scenario_app("hang"), check=lambda app, pilot: faults.append(fault_text(app)))
    fault = faults[0]
    assert f"rank 120 {FAULT_SITE}/2 dataloader" in fault and "575 " in fault and "collective:all_reduce" in fault


def test_at_80_columns_the_story_gives_way_before_any_part_of_the_site():
    findings = list(scenario_ledger("hang").read(now_at(SCENARIO_TICKS["hang"])).findings)
    pal = PALETTES["dark"]
    for width in (40, 60, 80, 120, 200):
        line = fault_line(findings, width, pal).plain
        assert f"LATE rank 120 {FAULT_SITE}/2" in line and "dataloader" in line, (width, line)
        assert len(line) <= max(width, len(f" LATE rank 120 {FAULT_SITE}/2 dataloader"))
    assert "core 8" in fault_line(findings, 200, pal).plain  # wide screens say more
    assert "core 8" not in fault_line(findings, 80, pal).plain


def test_go_to_fault_key_opens_the_culprit_chip():
    seen = drive(make_scenario_app("straggler"), keys=("g",))
    assert seen.app.selection.scope == "chip" and "CHIP 7/2" in seen.header


def test_uncorrected_ecc_is_counted_apart_on_the_ultraserver_and_chip_views():
    text = drive(make_scenario_app("ecc")).text
    assert "ECC 1 (1 uncorr.)" in text  # the rollup line's wording that fits 80 columns
    assert "1 uncorrected ECC" in text  # why 7/2 is the chip to look at first
    chip = drive(make_scenario_app("ecc"), keys=("g",)).text
    assert "(1 UNCORRECTED)" in chip


def test_chips_to_look_at_are_the_outliers_in_the_direction_of_the_fault():
    ledger = scenario_ledger("straggler")
    now_s = now_at(SCENARIO_TICKS["straggler"])
    hosts = list(ledger.hosts.values())
    top = ledger.read(now_s).chips_to_look_at(hosts, (), 5)  # without findings: by utilisation alone
    assert len(top) == 1 and ledger.hosts[top[0].host_id].instance_name == FAULT_SITE and top[0].chip == 2
    assert top[0].why.startswith("busiest: 99% while peers' median is 6")
    healthy = scenario_ledger("healthy")
    assert healthy.read(now_at(SCENARIO_TICKS["healthy"])).chips_to_look_at(list(healthy.hosts.values()), (), 5) == []


def test_hbm_leak_is_a_finding_with_its_rate_and_time_to_full_and_the_chip_view_scales_its_sparkline():
    ledger = scenario_ledger("hbm-leak")
    (leak,) = [f for f in list(ledger.read(now_at(SCENARIO_TICKS["hbm-leak"])).findings) if f.kind == "hbm-leak"]
    assert leak.trend.rate_bytes_per_s == pytest.approx(64 << 20) and leak.trend.time_to_full_s > 0
    assert "+64 MiB/s" in finding_text(leak) and "full in" in finding_text(leak)
    text = drive(make_scenario_app("hbm-leak"), keys=("g",), size=(100, 60)).text
    history = next(line for line in text.splitlines() if line.strip().startswith("HBM ") and "% of " in line)
    assert history.count("█") >= 1 and "▁" in history  # scaled to its own range: a climb, not a flat line
    assert "LEAK: rising steadily" in text


def test_hbm_that_grows_on_every_chip_alike_is_no_leak():
    def chip(rate_bytes_per_s: float) -> ChipState:
        c = ChipState(0, hbm_capacity_bytes=144 << 30)
        for t in range(20):
            c.history.append(float(t), 50.0, int((100 << 30) + rate_bytes_per_s * t))
        return c

    trend = hbm_trend(chip(2 * LEAK_MIN_BYTES_PER_S), 19.5)
    assert trend.samples == 20 and trend.rate_bytes_per_s == pytest.approx(2 * LEAK_MIN_BYTES_PER_S)
    assert trend.time_to_full_s == pytest.approx(
        ((144 << 30) - (100 << 30) - 19 * trend.rate_bytes_per_s) / trend.rate_bytes_per_s
    )
    assert hbm_trend(chip(0.0), 19.5).time_to_full_s is None
    # warmup: every chip allocates as fast: the ledger's rule needs a chip to outgrow its peers
    warm = scenario_ledger("healthy", 18)
    assert not [f for f in list(warm.read(now_at(18)).findings) if f.kind == "hbm-leak"]


def test_header_fields_keep_their_places_paused_and_simulated_both_show():
    async def check(app, pilot):
        before = header(app)
        await pilot.press("p")
        await pilot.pause()
        after = header(app)
        assert len(before) == len(after)  # same cells, PAUSED in its own (blank until now) place
        assert "SIM" in after and "PAUSED" in after and "08:01:10 UTC" in after and "36 hosts · 144 chips" in after
        assert before.index("SIM") == after.index("SIM")  # PAUSED has a place of its own

    drive(make_scenario_app("straggler"), check=check)


def test_a_job_only_session_opens_on_the_job_view_and_says_why_the_device_scopes_are_empty():
    async def nothing():
        return
        yield

    session = Session(Ledger("live"), [SourceSpec("job-dir:/run", "job", nothing)])
    app = TrnwatchApp(session.ledger, session=session, theme="dark")

    async def check(app, pilot):
        assert app.selection.scope == "job"
        await pilot.press("u")
        await pilot.pause()
        assert NO_DEVICE_SOURCE[:60] in app.view.plain_text()

    drive(app, check=check)


def test_snapshot_text_lists_the_same_findings():
    from trnwatch.ledger.snapshot import build_snapshot, render_text

    ledger = scenario_ledger("ecc")
    snap = build_snapshot(ledger, now_at(SCENARIO_TICKS["ecc"]), None, written_at_s=0.0)
    assert snap.findings[0].kind == "ecc-uncorrected" and snap.findings[0].site["chip"] == 2
    text = render_text(snap)
    assert f"critical: ECC {FAULT_SITE}/2 · 1 uncorrected ECC error" in text


def test_the_job_finding_follows_the_clock_with_no_new_data():
    # The diagnosis is kept per ledger change and "now" (`Ledger.read(now_s)`): with nothing
    # folded, a later clock must still cross the late and dead thresholds, and an earlier one undo them.
    ledger = scenario_ledger("hang", 31)  # the hang began at tick 30
    generation = ledger.generation

    def job_labels(dt_s: float) -> list[str]:
        return [f.label for f in list(ledger.read(now_at(31) + dt_s).findings) if f.kind == "job"]

    assert job_labels(0) == []
    assert job_labels(4) == ["LATE"]
    assert job_labels(10) == ["DEAD"]
    assert job_labels(0) == []
    assert ledger.generation == generation  # nothing was folded meanwhile


def test_a_source_that_never_started_is_on_the_fault_line_and_the_job_view_waits_for_its_own():
    from trnwatch.collectors.streams import SourceLost
    from tests.waiting import until

    async def fails():
        raise SourceLost("nm exited with status 1: no such device")
        yield

    async def silent():  # a --job-dir whose folder has not appeared: nothing yet, not ended
        await asyncio.Event().wait()
        yield

    session = Session(
        Ledger("live"),
        [SourceSpec("local", "neuron-monitor", fails), SourceSpec("job-dir:/run", "job", silent, relay=True)],
    )
    app = TrnwatchApp(session.ledger, session=session, theme="dark")

    async def check(app, pilot):
        await until(lambda: app.findings, "the lost source's finding")
        assert fault_text(app) == " LOST local · nm exited with status 1: no such device"
        assert any("local lost: nm exited with status 1" in str(n.message) for n in app._notifications)
        await pilot.press("j")
        await pilot.pause()
        assert "no job telemetry yet: no line from job-dir:/run so far" in app.view.plain_text()
        await pilot.press("q")

    drive(app, check=check)


def test_a_late_job_that_names_no_rank_keeps_the_age_of_its_silence_at_80_columns():
    # Passive logs (no heartbeats) give no suspect: the finding's short form is the silence's age.
    from trnwatch.ledger.findings import _job_finding
    from trnwatch.ledger.job import JobDiagnosis

    reason = "no progress for 22 s (late after 5 s); 1 rank(s) at step 41 in no region reported, last step 41"
    finding = _job_finding(Ledger("live"), JobDiagnosis("late", reason, (), 22.4, 5.0))
    assert fault_line([finding], 80, PALETTES["dark"]).plain == " LATE · no progress for 22 s"
    assert fault_line([finding], 200, PALETTES["dark"]).plain == f" LATE · {reason}"


def test_at_40x10_the_fault_line_takes_a_second_line_rather_than_cut_the_region():
    lines = []
    seen = drive(make_scenario_app("hang"), size=(40, 10), check=lambda app, _: lines.extend(fault_lines_of(app)))
    assert lines == [f" LATE rank 120 {FAULT_SITE}/2", "  dataloader"]
    assert f"LATE rank 120 {FAULT_SITE}/2" in seen.screen and "  dataloader" in seen.screen


def _words(text: str) -> str:
    return " ".join(text.split())


def test_the_job_view_at_80x24_shows_the_whole_reason_and_evidence_wrapped_never_cut():
    now_s = now_at(SCENARIO_TICKS["hang"])
    diagnosis = scenario_ledger("hang").job_diagnosis(now_s)
    suspect = diagnosis.suspects[0]
    seen = drive(make_scenario_app("hang"), keys=("j",))
    on_screen = _words(seen.screen)
    evidence = f"{suspect.evidence.why}; chip util 0.0% vs peers' median 0.0%"
    assert len(diagnosis.reason) > 80 and len(evidence) > 80  # neither fits one line
    assert _words(diagnosis.reason) in on_screen
    assert _words(evidence) in on_screen
    assert "…" not in seen.text
    assert all(len(line) <= 80 for line in seen.screen.splitlines())


def test_the_ranks_table_keeps_each_region_whole_and_scrolls_sideways_to_it():
    async def check(app, pilot):
        for key in ("j", "end", "right", "right", "right"):
            await pilot.press(key)
            await pilot.pause()

    seen = drive(make_scenario_app("hang"), check=check)
    assert "; ← → scroll sideways)" in seen.text
    assert seen.text.rstrip().endswith("collective:all_reduce")  # the last rank's row, whole
    last_row = seen.screen.rstrip().splitlines()[-2]  # above the footer, scrolled 12 cells right
    assert last_row.rstrip().endswith("collective:all_reduce"), last_row


def test_wrapped_keeps_every_character_and_style_breaks_at_spaces_and_keeps_a_figure_with_its_unit():
    from rich.style import Style

    from trnwatch.tui.scope import styled, wrapped

    red = Style(color="red")
    line = styled(("no progress for 12 s (late after 5 s)", red), " in ", ("x" * 30, None))
    lines = wrapped(line, 24, indent=2)
    assert [text.plain for text in lines] == [
        "no progress for 12 s",
        "  (late after 5 s) in",
        "  " + "x" * 22,
        "  " + "x" * 8,
    ]
    assert all(text.cell_len <= 24 for text in lines)
    assert [span.style for span in lines[1].spans if span.start <= 3 < span.end] == [red]  # styles follow
    assert wrapped(line, 200) == [line]


@pytest.mark.slow
@pytest.mark.parametrize("scenario", list(SCENARIO_NAMED_S))
def test_snapshot_help_says_when_each_scenario_names_its_fault_as_measured(scenario):
    # The demo's reports, sysfs samples and rank files folded tick by tick: the fault line names the
    # fault at its site first at the tick `snapshot --help` says (seconds = tick + 1), and not the tick before.
    seconds = SCENARIO_NAMED_S[scenario]
    for tick, named in ((seconds - 2, False), (seconds - 1, True)):
        top = scenario_ledger(scenario, tick, report_ticks=tick + 1, sysfs=True).read(now_at(tick)).findings
        site = scenario_fault_host(scenario)
        found = bool(top) and top[0].site.host == site and top[0].label not in ("COMPILING", "ECC-BURST")
        assert found == named, (scenario, tick, top[:1])
    assert f"{scenario} {seconds} s" in SCENARIO_HELP
