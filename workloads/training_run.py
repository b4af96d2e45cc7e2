"""The reference workload's run on one rank: set up the backend, resume from the newest complete
checkpoint, train up to `--steps` with the phases, steps and saves reported as telemetry."""

import argparse
import os
import time

import torch

from trnwatch.workloads.checkpoint_files import checkpoint_tag, newest_complete_checkpoint, read_restart_count
from trnwatch.workloads.emitter import JobEmitter
from trnwatch.workloads.fault_injection import Faults
from trnwatch.workloads.synthetic_data import synthetic_batch
from trnwatch.workloads.tiny_gpt import TinyGPT, parameter_count


def train(args: argparse.Namespace, emitter: JobEmitter, backend) -> None:
    """Set up, resume if a complete checkpoint exists, and train up to `args.steps`."""
    faults = Faults(args, emitter.rank)
    faults.before_step(0, emitter, "init")  # step 0: before this rank joins the process group
    with emitter.region("collective:init"):  # a rendezvous: every rank waits here for the others
        backend.setup()
    # Rank 0 decides, so all ranks resume from the same checkpoint even on a lagging shared FS.
    resumed_step = backend.broadcast_step(
        newest_complete_checkpoint(args.checkpoint_dir) if backend.rank == 0 else None
    )
    tag = None if resumed_step is None else checkpoint_tag(resumed_step)
    restart = 0 if tag is None else read_restart_count(os.path.join(args.checkpoint_dir, tag)) + 1
    global_batch = args.micro_batch * backend.dp_size
    emitter.run_start(
        world_size=backend.world,
        local_rank=backend.local_rank,
        model_name=f"tiny-gpt-d{args.model_dim}-l{args.layers}",
        params=parameter_count(args.model_dim, args.layers, args.seq_len),
        global_batch=global_batch,
        micro_batch=args.micro_batch,
        seq_len=args.seq_len,
        tp=backend.tp_size,
        pp=1,
        dp=backend.dp_size,
        restart=restart,
        **backend.run_start_fields(),
    )
    with emitter.phase("init"):
        torch.manual_seed(args.seed)  # identical on all ranks: replicated weights agree, shards tile
        model, optimizer = backend.build(
            lambda: TinyGPT(args.model_dim, args.layers, args.heads, args.seq_len, backend)
        )
        first_step = 1
        if tag:
            emitter.checkpoint("load", "begin", resumed_step, tag)
            with emitter.region("checkpoint"):
                backend.load(os.path.join(args.checkpoint_dir, tag), model, optimizer)
            emitter.checkpoint("load", "end", resumed_step, tag)
            first_step = resumed_step + 1

    tokens_per_step = global_batch * args.seq_len
    phase = "warmup"
    emitter.begin_phase(phase)
    for step in range(first_step, args.steps + 1):
        if phase == "warmup" and step >= first_step + args.warmup_steps:
            emitter.end_phase(phase)
            phase = "steady"
            emitter.begin_phase(phase)
        emitter.set_step(step)
        start_s = time.perf_counter()
        faults.before_step(step, emitter, backend.first_collective_op)
        with emitter.region("dataloader"):
            ids, labels = synthetic_batch(args.seed, step, backend.dp_rank, args.micro_batch, args.seq_len)
        loss, collective_s = backend.train_step(step, model, optimizer, ids, labels)
        faults.slow_down(time.perf_counter() - start_s - (collective_s or 0.0), emitter)
        step_time_s = time.perf_counter() - start_s
        compute_s = None if collective_s is None else step_time_s - collective_s
        emitter.step(step, step_time_s, compute_s, tokens_per_step, loss)
        backend.after_step(step)
        if args.checkpoint_interval and step % args.checkpoint_interval == 0:
            save_checkpoint(args, emitter, backend, model, optimizer, step, restart)
    emitter.end_phase(phase)


def save_checkpoint(args, emitter: JobEmitter, backend, model, optimizer, step: int, restart: int) -> None:
    """Save in NxD's layout and report it as a checkpoint phase and save events."""
    tag = checkpoint_tag(step)
    with emitter.phase("checkpoint"), emitter.region("checkpoint"):
        emitter.checkpoint("save", "begin", step, tag)
        backend.save(os.path.join(args.checkpoint_dir, tag), model, optimizer, {"step": step, "restart": restart})
        emitter.checkpoint("save", "end", step, tag)
