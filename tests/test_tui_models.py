"""The TUI's pure parts, without Textual: sanitising, glyphs, sparklines, view models, snapshots."""

import json

from rich.segment import Segment
from rich.style import Style
from rich.text import Text

from trnwatch.ledger.ledger import Ledger
from trnwatch.ledger.read_model import chip_summary
from trnwatch.ledger.rollups import chip_ecc
from trnwatch.ledger.snapshot import Snapshot, build_snapshot, render_text, session_now_s, snapshot_json
from trnwatch.themes import THEME_NAMES, default_theme, next_theme
from trnwatch.themes.palettes import PALETTES, ROLES, TEXTUAL_THEMES
from trnwatch.tui.host_rows import resolve_target, sort_and_filter
from trnwatch.tui.job_model import job_model
from trnwatch.tui.scope import styled
from trnwatch.tui.sources_model import sources_model
from trnwatch.tui.text import clean, clip
from trnwatch.tui.ultraserver_model import ultraserver_model
from trnwatch.tui.widgets import hbm_glyph, merge_blanks, sparkline, util_glyph
from tests.tui_fleet import (
    BASE_S,
    LAST_TICK,
    STRAGGLER,
    fleet_ledger,
    new_fleet_ledger,
    now_at,
    received_s,
    report_lines,
)


def test_clean_removes_control_and_escape_characters_but_keeps_the_text():
    tag = "[bold red]x[/]\x1b]52;c;aGVsbG8=\x07\x1b[31mred\u202e\x00\tend"
    assert clean(tag) == "[bold red]x[/]]52;c;aGVsbG8=[31mred end"
    assert clip("abcdef", 4) == "abc…"
    assert clip("日本語テキスト", 5) == "日本…"  # cut by terminal cells, not characters


def test_glyphs_show_levels_and_keep_zero_apart_from_absent():
    assert [util_glyph(u) for u in (None, 0.0, 1.0, 50.0, 99.0, 100.0)] == ["-", "·", "▁", "▅", "█", "█"]
    assert [hbm_glyph(f) for f in (None, 10.0, 30.0, 60.0, 95.0)] == ["-", "░", "▒", "▓", "█"]


def test_sparkline_leaves_a_blank_per_missing_report_and_never_interpolates():
    samples = [(100.0, 10.0), (101.0, 50.0), (104.0, 80.0), (105.0, None)]  # reports of 102 and 103 missing
    assert sparkline(samples, now_s=105.4, period_s=1.0, width=6, maximum=100.0) == "▁▅  ▇-"
    # A host silent since 105: the blanks run up to now.
    assert sparkline(samples, now_s=108.4, period_s=1.0, width=8, maximum=100.0) == "▁▅  ▇-  "


def test_merge_blanks_joins_spaces_into_the_segment_before_them():
    red, blue = Style(color="red"), Style(color="blue")
    merged = merge_blanks([Segment("█", red), Segment(" ", blue), Segment("█", red), Segment("x", blue)])
    assert merged == [Segment("█ █", red), Segment("x", blue)]
    # A reversed (cursor) space is visible: it keeps its own style.
    cursor = Style(color="red", reverse=True)
    assert merge_blanks([Segment("█", red), Segment(" ", cursor)]) == [Segment("█", red), Segment(" ", cursor)]


def test_every_theme_has_a_palette_with_every_role_and_eight_levels():
    assert set(PALETTES) == set(TEXTUAL_THEMES) == set(THEME_NAMES)
    for palette in PALETTES.values():
        assert set(palette.roles) == set(ROLES) and len(palette.heat) == len(palette.hbm) == 8
    assert all(style.color is None for style in PALETTES["mono"].heat + PALETTES["mono"].hbm)


def test_themes_default_to_mono_under_no_color_and_cycle_through_all():
    assert default_theme(None, {"NO_COLOR": "1"}) == "mono"
    assert default_theme(None, {}) == "dark"
    assert default_theme("light", {"NO_COLOR": "1"}) == "light"
    name, seen = "dark", []
    for _ in THEME_NAMES:
        seen.append(name)
        name = next_theme(name)
    assert sorted(seen) == sorted(THEME_NAMES) and name == "dark"


def test_ultraserver_model_states_its_boundary_and_finds_the_straggler():
    ledger = fleet_ledger("straggler")
    m = ultraserver_model(ledger.read(now_at(LAST_TICK)), None)
    assert (m.rollup.hosts_total, m.rollup.chips_total, m.rollup.hosts_fresh, m.rollup.chips) == (36, 144, 36, 144)
    assert m.rollup.hbm_capacity_bytes == 144 * 144 * 2**30
    host, chip = STRAGGLER
    row = next(r for r in m.rows if r.number == host)
    assert row.name == f"sim-trn3-gen2-us-{host:02d}"  # numbers follow the host names
    utils = {c.index: c.util_pct for c in row.chips}
    assert utils[chip] > 95.0 and all(u < 70.0 for i, u in utils.items() if i != chip)


def test_lost_host_is_stale_and_left_out_of_the_rollup_with_its_age():
    ledger = fleet_ledger("host-loss", last_tick=50)  # host 7 silent from tick 45
    m = ultraserver_model(ledger.read(now_at(50)), None, filter_="not-fresh")
    assert [r.number for r in m.rows] == [7]
    assert m.rows[0].state == "stale" and round(m.rows[0].age_s) == 6
    assert (m.rollup.hosts_fresh, m.rollup.chips, m.rollup.hosts_stale) == (35, 140, 1)


def test_sort_and_filter_by_ecc_and_hbm():
    ledger = fleet_ledger("ecc", last_tick=52)
    m = ultraserver_model(ledger.read(now_at(52)), None, sort="ecc", filter_="ecc")
    assert [r.number for r in m.rows] == [7]
    chip = m.rows[0].chips[2]
    assert (chip.ecc_events, chip.ecc_uncorrected) == (2 * 12 + 1, 1)  # ticks 41-52: 2 corrected each, 1 uncorrected
    rows = ledger.read(now_at(52)).hosts(list(ledger.hosts.values()))
    by_hbm = sort_and_filter(rows, "hbm", "all")
    fullest = max(c.hbm_pct for r in rows for c in r.chips)
    assert max(c.hbm_pct for c in by_hbm[0].chips) == fullest


def test_jump_targets_resolve_by_number_name_id_and_stream():
    ledger = fleet_ledger("straggler")
    read = ledger.read(now_at(LAST_TICK))
    group = ultraserver_model(read, None).group
    host = next(h for h in ledger.hosts.values() if h.instance_name == "sim-trn3-gen2-us-07")
    assert resolve_target(read, group, "7/2") == (host.host_id, 2)
    assert resolve_target(read, group, "7") == (host.host_id, None)
    assert resolve_target(read, group, host.host_id) == (host.host_id, None)
    assert resolve_target(read, group, "sim-host-07/3") == (host.host_id, 3)
    assert resolve_target(read, group, "sim-trn3-gen2-us-07 / 1") == (host.host_id, 1)
    assert resolve_target(read, group, "7/9") is None  # no such chip
    assert resolve_target(read, group, "nonsense") is None


def test_source_states_count_lost_and_stale_sources():
    ledger = new_fleet_ledger("healthy", last_tick=22)
    ledger.end_source("sim-host-03", received_s(22, 3), "ssh: connection reset")
    m = sources_model(ledger.read(now_at(22) + 10))  # ten seconds on, nobody reported
    assert m.count("lost") == 1 and m.count("stale") == 35
    assert m.first_in("lost").error == "ssh: connection reset"
    assert m.total == 36 and len(m.notable) == 36  # every source stale or lost: each may be named


def test_replay_clock_is_the_latest_line_not_the_wall_clock():
    replay = Ledger("replayed")
    for line in report_lines("healthy", 20, 21):
        replay.ingest(line)
    assert session_now_s(replay, wall_s=BASE_S + 10_000) == received_s(21, 35)
    live = Ledger("live")
    assert session_now_s(live, wall_s=BASE_S + 10_000) == BASE_S + 10_000


def test_job_model_places_ranks_and_gives_device_evidence_for_the_straggler():
    ledger = fleet_ledger("straggler", with_job=True)
    m = job_model(ledger.job, ledger.read(now_at(LAST_TICK)))
    assert m.diagnosis.verdict == "slow"
    suspect = m.diagnosis.suspects[0]
    assert (suspect.rank, suspect.host, suspect.chip) == (30, "sim-trn3-gen2-us-07", 2)
    assert suspect.evidence.chip_util_pct > 95.0 and suspect.evidence.peer_chip_util_median_pct < 70.0
    assert len(m.ranks) == 144 and [c.op for c in m.collectives] == ["all_reduce"]


def test_snapshot_holds_every_scope_whatever_is_on_screen():
    ledger = fleet_ledger("ecc", last_tick=52)
    snap = build_snapshot(ledger, now_at(52), None, written_at_s=now_at(52))
    data = json.loads(snapshot_json(snap))
    assert data["schema"] == "trnwatch.snapshot/1" and data["evidence"] == "simulated"
    assert len(data["hosts"]) == 36 and len(data["chips"]) == 144 and len(data["sources"]) == 36
    assert data["ultraservers"][0]["boundary"] == {"hosts": 36, "hosts_fresh": 36, "chips_in_figures": 144}
    assert data["job"]["connected"] is False
    assert Snapshot.model_validate(data) == snap  # the JSON reads back as the same typed snapshot
    text = render_text(snap)
    assert "chips with ECC events:" in text and "sim-trn3-gen2-us-07 chip 2" in text
    assert "no job telemetry connected" in text


def test_a_hosts_chip_cells_are_kept_until_it_reports_then_show_its_new_figures():
    ledger = new_fleet_ledger("ecc", last_tick=49)  # host 7 chip 2's uncorrected error comes at tick 50
    hosts = list(ledger.hosts.values())
    before = {r.host_id: r.chips for r in ledger.read(now_at(49)).hosts(hosts)}
    # Nothing folded since: the very same cells (kept per report), at a later "now" too.
    assert all(r.chips is before[r.host_id] for r in ledger.read(now_at(49) + 0.4).hosts(hosts))
    for line in report_lines("ecc", 50, 50):
        ledger.ingest(line)
    after = {r.host_id: r for r in ledger.read(now_at(50)).hosts(hosts)}
    for host in hosts:  # every host reported: its cells are its chips' figures now
        assert after[host.host_id].chips == tuple(chip_summary(host, chip, chip_ecc(chip)) for chip in host.chips)
        assert after[host.host_id].chips is not before[host.host_id]
    row_7 = next(r for r in after.values() if r.number == 7)
    assert row_7.chips[2].ecc_uncorrected and not next(c for c in before[row_7.host_id] if c.index == 2).ecc_uncorrected


def test_styled_builds_the_text_appending_each_part_would():
    parts = [
        ("07 ", Style(bold=True)),
        "plain",
        ("", Style(color="red")),
        ("\x07", Style(color="red")),  # stripped to nothing: an empty span, as append leaves
        ("a\rb", None),
        ("▇█", Style()),
        ("!", Style(color="red", reverse=True)),
    ]
    by_append = Text(no_wrap=True, overflow="crop")
    for part in parts:
        by_append.append(*(part if isinstance(part, tuple) else (part,)))
    built = styled(*parts)
    assert (built.plain, built.spans, built.no_wrap, built.overflow) == (
        by_append.plain,
        by_append.spans,
        True,
        "crop",
    )
    assert built == by_append


def test_one_list_of_scopes_gives_their_keys_help_palette_views_and_ways_up_and_down():
    from trnwatch.tui.app import VIEWS
    from trnwatch.tui.navigation import STEPS
    from trnwatch.tui.scope import SCOPES
    from trnwatch.tui.screens import KEYMAP, SCOPE_KEYS

    names = [s.name for s in SCOPES]
    assert list(VIEWS) == names and set(STEPS) <= set(names)
    assert [(keys, action, what) for keys, action, _label, what in KEYMAP if action.startswith("scope(")] == [
        (s.key, f"scope('{s.name}')", s.keymap_help) for s in SCOPES
    ]
    assert SCOPE_KEYS == tuple(s.key for s in SCOPES)
    assert {s.parent for s in SCOPES} | {s.child for s in SCOPES} <= {*names, None}
