"""The logs of software that cannot run here, printed by the generators of its public statements
(tests/nxd_logs.py, tests/torchtitan_logs.py) into a folder, each with its run's truth, under the
names the tests use beside the captures of tests/fixtures/logs/."""

from pathlib import Path

from tests import nxd_logs, torchtitan_logs

FIXTURES = Path(__file__).parent / "fixtures" / "logs"


def write_all(directory: Path) -> dict[str, tuple[Path, object]]:
    """{name: (path, truth)} of every generated log, written into `directory`."""
    plain, color, tp_pp = (
        directory / "torchtitan_plain.log",
        directory / "torchtitan_torchrun_color.log",
        directory / "nxd_tp_pp.log",
    )
    return {
        plain.name: (plain, torchtitan_logs.resumed_fixture(plain)),
        color.name: (color, torchtitan_logs.resumed_fixture(color, color=True, rank_header="[rank0]:")),
        tp_pp.name: (tp_pp, nxd_logs.tp_pp_resumed_fixture(tp_pp)),
    }


def path_of(generated: dict[str, tuple[Path, object]], name: str) -> Path:
    """A generated log's path, or the capture's of that name."""
    return generated[name][0] if name in generated else FIXTURES / name
