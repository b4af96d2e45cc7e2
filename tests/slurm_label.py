"""Slurm's `srun --label` layout, for a test that cannot run Slurm here: every line a task writes
gets `<task id>: ` before it, the id padded to the width of the largest task id
(SchedMD/slurm src/common/write_labelled_message.c, `_write_label`: `"%0*d: "`; later releases
pad with spaces, `"%*d: "`); and srun's own `srun: error: ` lines for tasks that ended badly."""

import signal


def label(task_id: int, ntasks: int, text: str, zero_pad: bool = False) -> str:
    width = len(str(ntasks - 1))
    return f"{task_id:0{width}d}: {text}" if zero_pad else f"{task_id:{width}d}: {text}"


def bit_fmt(task_ids: list[int]) -> str:
    """SchedMD/slurm src/common/bitstring.c `bit_fmt`: set bits in order, runs as `start-end`,
    joined by `,` (`0-2,5`)."""
    out, ids, i = [], sorted(set(task_ids)), 0
    while i < len(ids):
        start = ids[i]
        while i + 1 < len(ids) and ids[i + 1] == ids[i] + 1:
            i += 1
        out.append(f"{start}" if ids[i] == start else f"{start}-{ids[i]}")
        i += 1
    return ",".join(out)


def task_exit(
    hosts: str,
    task_ids: list[int],
    exit_code: int | None = None,
    signum: int | None = None,
    core_dumped: bool = False,
    oom: bool = False,
) -> str:
    """srun's line for tasks that ended badly, as SchedMD/slurm@284c3b95f0 prints it at its default
    level: src/srun/launch.c `_task_finish` (`task_str` from `_taskstr`: "task" for one, "tasks"
    otherwise; `tasks` from `bit_fmt`; `hosts` the tasks' host list), through src/common/log.c
    `_log_msg` (`"%s: %s%s%s", argv0, "error: ", buf, eol`)."""
    task_str = "task" if len(task_ids) == 1 else "tasks"
    tasks = bit_fmt(task_ids)
    if oom:
        buf = "%s: %s %s: Out Of Memory" % (hosts, task_str, tasks)  # noqa: UP031 (Slurm's printf format, verbatim)
    elif exit_code is not None:
        buf = "%s: %s %s: Exited with exit code %d" % (hosts, task_str, tasks, exit_code)  # noqa: UP031 (Slurm's printf format, verbatim)
    else:
        assert signum is not None
        core_str = " (core dumped)" if core_dumped else ""
        buf = "%s: %s %s: %s%s" % (hosts, task_str, tasks, signal.strsignal(signum), core_str)  # noqa: UP031 (Slurm's printf format, verbatim)
    return "%s: %s%s" % ("srun", "error: ", buf)  # noqa: UP031 (Slurm's printf format, verbatim)
