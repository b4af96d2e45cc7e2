"""Slurm's `srun --label` layout, for a test that cannot run Slurm here: every line a task writes
gets `<task id>: ` before it, the id padded to the width of the largest task id
(SchedMD/slurm src/common/write_labelled_message.c, `_write_label`: `"%0*d: "`; later releases
pad with spaces, `"%*d: "`)."""


def label(task_id: int, ntasks: int, text: str, zero_pad: bool = False) -> str:
    width = len(str(ntasks - 1))
    return f"{task_id:0{width}d}: {text}" if zero_pad else f"{task_id:{width}d}: {text}"
