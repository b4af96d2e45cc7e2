"""The reference workload's checkpoint layout, NxD's: `<checkpoint-dir>/step_NNNNNNNN/{checkpoint,
model/, optim/, trnwatch.json, done}`, each file written to a temporary name and renamed, and
the resume decision read from it. Imports no torch: the backends write the shards themselves."""

import json
import os
import re

CHECKPOINT_TAG = re.compile(r"^step_(\d{8})$")
RESUME_INFO = "trnwatch.json"


def checkpoint_tag(step: int) -> str:
    """Directory name of the checkpoint taken after `step`."""
    return f"step_{step:08d}"


def newest_complete_checkpoint(checkpoint_dir: str) -> int | None:
    """Step of the highest-step checkpoint that has its `done` marker, or None."""
    try:
        names = os.listdir(checkpoint_dir)
    except FileNotFoundError:
        return None
    complete = [
        int(match[1])
        for match in map(CHECKPOINT_TAG.match, names)
        if match and os.path.exists(os.path.join(checkpoint_dir, match[0], "done"))
    ]
    return max(complete, default=None)


def read_restart_count(tag_dir: str) -> int:
    """How many resumes led to the run that saved this checkpoint (0 if it does not say)."""
    try:
        with open(os.path.join(tag_dir, RESUME_INFO)) as info:
            return json.load(info)["restart"]
    except FileNotFoundError:  # e.g. a Neuron save interrupted between NxD's `done` and our file
        return 0


def write_atomic(path: str, data: bytes) -> None:
    """Write a file under a temporary name and rename it, so readers never see it half written."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temporary = f"{path}.tmp.{os.getpid()}"
    with open(temporary, "wb") as out:
        out.write(data)
    os.replace(temporary, path)
