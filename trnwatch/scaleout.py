"""Command-line glue for the scale-out sources of `trnwatch watch`: SSH fan-out and Prometheus.

Everything that comes from outside (host names, hosts files, URLs, the token) is checked here,
before any process starts or socket opens, so a bad name fails the command with one clear
message instead of 36 failing connections. These are the options and builders of the SSH, scrape
and Prometheus-server entries of the source-kind registry (trnwatch/sources.py).
"""

import argparse
import shutil
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from trnwatch.source_spec import SourceSpec

if TYPE_CHECKING:
    from trnwatch.collectors.hostlist import HostEntry
    from trnwatch.collectors.ssh import SshOptions

# The collectors each builder uses are imported in it: the registry of source kinds
# (trnwatch/sources.py) declares these options for every session command's parser, and a command
# that runs none of these sources (a replay) imports no SSH, HTTP or kernel-log client for them.

SLURM_JOB = "<slurm job>"  # `--hosts` given without a value


class OptionError(ValueError):
    """A source option cannot be used; the message says what and what to do."""


def add_ssh_options(o) -> None:
    """`--hosts`, `--hosts-file` and the SSH client's options (`sources.Options`). The hosts are
    the device source, or, beside `--scrape`, the hosts whose sysfs is read over SSH."""
    remote = o.group("remote sources")
    remote.add_argument(
        "--hosts",
        nargs="?",
        const=SLURM_JOB,
        metavar="HOSTLIST",
        help="run neuron-monitor on these hosts over SSH: a Slurm hostlist such as "
        "'trn3-[001-036]'; alone, the nodes of the current Slurm job (SLURM_JOB_NODELIST)",
    )
    remote.add_argument(
        "--hosts-file",
        type=Path,
        metavar="FILE",
        help="hosts to watch over SSH, one per line: 'HOST [ULTRASERVER [LABEL]]', # comments; beside --scrape, "
        "the hosts whose sysfs is read over SSH (UltraServer membership, device health, EFA)",
    )
    remote.add_argument("--ssh-config", type=Path, metavar="FILE", help="ssh client config to use (ssh -F FILE)")
    remote.add_argument(
        "--remote-command",
        metavar="COMMAND",
        help="command run on each host instead of neuron-monitor; it gets the neuron-monitor config "
        "on stdin and must write reports to stdout (default: neuron-monitor -c /dev/stdin)",
    )


def add_ssh_sysfs_options(o) -> None:
    """The option of the hosts' sysfs over SSH (beside `--scrape`, or `--hosts` with `--sysfs`)."""
    _remote_command_option(
        o,
        "--remote-sysfs-command",
        "command run on each host instead of trnwatch's sysfs reader (python3 -c ...); it must write "
        "one trnwatch.sysfs/1 line per period (docs/hardware.md)",
    )


def add_ssh_kernel_log_options(o) -> None:
    """The option of the hosts' kernel log over SSH (`--kernel-log` beside `--hosts`/`--hosts-file`)."""
    _remote_command_option(
        o,
        "--remote-kernel-log-command",
        "command run on each host instead of journalctl -k -f / dmesg -w; its stdin's first line is the "
        "UNIX second to start from, and it must write kernel-log lines (journalctl short-iso, dmesg, or bare)",
    )


def _remote_command_option(o, flag: str, help_text: str) -> None:
    o.group("remote sources").add_argument(flag, metavar="COMMAND", help=help_text)


def add_scrape_options(o) -> None:
    """`--scrape`, `--scrape-file`, and the bearer token (shared with `--prometheus`)."""
    from trnwatch.collectors.prometheus_http import TOKEN_ENV

    o.exclusive.add_argument(
        "--scrape",
        action="append",
        metavar="URL",
        help="scrape this neuron-monitor-prometheus exporter /metrics URL every --period (repeatable)",
    )
    o.exclusive.add_argument("--scrape-file", type=Path, metavar="FILE", help="exporter URLs to scrape, one per line")
    o.group("remote sources").add_argument(
        "--prometheus-token-file",
        type=Path,
        metavar="FILE",
        help=f"bearer token for --scrape / --prometheus (default: ${TOKEN_ENV} if set)",
    )


def add_server_options(o) -> None:
    o.exclusive.add_argument(
        "--prometheus",
        metavar="URL",
        help="query this Prometheus server's HTTP API for the whole cluster every --period",
    )


def ssh_requested(args: argparse.Namespace) -> bool:
    return bool(args.hosts or args.hosts_file)


def scrape_requested(args: argparse.Namespace) -> bool:
    return bool(args.scrape or args.scrape_file)


@dataclass(frozen=True)
class ScaleOut:
    sources: list[SourceSpec]
    ultraservers: dict[str, str]  # stream label -> UltraServer id, from the hosts file


def _token(args: argparse.Namespace) -> str | None:
    from trnwatch.collectors.prometheus_http import TokenError, load_token

    if args.remote_command or (args.ssh_config and not ssh_requested(args)):
        raise OptionError("--ssh-config and --remote-command go with --hosts or --hosts-file")
    try:
        return load_token(args.prometheus_token_file)
    except TokenError as exc:
        raise OptionError(str(exc)) from None


def server_sources(args: argparse.Namespace) -> ScaleOut:
    """The one source of server mode: the whole cluster from a Prometheus server."""
    from trnwatch.collectors.prometheus_sources import promql_lines

    token = _token(args)
    url, period_s = _checked(args.prometheus), args.period
    return ScaleOut([SourceSpec(url, "promql", lambda: promql_lines(url, period_s, token))], {})


def scrape_sources(args: argparse.Namespace) -> ScaleOut:
    """One source per exporter URL (duplicates dropped)."""
    from trnwatch.collectors.prometheus_sources import scrape_lines

    token = _token(args)
    period_s = args.period
    urls = args.scrape or _read_url_file(args.scrape_file)
    checked = list(dict.fromkeys(_checked(u) for u in urls))
    return ScaleOut([SourceSpec(u, "prometheus", partial(scrape_lines, u, period_s, token)) for u in checked], {})


def _checked(url: str) -> str:
    from trnwatch.collectors.prometheus_http import UrlError, check_url

    try:
        return check_url(url)
    except UrlError as exc:
        raise OptionError(str(exc)) from None


def _read_url_file(path: Path) -> list[str]:
    from trnwatch.collectors.text_files import TextFileError, read_text_file

    try:
        lines = read_text_file(path).splitlines()
    except TextFileError as exc:
        raise OptionError(str(exc)) from None
    urls = [line.split("#", 1)[0].strip() for line in lines]
    urls = [u for u in urls if u]
    if not urls:
        raise OptionError(f"{path}: no URLs")
    return urls


def _host_entries(args: argparse.Namespace) -> "list[HostEntry]":
    from trnwatch.collectors.hostlist import (
        HostEntry,
        HostlistError,
        HostNameError,
        expand_hostlist,
        load_hosts_file,
        slurm_job_hosts,
    )

    try:
        if args.hosts_file:
            return load_hosts_file(args.hosts_file)
        names = slurm_job_hosts() if args.hosts == SLURM_JOB else expand_hostlist(args.hosts)
        return [HostEntry(name, name) for name in names]
    except (HostlistError, HostNameError) as exc:
        raise OptionError(str(exc)) from None


def _checked_command(command: str) -> str:
    if not command.strip() or not command.isprintable():
        raise OptionError(
            "--remote-command / --remote-sysfs-command / --remote-kernel-log-command must be a non-empty single line"
        )
    return command


def _ssh_options(args: argparse.Namespace, command: str) -> "SshOptions":
    from trnwatch.collectors.ssh import SshOptions

    executable = shutil.which("ssh")
    if executable is None:
        raise OptionError("ssh not found on PATH: install the OpenSSH client (e.g. apt-get install openssh-client)")
    if args.ssh_config is not None and not args.ssh_config.is_file():
        raise OptionError(f"--ssh-config {args.ssh_config}: no such file")
    return SshOptions(config_file=args.ssh_config, remote_command=command, executable=executable)


def ssh_sources(args: argparse.Namespace) -> ScaleOut:
    """One source per host (a hosts file also maps hosts to UltraServers)."""
    from trnwatch.collectors.ssh import DEFAULT_REMOTE_COMMAND, ssh_host_lines

    if args.prometheus_token_file:
        raise OptionError("--prometheus-token-file goes with --scrape or --prometheus")
    entries = _host_entries(args)
    command = _checked_command(args.remote_command) if args.remote_command is not None else DEFAULT_REMOTE_COMMAND
    options = _ssh_options(args, command)
    period_s = args.period
    sources = [SourceSpec(e.label, "neuron-monitor", partial(ssh_host_lines, e, options, period_s)) for e in entries]
    return ScaleOut(sources, {e.label: e.ultraserver for e in entries if e.ultraserver is not None})


def ssh_sysfs_sources(args: argparse.Namespace) -> ScaleOut:
    """Each host's sysfs over SSH, one source `sysfs:<label>` per host: the sampler runs there
    (collectors/sysfs.py, `remote_reader_command`) and writes a sample each period."""
    from trnwatch.collectors.ssh import ssh_stream
    from trnwatch.collectors.sysfs import KIND as KIND_SYSFS
    from trnwatch.collectors.sysfs import remote_reader_command
    from trnwatch.collectors.sysfs_sample import remote_source_id

    entries = _host_entries(args)
    root = str(args.sysfs_root) if args.sysfs_root else "/sys"
    given = args.remote_sysfs_command
    command = _checked_command(given) if given is not None else remote_reader_command(root, args.period)
    options = _ssh_options(args, command)
    sources = []
    for e in entries:
        source_id = remote_source_id(e.label)
        sources.append(
            SourceSpec(source_id, KIND_SYSFS, partial(ssh_stream, e.host, source_id, KIND_SYSFS, options, b"\n"))
        )
    return ScaleOut(sources, {e.label: e.ultraserver for e in entries if e.ultraserver is not None})


def ssh_kernel_log_sources(args: argparse.Namespace, started_s: float) -> ScaleOut:
    """Each host's kernel log over SSH, one source `kernel-log:<label>` per host
    (collectors/kernel_source.py `ssh_kernel_log_lines`), from a while before `started_s`."""
    from trnwatch.collectors import kernel_source
    from trnwatch.collectors.kernel_log import remote_source_id as remote_kernel_source_id

    entries = _host_entries(args)
    given = args.remote_kernel_log_command
    command = _checked_command(given) if given is not None else kernel_source.REMOTE_COMMAND
    options = _ssh_options(args, command)
    sources = []
    for e in entries:
        source_id = remote_kernel_source_id(e.label)
        lines = partial(kernel_source.ssh_kernel_log_lines, e.host, source_id, options, started_s)
        sources.append(SourceSpec(source_id, kernel_source.KIND, lines))
    return ScaleOut(sources, {})
