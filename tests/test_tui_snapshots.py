"""SVG snapshots of the scope views at 80x24 and 200x60 (pytest-textual-snapshot).

The app is built from a ledger of simulated reports at fixed ticks and receive times with a fixed
seed, and a fixed clock, so every run draws the same screen. After a deliberate change to a view,
look at the new SVGs and accept them with `pytest tests/test_tui_snapshots.py --snapshot-update`.
"""

import pytest

from tests.tui_fleet import SCENARIO_TICKS, make_app, make_cluster_app, make_scenario_app

SIZES = [(80, 24), (200, 60)]


@pytest.fixture(autouse=True)
def colour_terminal(monkeypatch):
    """Snapshots are drawn in colour: NO_COLOR would make Textual filter every colour out."""
    monkeypatch.delenv("NO_COLOR", raising=False)


TO_STRAGGLER_CHIP = ("slash", "7", "slash", "2", "enter")


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_ultraserver_view(snap_compare, size):
    assert snap_compare(make_app("straggler"), terminal_size=size)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_chip_view(snap_compare, size):
    assert snap_compare(make_app("straggler"), press=TO_STRAGGLER_CHIP, terminal_size=size)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_job_view(snap_compare, size):
    assert snap_compare(make_app("straggler", with_job=True), press=("j",), terminal_size=size)


def test_host_view_with_a_lost_host(snap_compare):
    assert snap_compare(make_app("host-loss", last_tick=50), press=("slash", "7", "enter"), terminal_size=(80, 24))


def test_chip_view_of_a_lost_host_is_dimmed_and_says_these_are_its_last_figures(snap_compare):
    # As `g` lands after a host loss: the chip's figures are its host's last report's.
    press = ("slash", "7", "slash", "2", "enter")
    assert snap_compare(make_app("host-loss", last_tick=50), press=press, terminal_size=(80, 24))


def test_help_at_80x24_says_first_how_to_close_it_and_quit(snap_compare):
    assert snap_compare(make_app(), press=("question_mark",), terminal_size=(80, 24))


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_cluster_view(snap_compare, size):
    """Three UltraServers (a straggler, ECC events, a stale host) and a host in none; row 2 selected."""
    assert snap_compare(make_cluster_app(), press=("l", "down"), terminal_size=size)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("scenario", list(SCENARIO_TICKS))
def test_ultraserver_view_names_the_fault(snap_compare, scenario, size):
    """Every demo scenario at the tick its fault must be named by (healthy: nothing to name)."""
    assert snap_compare(make_scenario_app(scenario), terminal_size=size)


def test_job_view_of_the_hang_wraps_the_reason_and_evidence_at_80x24(snap_compare):
    assert snap_compare(make_scenario_app("hang"), press=("j",), terminal_size=(80, 24))


def test_the_fault_line_at_40x10_takes_two_lines_rather_than_cut_the_region(snap_compare):
    assert snap_compare(make_scenario_app("hang"), terminal_size=(40, 10))
