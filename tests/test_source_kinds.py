"""The source-kind registry (trnwatch/sources.py) and the decode stage (collectors/decode.py):
every kind's options reach the command line, every line kind has a decoder that counts a bad
line instead of raising, and the ledger folds decoded records only."""

import argparse
import ast
from pathlib import Path

import pytest

from trnwatch import sources
from trnwatch.cli import build_parser
from trnwatch.collectors.decode import DECODERS, DEVICE_KINDS, SESSION_KINDS, Decoded, DeviceReport, Rejected, decode
from trnwatch.collectors.lines import Line
from trnwatch.ledger.ledger import Ledger
from tests.reports import line as report_line
from tests.reports import report, runtime

ROOT = Path(__file__).resolve().parent.parent
PRODUCT_DIRS = ("collectors", "ledger", "trnwatch", "tui", "workloads")


def _subparser(command: str) -> argparse.ArgumentParser:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return subparsers.choices[command]


def _options_of(kind: sources.SourceKind, command: str) -> set[str]:
    """The option strings a kind adds, on a parser of its own."""
    parser = argparse.ArgumentParser()
    before = {s for a in parser._actions for s in a.option_strings}
    kind.add_options(sources.Options(parser, command))
    return {s for a in parser._actions for s in a.option_strings} - before


@pytest.mark.parametrize("command", sorted(sources.COMMAND_KINDS))
def test_every_kinds_options_are_in_the_commands_help(command):
    help_text = _subparser(command).format_help()
    for kind in sources.COMMAND_KINDS[command]:
        for option in _options_of(kind, command):
            assert option in help_text, (command, kind.name, option)


def test_every_kind_adds_options_or_is_the_default():
    for command, kinds in sources.COMMAND_KINDS.items():
        for kind in kinds:
            positionals = kind is sources.REPLAY and command == "replay"
            assert _options_of(kind, command) or positionals, (command, kind.name)


def test_every_line_kind_a_source_kind_yields_has_a_decoder():
    for kinds in sources.COMMAND_KINDS.values():
        for kind in kinds:
            assert kind.line_kinds and set(kind.line_kinds) <= set(DECODERS), kind.name
    assert set(DEVICE_KINDS) <= set(DECODERS)


def _kinds_written_in_code() -> dict[str, list[str]]:
    """Every line kind the product code writes as a string, with where: the value given to a
    parameter or field annotated `LineKind` (of `Line`, `SourceEvent`, `SourceSpec`,
    `split_lines`, ...), by position or by name, and each constant annotated `LineKind`.
    `LineKind` is an open `str`, so this is what says that what the sources emit is decoded."""
    files = [p for d in PRODUCT_DIRS for p in sorted((ROOT / d).rglob("*.py"))]
    trees = {path: ast.parse(path.read_text(), filename=str(path)) for path in files}

    def is_line_kind(annotation: ast.expr | None) -> bool:
        return isinstance(annotation, ast.Name) and annotation.id == "LineKind"

    takes_kind: dict[str, tuple[int, str]] = {}  # callable name -> (position, parameter name)
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                fields = [s for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]
                for i, f in enumerate(fields):
                    if is_line_kind(f.annotation):
                        takes_kind[node.name] = (i, f.target.id)
                for method in node.body:
                    if isinstance(method, ast.FunctionDef) and method.name == "__init__":
                        for i, a in enumerate(method.args.args[1:]):
                            if is_line_kind(a.annotation):
                                takes_kind[node.name] = (i, a.arg)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for i, a in enumerate(node.args.args):
                    if is_line_kind(a.annotation):
                        takes_kind[node.name] = (i, a.arg)
    written: dict[str, list[str]] = {}
    for path, tree in trees.items():
        for node in ast.walk(tree):
            value = None
            if isinstance(node, ast.AnnAssign) and is_line_kind(node.annotation):
                value = node.value
            elif isinstance(node, ast.Call):
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                if name in takes_kind:
                    position, keyword = takes_kind[name]
                    given = [k.value for k in node.keywords if k.arg == keyword]
                    value = given[0] if given else node.args[position] if position < len(node.args) else None
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                written.setdefault(value.value, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return written


def test_every_line_kind_the_sources_write_has_a_decoder_and_every_decoder_is_written():
    written = _kinds_written_in_code()
    assert {kind: where for kind, where in written.items() if kind not in DECODERS} == {}
    assert set(written) == set(DECODERS)


# Malformed JSON, JSON that is no object, an object of the wrong shape for every kind, bytes.
BAD_TEXTS = [
    "{not json",
    "[1, 2]",
    '{"neuron_runtime_data": "none", "event": 7, "body": 1, "profile": []}',
    "\x00\x01garbage",
    "1e999",
]


@pytest.mark.parametrize("line_kind", sorted(set(DECODERS) - set(SESSION_KINDS)))
def test_a_bad_line_of_each_kind_is_counted_against_its_source_not_raised(line_kind):
    ledger = Ledger("live")
    for i, text in enumerate(BAD_TEXTS):
        ledger.ingest(Line("src", line_kind, 100.0 + i, text))
    ledger.ingest(Line("src", line_kind, 200.0, "", oversize_bytes=10_000_000))
    (stats,) = ledger.sources.values()
    assert stats.reports == 0 and not ledger.hosts
    # Every line is counted once, under a reason its decoder names.
    assert sum(stats.rejected.values()) == len(BAD_TEXTS) + 1, stats.rejected
    assert stats.rejected["oversize"] == 1
    assert "internal" not in stats.rejected  # each decoder knows its own failures
    assert stats.kind == ("job" if line_kind == "job-log" else line_kind)


def test_a_bad_stack_line_is_counted_by_reason_not_raised_and_registers_no_source():
    """The session's own lines (stack captures) come from no source: a bad one is counted with
    the captures, under a reason its decoder names."""
    ledger = Ledger("live")
    for i, text in enumerate(BAD_TEXTS):
        ledger.ingest(Line("trnwatch:stacks", "stack", 100.0 + i, text))
    ledger.ingest(Line("trnwatch:stacks", "stack", 200.0, "", oversize_bytes=10_000_000))
    assert ledger.sources == {} and len(ledger.stacks) == 0
    assert ledger.stacks.rejected == {"stack-schema": len(BAD_TEXTS), "oversize": 1}
    assert SESSION_KINDS == ("stack", "rank-processes")


def test_a_line_of_an_unknown_kind_is_counted_as_such():
    ledger = Ledger("live")
    ledger.ingest(Line("src", "from-the-future", 1.0, "{}"))
    assert ledger.sources["src"].rejected == {"unknown-kind": 1}


def test_decode_then_fold_is_ingest():
    """The session decodes (off the event loop) and folds; a test's `ingest` does both at once."""
    text = report_line(report([runtime(1, "train", [0, 1, 2, 3], util={c: 50.0 for c in range(4)})]))
    lines = [Line("h", "neuron-monitor", 10.0 + i, text) for i in range(3)] + [Line("h", "neuron-monitor", 14.0, "{")]
    at_once, in_two = Ledger("live"), Ledger("live")
    for line in lines:
        at_once.ingest(line)
        in_two.fold(decode(line))
    for ledger in (at_once, in_two):
        stats = ledger.sources["h"]
        assert (stats.reports, dict(stats.rejected), stats.first_s, stats.last_s) == (3, {"not-json": 1}, 10.0, 12.0)
        assert ledger.last_s == 14.0  # the rejected line still arrived
    assert at_once.hosts.keys() == in_two.hosts.keys()
    (a,), (b,) = at_once.hosts.values(), in_two.hosts.values()
    assert [(c.util_pct, c.hbm_bytes) for c in a.chips] == [(c.util_pct, c.hbm_bytes) for c in b.chips]


def test_the_ledger_folds_records_not_text():
    """What the ledger does is decided by the records, whatever the line kind says."""
    record = decode(Line("h", "neuron-monitor", 1.0, report_line(report([])))).records[0]
    assert isinstance(record, DeviceReport)
    ledger = Ledger("live")
    ledger.fold(Decoded("h", "promql", 1.0, (record, Rejected("schema", "one host of the answer"))))
    stats = ledger.sources["h"]
    assert stats.kind == "promql" and stats.reports == 1 and stats.rejected == {"schema": 1}
    assert len(ledger.hosts) == 1


def _chosen(argv: list[str], monkeypatch, neuron_monitor: str | None = None) -> sources.Chosen:
    from trnwatch.collectors import streams

    monkeypatch.setattr(streams, "find_neuron_monitor", lambda: neuron_monitor)
    args = build_parser().parse_args(argv)
    return sources.build(args, keys_fd=lambda: 0)


def test_the_device_kind_is_the_one_asked_for_else_the_local_neuron_monitor(monkeypatch, tmp_path):
    chosen = _chosen(["watch", "--stdin", "--headless"], monkeypatch)
    assert [k.name for k in chosen.kinds] == ["stdin"] and chosen.mode == "live"
    assert [(s.source_id, s.kind) for s in chosen.built.sources] == [("stdin", "neuron-monitor")]
    chosen = _chosen(["watch", "--label", "me"], monkeypatch, neuron_monitor="/bin/true")
    assert [k.name for k in chosen.kinds] == ["neuron-monitor"]
    assert [s.source_id for s in chosen.built.sources] == ["me"]
    chosen = _chosen(
        ["watch", "--scrape", "http://127.0.0.1:1/metrics", "--scrape", "http://127.0.0.1:1/metrics"], monkeypatch
    )
    assert chosen.remote and [s.kind for s in chosen.built.sources] == ["prometheus"]  # duplicates dropped


def test_job_kinds_join_the_device_kind_and_alone_say_so(monkeypatch, tmp_path):
    chosen = _chosen(["watch", "--job-dir", str(tmp_path), "--ckpt-dir", str(tmp_path)], monkeypatch)
    assert [k.name for k in chosen.kinds] == ["neuron-monitor", "job-dir", "ckpt-dir", "rank-processes"]
    assert [(s.kind, s.companion) for s in chosen.built.sources] == [
        ("job", False),
        ("job", False),
        ("rank-processes", True),  # this host's rank processes, ended with the job sources
    ]
    off = _chosen(["watch", "--job-dir", str(tmp_path), "--no-rank-processes"], monkeypatch)
    assert [k.name for k in off.kinds] == ["neuron-monitor", "job-dir"]
    assert chosen.built.notes == ["no neuron-monitor here; watching the job scope only"]
    with pytest.raises(sources.OptionError, match="neuron-monitor not found"):
        _chosen(["watch"], monkeypatch)


def test_snapshot_offers_the_demo_and_a_replay_as_device_kinds(monkeypatch):
    chosen = _chosen(["snapshot", "--demo"], monkeypatch)
    assert [k.name for k in chosen.kinds] == ["sim"] and chosen.mode == "simulated"
    kinds = [s.kind for s in chosen.built.sources]
    assert (kinds.count("neuron-monitor"), kinds.count("sysfs"), kinds.count("job")) == (36, 36, 1)  # + their job
    assert len(kinds) == 73 and len(chosen.built.background) == 1
    with pytest.raises(sources.OptionError):
        _chosen(["snapshot", "--replay", "/nonexistent.trnrec"], monkeypatch)
