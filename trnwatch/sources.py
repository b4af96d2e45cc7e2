"""The registry of source kinds: for each, its command-line options, how its sources are built,
and the line kinds it yields (each line kind names its decoder in collectors/decode.py).

A command (`watch`, `record`, `snapshot`, `demo`, `replay`) offers a list of kinds; `add_options`
puts every kind's options on its parser, and `build` turns the parsed options into what the
session runs. Device kinds exclude each other (one way in for the device figures); the job kinds
(`job-dir`, `job-log`, `ckpt-dir`) join a live device kind. A kind reads only the options it
added itself, so no option is ever read that the command did not define.

Adding a source kind: its source (an async generator of `Line`s) in collectors/, its entry
here, and, if it brings a new line format, that format's decoder in collectors/decode.py.
"""

import argparse
import functools
import shutil
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from trnwatch import scaleout
from trnwatch.option_types import non_negative, positive, positive_int
from trnwatch.scaleout import OptionError
from trnwatch.source_spec import SourceSpec

if TYPE_CHECKING:
    from trnwatch.collectors.scheduler import SchedulerJob

Evidence = Literal["live", "replayed", "simulated"]
JOB_FORMATS = ["job", "nxd", "nxdt", "torchtitan"]


def _time_arg(value: str):
    from trnwatch.collectors.recording_reader import TimeArg

    try:
        return TimeArg.parse(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


@dataclass
class Options:
    """Where a kind puts its options: the command's parser, the group of mutually exclusive
    device-source options, and named argument groups shared between kinds."""

    parser: argparse.ArgumentParser
    command: str
    groups: dict[str, argparse._ArgumentGroup] = field(default_factory=dict)
    _exclusive: argparse._MutuallyExclusiveGroup | None = None

    @property
    def exclusive(self) -> argparse._MutuallyExclusiveGroup:
        if self._exclusive is None:  # made on first use: argparse refuses an empty one
            self._exclusive = self.parser.add_mutually_exclusive_group()
        return self._exclusive

    def group(self, title: str) -> argparse._ArgumentGroup:
        if title not in self.groups:
            self.groups[title] = self.parser.add_argument_group(title)
        return self.groups[title]


@dataclass(frozen=True)
class Built:
    """What a kind built for the session."""

    sources: list[SourceSpec]
    ultraservers: dict[str, str] = field(default_factory=dict)  # stream label -> UltraServer (hosts file)
    background: list[Callable[[], Coroutine[Any, Any, None]]] = field(
        default_factory=list
    )  # workloads beside the sources
    replay: Callable | None = None  # what a replay read, for the receipt
    recorded_evidence: str | None = None
    notes: list[str] = field(default_factory=list)  # said once on stderr before the session starts
    rules: Any = None  # a replay: the rules (ledger/rules.py) the recorded session judged by
    scheduler: "SchedulerJob | None" = None  # a replay: the scheduler job the recorded session served


@dataclass(frozen=True)
class Context:
    """What a kind's build may need beyond its own options."""

    job_requested: bool  # a job kind was chosen beside it
    keys_fd: Callable[[], int]  # the terminal's fd for keys (the screen's, when stdin carries data)
    hardware_requested: bool = False  # a kernel-log or sysfs kind was chosen beside it


@dataclass(frozen=True)
class SourceKind:
    name: str
    line_kinds: tuple[str, ...]  # what its lines are; each names its decoder (collectors/decode.py)
    add_options: Callable[[Options], None]
    wanted: Callable[[argparse.Namespace], bool]
    build: Callable[[argparse.Namespace, Context], Built]
    mode: Evidence = "live"
    remote: bool = False  # sources that report their link (SSH hosts, Prometheus endpoints)
    progress_every_s: float = 10.0  # headless progress lines
    with_job_kinds: bool = True  # job telemetry kinds may run beside it


# --- device kinds -----------------------------------------------------------------------------


def _stdin_options(o: Options) -> None:
    help_text = (
        "read one neuron-monitor stream (one JSON report per line) from stdin until EOF"
        if o.command != "snapshot"
        else "one neuron-monitor stream from stdin (as `watch --stdin`)"
    )
    o.exclusive.add_argument("--stdin", action="store_true", help=help_text)


def _stdin_build(args: argparse.Namespace, ctx: Context) -> Built:
    from trnwatch.collectors.streams import stdin_lines

    label = args.label or "stdin"
    # With the screen, reports keep coming from the pipe and keys from the terminal (as `less` does).
    fd = 0 if args.headless else ctx.keys_fd()
    return Built([SourceSpec(label, "neuron-monitor", lambda: stdin_lines(label, fd=fd))])


def _neuron_monitor_options(o: Options) -> None:
    help_text = (
        "run this executable instead of neuron-monitor, with the same arguments"
        if o.command != "snapshot"
        else "run this executable instead of neuron-monitor"
    )
    o.exclusive.add_argument("--neuron-monitor", metavar="PATH", help=help_text)


def _neuron_monitor_build(args: argparse.Namespace, ctx: Context) -> Built:
    from trnwatch.collectors import streams

    executable = _checked_executable(args.neuron_monitor) if args.neuron_monitor else streams.find_neuron_monitor()
    if executable is None and ctx.job_requested:
        return Built([], notes=["no neuron-monitor here; watching the job scope only"])
    if executable is None and ctx.hardware_requested:
        return Built([], notes=["no neuron-monitor here; reading the kernel log / sysfs only"])
    if executable is None:
        raise OptionError(
            "neuron-monitor not found on PATH or in /opt/aws/neuron/bin. Install aws-neuronx-tools, "
            "pass --neuron-monitor PATH, pipe a stream with --stdin, or try `trnwatch demo`."
        )
    label = args.label or "local"
    period_s = args.period
    return Built(
        [SourceSpec(label, "neuron-monitor", lambda: streams.neuron_monitor_lines(executable, period_s, label))]
    )


def _checked_executable(given: str) -> str:
    """The `--neuron-monitor` the user named, if it can be run (a path, or a name on PATH);
    `OptionError` saying why not, before anything is collected."""
    found = shutil.which(given)
    if found is not None:
        return found
    path = Path(given)
    if "/" not in given and not path.exists():
        why = "not found on PATH"
    elif not path.exists():
        why = "no such file"
    elif path.is_dir():
        why = "is a folder, not a program"
    else:
        why = "is not executable (chmod +x it, or name the program itself)"
    raise OptionError(f"--neuron-monitor {given}: {why}")


# Seconds from a demo's start until the fault line names each scenario's fault at its site (tick +
# 1: a report a second from tick 0), measured by folding the simulator's reports, sysfs samples and
# rank files tick by tick (tests/test_tui_findings.py checks each, and that the tick before does not).
SCENARIO_NAMED_S = {
    "straggler": 46,
    "hang": 35,
    "hbm-leak": 32,
    "ecc": 51,
    "host-loss": 50,
    "hw-error": 41,
    "efa-link": 31,
}
SCENARIO_HELP = (
    "--demo fault scenario. The fault line names the fault after (seconds from the start): "
    + ", ".join(f"{name} {seconds} s" for name, seconds in SCENARIO_NAMED_S.items())
    + "; give --duration at least that (the default, three report periods, shows the compile)"
)


def _sim_options(o: Options) -> None:
    from trnwatch.workloads.sim.scenarios import SCENARIOS
    from trnwatch.workloads.sim.topology import TOPOLOGIES

    if o.command == "snapshot":
        o.exclusive.add_argument("--demo", action="store_true", help="the simulated UltraServer (as `trnwatch demo`)")
        o.parser.add_argument("--scenario", default="healthy", choices=sorted(SCENARIOS), help=SCENARIO_HELP)
        o.parser.add_argument(
            "--topology", default="trn3-gen2-us", choices=sorted(TOPOLOGIES), help="--demo fleet shape"
        )
        o.parser.add_argument("--seed", type=int, default=0, help="--demo simulator seed (default 0)")
        # the simulated job as rank files, into --job-dir; as many UltraServers as the scenario needs
        o.parser.set_defaults(job_format="job", sim_ultraservers=None)
        return
    o.parser.set_defaults(demo=True)
    o.parser.add_argument(
        "--scenario", default="healthy", choices=sorted(SCENARIOS), help="fault scenario (default healthy)"
    )
    o.parser.add_argument(
        "--topology", default="trn3-gen2-us", choices=sorted(TOPOLOGIES), help="fleet shape (default trn3-gen2-us)"
    )
    o.parser.add_argument("--seed", type=int, default=0, help="simulator seed (default 0)")
    o.parser.add_argument(
        "--ultraservers",
        dest="sim_ultraservers",
        type=positive_int,
        metavar="N",
        help="simulated UltraServers, one job over all of them (default 1; efa-link: 2, and refuses 1)",
    )
    g = o.group("job telemetry")
    g.add_argument(
        "--job-dir",
        type=Path,
        metavar="DIR",
        help="write the simulated job's trnwatch.job/1 rank files (or its log, with --job-format) "
        "here (default: a temporary folder)",
    )
    g.add_argument(
        "--job-format",
        default="job",
        choices=JOB_FORMATS,
        help="write the simulated job as trnwatch.job/1 rank files (job, the default) or as rank 0's "
        "log in that framework's format, read back through the matching log profile",
    )


def _sim_build(args: argparse.Namespace, ctx: Context) -> Built:
    """The demo: every simulated host's report stream, and the simulated job (its writer runs
    beside the sources, its files are read back by the follower a live job uses)."""
    from trnwatch.workloads.sim.fleet import fleet_hosts
    from trnwatch.workloads.sim.scenarios import fleet_ultraservers
    from trnwatch.workloads.sim.source import (
        KERNEL_LOG_SOURCE,
        fleet_has_kernel_log,
        host_source_id,
        sim_host_lines,
        sim_kernel_lines,
        sim_sysfs_lines,
        sysfs_source_id,
    )
    from trnwatch.workloads.sim.topology import get_topology

    period_s = args.period
    topology = get_topology(args.topology)
    try:
        ultraservers = fleet_ultraservers(topology, args.scenario, args.sim_ultraservers)
    except ValueError as exc:
        raise OptionError(str(exc)) from None
    hosts = fleet_hosts(topology, args.seed, args.scenario, period_s, ultraservers=ultraservers)
    start = time.monotonic()
    specs = []
    for i, h in enumerate(hosts):
        offset_s = period_s * i / len(hosts)
        specs.append(
            SourceSpec(
                host_source_id(h), "neuron-monitor", functools.partial(sim_host_lines, h, period_s, start, offset_s)
            )
        )
        specs.append(
            SourceSpec(sysfs_source_id(h), "sysfs", functools.partial(sim_sysfs_lines, h, period_s, start, offset_s))
        )
    if fleet_has_kernel_log(hosts):
        specs.append(
            SourceSpec(KERNEL_LOG_SOURCE, "kernel-log", functools.partial(sim_kernel_lines, hosts, period_s, start))
        )
    job_spec, job_writer = _sim_job(hosts, args.job_dir, args.job_format, period_s)
    return Built(specs + [job_spec], background=[job_writer])


def _sim_job(hosts, job_dir: Path | None, job_format: str, period_s: float):
    """The demo's simulated job: a writer appending rank files (or, with --job-format, rank 0's
    log in that framework's format) each period, and the same follower a live `--job-dir`
    (or `--job-log`) uses reading them back. Without --job-dir the files go to a temporary
    folder, removed when the session ends (every exit path runs the writer's `finally`)."""
    import asyncio
    import tempfile

    from trnwatch.collectors.job_files import RunDirFollower
    from trnwatch.workloads.sim.job import GLOBAL_BATCH, SEQ_LEN, SimJobWriter
    from trnwatch.workloads.sim.job_logs import SimLogWriter

    temporary = job_dir is None  # the demo's own folder: removed when the session ends
    run_dir = job_dir or Path(tempfile.mkdtemp(prefix="trnwatch-demo-job-"))
    writer: SimJobWriter | SimLogWriter
    if job_format == "job":
        writer = SimJobWriter(hosts, run_dir)
        spec = run_dir_spec(RunDirFollower(str(run_dir)), str(run_dir))
    else:
        from trnwatch.collectors.job_log import follow_job_log
        from trnwatch.collectors.log_profiles import profile_registry
        from trnwatch.workloads.sim.job import run_id

        log = run_dir / f"rank0-{job_format}.log"
        writer = SimLogWriter(hosts, log, job_format)
        # The profile is detected from the log's first lines, as for a real one; the batch shape
        # is passed as a user would with --global-batch / --seq-len.
        spec = SourceSpec(
            f"joblog:{log.name}",
            "job",
            lambda: follow_job_log(str(log), profile_registry(), None, run_id(hosts[0]), 0, GLOBAL_BATCH, SEQ_LEN),
        )

    async def write_ticks():
        start = time.monotonic()
        tick = 0
        try:
            while True:
                writer.write_tick(tick, time.time())
                tick += 1
                await asyncio.sleep(max(0.0, start + tick * period_s - time.monotonic()))
        finally:
            writer.close()
            if temporary:
                shutil.rmtree(run_dir, ignore_errors=True)

    return spec, write_ticks


def _replay_options(o: Options) -> None:
    if o.command == "snapshot":
        o.exclusive.add_argument(
            "--replay", dest="recording", type=Path, metavar="RECORDING", help="a recording made with --record"
        )
        o.parser.set_defaults(speed=0.0, from_t=None, to_t=None)
        return
    p = o.parser
    p.add_argument(
        "recording",
        type=Path,
        metavar="RECORDING",
        help="a recording file (/1 or /2), or a folder of rotated files made by `trnwatch record`",
    )
    p.add_argument(
        "--speed",
        type=non_negative,
        default=None,
        metavar="X",
        help="replay rate: 1 = real time, 0 = as fast as possible (default: 1 with the screen, 0 with --headless)",
    )
    p.add_argument(
        "--from",
        dest="from_t",
        type=_time_arg,
        metavar="T",
        help="start at T: seconds from the recording's start (negative: before its end) or an ISO-8601 "
        "time (UTC unless it says); the job's state from before the window is carried into it",
    )
    p.add_argument("--to", dest="to_t", type=_time_arg, metavar="T", help="stop before T (same forms as --from)")
    p.add_argument(
        "--info", action="store_true", help="print span, sources, hosts, evidence, size and compression ratio, and exit"
    )


def _replay_build(args: argparse.Namespace, ctx: Context) -> Built:
    from trnwatch.collectors.recording import RecordingError
    from trnwatch.collectors.recording_reader import Recording, describe, replay_lines
    from trnwatch.ledger.receipt import ReplayEntry

    try:
        recording = Recording(args.recording)
        from_s, to_s = recording.window(args.from_t, args.to_t)
    except (RecordingError, OSError) as exc:
        raise OptionError(str(exc)) from None
    speed = args.speed if args.speed is not None else (0.0 if args.headless else 1.0)
    path = args.recording

    def replayed() -> ReplayEntry:
        stats = recording.stats
        return ReplayEntry(
            recording=str(path),
            schema=recording.schema,
            window_from=from_s,
            window_to=to_s,
            frames_read=stats.frames_read,
            frames_skipped=dict(sorted(stats.skipped.items())),
        )

    # The relay carries every recorded source's lines and events; each line keeps its kind, so
    # it is decoded by the decoder it was decoded by live.
    spec = SourceSpec(
        "replay",
        "neuron-monitor",
        lambda: replay_lines(recording, speed, from_s, to_s),
        relay=True,
        recorded_clock=True,
    )
    return Built(
        [spec],
        ultraservers=dict(recording.header.ultraservers),
        replay=replayed,
        recorded_evidence=describe(recording).evidence,  # from the data (catalog marks), not the header's mode
        rules=recorded_rules(recording.header.rules),
        scheduler=recording.header.scheduler,
        notes=list(recording.warnings),
    )


STDIN = SourceKind("stdin", ("neuron-monitor",), _stdin_options, lambda a: a.stdin, _stdin_build)
# The default device kind of watch, record and snapshot: chosen when no other is asked for.
NEURON_MONITOR = SourceKind(
    "neuron-monitor", ("neuron-monitor",), _neuron_monitor_options, lambda a: True, _neuron_monitor_build
)


def _scaled(build: Callable[[argparse.Namespace], scaleout.ScaleOut]) -> Callable[[argparse.Namespace, Context], Built]:
    def built(args: argparse.Namespace, ctx: Context) -> Built:
        out = build(args)
        return Built(out.sources, ultraservers=out.ultraservers)

    return built


SSH = SourceKind(
    "ssh",
    ("neuron-monitor",),
    scaleout.add_ssh_options,
    lambda a: scaleout.ssh_requested(a) and not scaleout.scrape_requested(a),
    _scaled(scaleout.ssh_sources),
    remote=True,
)
SCRAPE = SourceKind(
    "scrape",
    ("prometheus",),
    scaleout.add_scrape_options,
    scaleout.scrape_requested,
    _scaled(scaleout.scrape_sources),
    remote=True,
)
PROMETHEUS = SourceKind(
    "prometheus",
    ("promql",),
    scaleout.add_server_options,
    lambda a: bool(a.prometheus),
    _scaled(scaleout.server_sources),
    remote=True,
)
SIM = SourceKind(
    "sim",
    ("neuron-monitor", "job", "job-log", "kernel-log", "sysfs"),
    _sim_options,
    lambda a: a.demo,
    _sim_build,
    mode="simulated",
    with_job_kinds=False,
)
REPLAY = SourceKind(
    "replay",
    ("neuron-monitor", "prometheus", "promql", "job", "job-log", "rank-processes", "kernel-log", "sysfs", "topology"),
    _replay_options,
    lambda a: a.recording is not None,
    _replay_build,
    mode="replayed",
    progress_every_s=2.0,
    with_job_kinds=False,
)


# --- job kinds ----------------------------------------------------------------------------------


def _job_dir_options(o: Options) -> None:
    o.group("job telemetry").add_argument(
        "--job-dir",
        type=Path,
        metavar="DIR",
        help="follow a run directory of trnwatch.job/1 rank files (rank-NNNNN.jsonl), history first",
    )


def run_dir_spec(follower, run_dir: str) -> SourceSpec:
    """A run directory's follower as a session's source: each rank file is its own source
    (job:rank-NNNNN.jsonl), the follower only relays them; the session drains it at its end."""
    return SourceSpec(f"job-dir:{run_dir}", "job", follower.lines, relay=True, drain=follower.drain)


def _job_dir_build(args: argparse.Namespace, ctx: Context) -> Built:
    from trnwatch.collectors.job_files import RunDirFollower

    run_dir = str(args.job_dir)
    notes = []
    if args.job_dir.exists() and not args.job_dir.is_dir():
        raise OptionError(f"--job-dir {run_dir}: not a folder (pass the run directory that holds rank-NNNNN.jsonl)")
    if not args.job_dir.exists():  # a job that has not started yet: its folder may appear later
        notes.append(f"--job-dir {run_dir}: no such folder yet; waiting for it to appear")
    return Built([run_dir_spec(RunDirFollower(run_dir), run_dir)], notes=notes)


def _job_log_options(o: Options) -> None:
    g = o.group("job telemetry")
    g.add_argument(
        "--job-log",
        type=Path,
        metavar="FILE",
        action="append",
        help="follow a training job's own log through a log profile (NxD Core, NxD Training, TorchTitan; "
        "Neuron runtime errors and torchrun's, Open MPI's and Slurm's lines in any log): steps, loss, "
        "throughput, compiles, checkpoints, errors, restarts. Repeat for one log per rank; a folder is "
        "torchrun's --log-dir (attempt_N/<rank>/std*.log, new attempts followed). No collective latency: "
        "that needs the in-job emitter",
    )
    g.add_argument(
        "--log-profile",
        metavar="NAME",
        help="read --job-log with this profile instead of detecting "
        "it from the first lines (built-in: nxd, nxdt, torchtitan, hf, lightning, lightning-rich, generic)",
    )
    g.add_argument(
        "--log-profile-file",
        type=Path,
        metavar="FILE",
        help="add log profiles from a TOML file (format: docs/job-telemetry.md)",
    )
    g.add_argument(
        "--global-batch",
        type=positive_int,
        metavar="N",
        help="sequences per optimizer step, for passive tokens/s where the log does not say",
    )
    g.add_argument(
        "--seq-len",
        type=positive_int,
        metavar="N",
        help="tokens per sequence, for passive tokens/s (with --global-batch, or a log's sequences/s)",
    )


def _job_log_build(args: argparse.Namespace, ctx: Context) -> Built:
    """One source per --job-log file, all read as one run, and one relaying follower per folder
    (torchrun's --log-dir); `OptionError` for a bad profile."""
    from trnwatch.collectors.job_log import follow_job_log, follow_log_dir, log_dir_files, log_sources
    from trnwatch.collectors.log_profiles import LogProfileError, load_profile_file, profile_registry

    profiles = profile_registry()
    if args.log_profile_file:
        try:
            profiles = profile_registry(load_profile_file(args.log_profile_file, profiles))
        except LogProfileError as exc:
            raise OptionError(str(exc)) from None
    if args.log_profile and (args.log_profile not in profiles or profiles[args.log_profile].always):
        choices = ", ".join(name for name, p in profiles.items() if not p.always)
        raise OptionError(f"unknown log profile {args.log_profile!r}; choose one of: {choices}")
    folders = [path for path in args.job_log if path.is_dir()]
    files = [str(path) for path in args.job_log if not path.is_dir()]
    # A job that has not started yet: its log may appear later (said as --job-dir says it).
    notes = [
        f"--job-log {path}: no such file yet; waiting for it to appear" for path in files if not Path(path).exists()
    ]
    notes += [
        f"--job-log {folder}: no attempt_N/<rank>/std*.log in it yet (a folder is torchrun's --log-dir); waiting"
        for folder in folders
        if not any(log_dir_files(str(folder)))
    ]
    # A folder is torchrun's --log-dir (per-rank files under attempt_N/): each file its own
    # source, relayed by one follower that also picks up the attempt folders made later.
    specs = [
        SourceSpec(
            f"joblog:{folder.resolve().name}",
            "job",
            functools.partial(follow_log_dir, str(folder), profiles, args.log_profile, args.global_batch, args.seq_len),
            relay=True,
        )
        for folder in folders
    ]
    if not files:
        return Built(specs, notes=notes)
    run, logs = log_sources(files)
    specs += _trainer_states(args, files, run)
    specs += [
        SourceSpec(
            log.source_id,
            "job",
            functools.partial(
                follow_job_log,
                log.path,
                profiles,
                args.log_profile,
                run,
                log.default_rank,
                args.global_batch,
                args.seq_len,
                source_id=log.source_id,
            ),
        )
        for log in logs
    ]
    return Built(specs, notes=notes)


def _trainer_states(args: argparse.Namespace, files: list[str], run: str) -> list[SourceSpec]:
    """A Hugging Face Trainer's output_dir holding a log named by --job-log (its trainer_state.json
    files there at start: a second account of the same run), unless --ckpt-dir watches it."""
    from trnwatch.collectors.checkpoints import checkpoint_source_id
    from trnwatch.collectors.trainer_state import follow_trainer_state, is_output_dir

    ckpt_dir = getattr(args, "ckpt_dir", None)  # the ckpt-dir kind's option, where the command has it
    watched = {ckpt_dir.resolve()} if ckpt_dir else set()
    folders = dict.fromkeys(Path(path).resolve().parent for path in files)
    return [
        SourceSpec(
            checkpoint_source_id(str(folder)),
            "job",
            functools.partial(follow_trainer_state, str(folder), run, checkpoint_source_id(str(folder))),
        )
        for folder in folders
        if folder not in watched and is_output_dir(str(folder))
    ]


def _job_run(args: argparse.Namespace) -> str | None:
    """The run the job logs are read as (a checkpoint folder's events join it)."""
    if not args.job_log:
        return None
    from trnwatch.collectors.job_log import log_sources

    files = [str(path) for path in args.job_log if not path.is_dir()]
    return log_sources(files)[0] if files else None


def _ckpt_dir_options(o: Options) -> None:
    o.group("job telemetry").add_argument(
        "--ckpt-dir",
        type=Path,
        metavar="DIR",
        help="watch a checkpoint folder (<tag>/checkpoint, <tag>/done; a Trainer's checkpoint-N/trainer_state.json)",
    )


def _ckpt_dir_build(args: argparse.Namespace, ctx: Context) -> Built:
    from trnwatch.collectors.checkpoints import follow_checkpoint_dir

    ckpt = str(args.ckpt_dir)
    run = _job_run(args) or args.ckpt_dir.resolve().name
    return Built([SourceSpec(f"ckpt:{args.ckpt_dir.resolve().name}", "job", lambda: follow_checkpoint_dir(ckpt, run))])


def _rank_processes_options(o: Options) -> None:
    o.group("job telemetry").add_argument(
        "--no-rank-processes",
        action="store_true",
        help="do not look for the job's rank processes on this host (by default, every 3 s: this user's "
        "processes with RANK in their environment whose output is the --job-log, or that hold a file open in "
        "the --job-dir; a stopped, disk-wait or zombie rank is named as the cause of a hang)",
    )


def _rank_processes_build(args: argparse.Namespace, ctx: Context) -> Built:
    from trnwatch.collectors.rank_process_records import KIND, SOURCE_ID
    from trnwatch.collectors.rank_processes import RankProcessFinder, Watched, rank_process_lines

    finder = RankProcessFinder(Watched.of(list(args.job_log or []), [args.job_dir] if args.job_dir else []))
    return Built([SourceSpec(SOURCE_ID, KIND, lambda: rank_process_lines(finder), companion=True)])


RANK_PROCESSES = SourceKind(
    "rank-processes",
    ("rank-processes",),
    _rank_processes_options,
    lambda a: bool(a.job_log or a.job_dir) and not a.no_rank_processes,
    _rank_processes_build,
)
JOB_DIR = SourceKind("job-dir", ("job",), _job_dir_options, lambda a: bool(a.job_dir), _job_dir_build)
JOB_LOG = SourceKind("job-log", ("job", "job-log"), _job_log_options, lambda a: bool(a.job_log), _job_log_build)
CKPT_DIR = SourceKind("ckpt-dir", ("job",), _ckpt_dir_options, lambda a: bool(a.ckpt_dir), _ckpt_dir_build)

# --- the kernel log -------------------------------------------------------------------------------


def _kernel_log_options(o: Options) -> None:
    g = o.group("hardware")
    g.add_argument(
        "--kernel-log",
        action="store_true",
        help="follow this host's kernel log (journalctl -k, else dmesg -w; needs root or the "
        "systemd-journal/adm group), or with --hosts/--hosts-file each host's over SSH: NEURON_HW_ERR "
        "lines become critical findings on their chip",
    )
    g.add_argument(
        "--kmsg",
        type=Path,
        metavar="FILE",
        help="read kernel-log lines (journalctl -o short-iso, dmesg, or bare) from a file or a pipe",
    )


def _kernel_log_build(args: argparse.Namespace, ctx: Context) -> Built:
    from trnwatch.collectors.kernel_source import KIND, kernel_log_lines, kmsg_file_lines

    specs = []
    if args.kernel_log and not scaleout.ssh_requested(args):  # with the hosts: SSH_KERNEL_LOG
        specs.append(SourceSpec("kernel-log", KIND, lambda: kernel_log_lines("kernel-log")))
    if args.kmsg:
        path, source_id = str(args.kmsg), f"kmsg:{args.kmsg.name}"
        specs.append(SourceSpec(source_id, KIND, lambda: kmsg_file_lines(path, source_id)))
    return Built(specs)


def _sysfs_options(o: Options) -> None:
    g = o.group("hardware")
    g.add_argument(
        "--sysfs",
        action="store_true",
        help="sample this host's sysfs each period: Neuron device power and unhealthy components, "
        "EFA hw_counters as rates (docs/hardware.md)",
    )
    g.add_argument("--sysfs-root", type=Path, metavar="DIR", help="sample this tree instead of /sys (implies --sysfs)")


def _sysfs_build(args: argparse.Namespace, ctx: Context) -> Built:
    from trnwatch.collectors.sysfs import sysfs_lines

    root, period_s = args.sysfs_root or Path("/sys"), args.period
    return Built([SourceSpec("sysfs", "sysfs", lambda: sysfs_lines(root, period_s, "sysfs"))])


SYSFS = SourceKind(
    "sysfs",
    ("sysfs",),
    _sysfs_options,
    lambda a: (a.sysfs or bool(a.sysfs_root)) and not scaleout.ssh_requested(a),
    _sysfs_build,
)
# Each host's sysfs over SSH: beside --scrape (the hosts file names the hosts), or --hosts with --sysfs.
SSH_SYSFS = SourceKind(
    "ssh-sysfs",
    ("sysfs",),
    scaleout.add_ssh_sysfs_options,  # and SSH's and SYSFS's
    lambda a: scaleout.ssh_requested(a) and (scaleout.scrape_requested(a) or a.sysfs or bool(a.sysfs_root)),
    _scaled(scaleout.ssh_sysfs_sources),
    remote=True,
)


def _topology_options(o: Options) -> None:
    o.group("hardware").add_argument(
        "--ultraservers-from",
        action="append",
        choices=("kubernetes", "slurm"),
        default=[],
        help="ask, once at start, which UltraServer each host is in: kubernetes (kubectl get nodes -o json, "
        "label topology.k8s.aws/ultraserver-id), slurm (scontrol show topology, block plugin); repeatable",
    )
    o.group("scheduler job").add_argument(
        "--k8s-job",
        metavar="NAMESPACE/NAME",
        help="the Kubernetes job (batch Job, PyTorchJob, MPIJob) the hosts serve: its pods, asked once at start "
        "(kubectl get pods -n NAMESPACE -o json, kubectl get nodes -o json), go to each host, the header and "
        "the receipt (default: the Slurm job of SLURM_JOB_ID, if any)",
    )


def _topology_build(args: argparse.Namespace, ctx: Context) -> Built:
    from trnwatch.collectors.topology_source import KIND, topology_lines

    return Built(
        [
            SourceSpec(f"topology:{origin}", KIND, functools.partial(topology_lines, origin, f"topology:{origin}"))
            for origin in dict.fromkeys(args.ultraservers_from)
        ]
    )


TOPOLOGY = SourceKind(
    "topology", ("topology",), _topology_options, lambda a: bool(a.ultraservers_from), _topology_build
)
KERNEL_LOG = SourceKind(
    "kernel-log",
    ("kernel-log",),
    _kernel_log_options,
    lambda a: (a.kernel_log and not scaleout.ssh_requested(a)) or bool(a.kmsg),
    _kernel_log_build,
)
# Each host's kernel log over SSH: --kernel-log beside --hosts/--hosts-file (neuron-monitor over
# SSH, or --scrape with the hosts' sysfs over SSH).
SSH_KERNEL_LOG = SourceKind(
    "ssh-kernel-log",
    ("kernel-log",),
    scaleout.add_ssh_kernel_log_options,  # and KERNEL_LOG's and SSH's
    lambda a: scaleout.ssh_requested(a) and a.kernel_log,
    lambda args, ctx: Built(scaleout.ssh_kernel_log_sources(args, time.time()).sources),
    remote=True,
)

JOB_KINDS = (JOB_DIR, JOB_LOG, CKPT_DIR)
# Kinds that join the device kind chosen (any of them, or none).
JOINING_KINDS = (*JOB_KINDS, RANK_PROCESSES, KERNEL_LOG, SSH_KERNEL_LOG, SYSFS, SSH_SYSFS, TOPOLOGY)
REMOTE_KINDS = (SSH, SCRAPE, PROMETHEUS)
# What each command offers, in the order of its help: device kinds (the one wanted is used, else
# NEURON_MONITOR), and the job kinds that may join them.
WATCH_KINDS = (STDIN, NEURON_MONITOR, *REMOTE_KINDS, *JOINING_KINDS)
COMMAND_KINDS: dict[str, tuple[SourceKind, ...]] = {
    "watch": WATCH_KINDS,
    "record": WATCH_KINDS,
    "snapshot": (STDIN, NEURON_MONITOR, SIM, REPLAY, *REMOTE_KINDS, *JOINING_KINDS),
    "demo": (SIM,),
    "replay": (REPLAY,),
}


def add_options(parser: argparse.ArgumentParser, command: str) -> None:
    """Every option of the command's source kinds, and the options they share."""
    from trnwatch.ledger.rules import DEFAULT_RULES as RULES
    from trnwatch.ledger.rules import PAUSE_FACTOR, PAUSE_FLOOR_S

    kinds = COMMAND_KINDS[command]
    options = Options(parser, command)
    for kind in kinds:
        kind.add_options(options)
    if command != "replay":
        help_text = {"demo": "report period per host (default 1)", "snapshot": "report / poll period (default 1)"}
        parser.add_argument(
            "--period",
            type=positive,
            default=1.0,
            metavar="SECONDS",
            help=help_text.get(
                command, "neuron-monitor report period; poll interval of --scrape / --prometheus (default 1)"
            ),
        )
    if STDIN in kinds:
        parser.add_argument(
            "--label",
            default=None,
            help="stream label used as host id when a report has no instance id (default: 'stdin' or 'local')",
        )
    if command == "replay":
        parser.set_defaults(late_after=None, stall_after=None, pause_limit=[])  # the recording's rules
        return
    g = options.group("job telemetry")
    g.add_argument(
        "--late-after",
        type=positive,
        metavar="S",
        default=None,
        help=f"LATE when no rank completes a step for max({RULES.late_factor:g} x p99 of recent steady step "
        f"times, S) seconds (default {RULES.late_after_s:g})",
    )
    g.add_argument(
        "--stall-after",
        type=positive,
        metavar="S",
        default=None,
        help=f"STALLED after max({RULES.stall_factor:g} x median recent steady step time, S) seconds "
        f"(default {RULES.stall_after_s:g})",
    )
    g.add_argument(
        "--pause-limit",
        type=_pause_limit,
        action="append",
        default=[],
        metavar="KIND=S",
        help="longest a pause may last before it is a stall: checkpoint (default "
        f"{RULES.checkpoint_limit_s:g}), compile ({RULES.compile_limit_s:g}), bootstrap "
        f"({RULES.bootstrap_limit_s:g}); sooner once the run has shown earlier ones ({PAUSE_FACTOR:g} x their "
        f"p99, at least {PAUSE_FLOOR_S:g} s); repeat for each kind",
    )


def _pause_limit(value: str) -> tuple[str, float]:
    """`--pause-limit KIND=SECONDS`."""
    from trnwatch.ledger.rules import PAUSE_KINDS

    kind, _, seconds = value.partition("=")
    if kind not in PAUSE_KINDS:
        raise argparse.ArgumentTypeError(f"not KIND=SECONDS with KIND one of {', '.join(PAUSE_KINDS)}: {value!r}")
    return kind, positive(seconds)


def recorded_rules(recorded: dict[str, float]):
    """The rules a recorded session judged by (the defaults for any its header does not hold)."""
    from dataclasses import fields, replace

    from trnwatch.ledger.rules import DEFAULT_RULES

    known = {f.name for f in fields(DEFAULT_RULES)}
    return replace(DEFAULT_RULES, **{k: float(v) for k, v in recorded.items() if k in known})


def rules_of(args: argparse.Namespace, recorded=None):
    """The one rules object of a session (ledger/rules.py): the command line's thresholds over
    `recorded` (a replay: the rules the recorded session ran with) over the defaults."""
    from dataclasses import replace

    from trnwatch.ledger.rules import DEFAULT_RULES

    rules = recorded or DEFAULT_RULES
    given = {"late_after_s": args.late_after, "stall_after_s": args.stall_after}
    given.update({f"{kind}_limit_s": seconds for kind, seconds in args.pause_limit})
    return replace(rules, **{k: v for k, v in given.items() if v is not None})


@dataclass(frozen=True)
class Chosen:
    """The kinds a command line chose and what they built, merged for the session."""

    kinds: tuple[SourceKind, ...]
    built: Built
    mode: Evidence
    remote: bool
    progress_every_s: float


def build(args: argparse.Namespace, keys_fd: Callable[[], int]) -> Chosen:
    """Choose the device kind the options ask for (the first wanted, else the default) and the
    job kinds beside it, and build their sources; `OptionError` for anything unusable."""
    kinds = COMMAND_KINDS[args.command]
    chosen = [kind for kind in kinds if kind not in JOINING_KINDS and kind is not NEURON_MONITOR and kind.wanted(args)]
    device = chosen[0] if chosen else NEURON_MONITOR  # the default, when a command offers it
    if SSH in kinds and scaleout.ssh_requested(args):
        if args.hosts and args.hosts_file:
            raise OptionError("--hosts and --hosts-file: give one of them")
        if device not in (SSH, SCRAPE):
            raise OptionError(
                "--hosts / --hosts-file go alone (neuron-monitor over SSH) or with --scrape (sysfs over SSH)"
            )
    if SSH_SYSFS in kinds and args.remote_sysfs_command and not SSH_SYSFS.wanted(args):
        raise OptionError("--remote-sysfs-command goes with --hosts/--hosts-file and --scrape or --sysfs")
    if SSH_KERNEL_LOG in kinds and args.remote_kernel_log_command and not SSH_KERNEL_LOG.wanted(args):
        raise OptionError("--remote-kernel-log-command goes with --hosts/--hosts-file and --kernel-log")
    joined = (
        tuple(kind for kind in kinds if kind in JOINING_KINDS and kind.wanted(args)) if device.with_job_kinds else ()
    )
    context = Context(
        job_requested=any(kind in JOB_KINDS for kind in joined),
        keys_fd=keys_fd,
        hardware_requested=any(kind in (KERNEL_LOG, SSH_KERNEL_LOG, SYSFS, SSH_SYSFS) for kind in joined),
    )
    parts = [kind.build(args, context) for kind in (device, *joined)]
    first = parts[0]
    built = Built(
        sources=[spec for part in parts for spec in part.sources],
        ultraservers={k: v for part in parts for k, v in part.ultraservers.items()},
        background=[work for part in parts for work in part.background],
        replay=first.replay,
        recorded_evidence=first.recorded_evidence,
        notes=[note for part in parts for note in part.notes],
        rules=first.rules,
        scheduler=first.scheduler,
    )
    return Chosen((device, *joined), built, device.mode, device.remote, device.progress_every_s)
