"""Reference training workload: a small GPT with tensor and data parallelism, launched by torchrun.

On CPU (anywhere) it runs with torch.distributed + gloo, doing the tensor-parallel all-reduces by
hand (NxD's ColumnParallel/RowParallel semantics) so both backends show the same collectives. On
Trainium (`--device neuron`, see train_neuron.py) it uses torch-neuronx + neuronx-distributed.

    torchrun --standalone --nproc-per-node 2 -m trnwatch.workloads.train \\
        --run-dir /tmp/trnwatch-run --steps 200 --tp 2

It emits `trnwatch.job/1` telemetry to `<telemetry-dir>/rank-NNNNN.jsonl` (default
`<run-dir>/telemetry`), checkpoints every `--checkpoint-interval` steps in NxD's layout
(`<checkpoint-dir>/step_NNNNNNNN/{checkpoint, model/, optim/, trnwatch.json, done}`, each file
written to a temporary name and renamed) and resumes from the newest complete checkpoint.

Flag names avoid prefixes of torchrun's own options: torchrun's argparse matches abbreviations
across the whole command line, so e.g. `--d` would abort the launch as ambiguous.
"""

import argparse
import json
import os
import platform
import re
import signal
import sys
import time

try:
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as missing:  # the model classes below need torch at import time: say so, no traceback
    if __name__ != "__main__":
        raise
    raise SystemExit(f"trnwatch.workloads.train needs PyTorch ({missing}). On CPU: pip install torch==2.13.0; "
                     "on Trainium: torch-neuronx from AWS's Neuron repository (README, 'Running on Trainium').") from None

from trnwatch.workloads.emitter import JobEmitter

VOCAB = 256  # byte-level tokens
PATTERN_PERIOD = 8  # synthetic sequences repeat every 8 tokens: learnable, so the loss falls
CHECKPOINT_TAG = re.compile(r"^step_(\d{8})$")
RESUME_INFO = "trnwatch.json"
HANG_REGIONS = ("dataloader", "compute", "collective")


class InjectedCrash(RuntimeError):
    """Raised by --crash-rank/--crash-step."""


class Terminated(BaseException):
    """SIGTERM arrived (torchrun stopping the workers): end the run as aborted."""


def build_parser() -> argparse.ArgumentParser:
    """The workload's flags (names checked against torchrun's in the tests)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run-dir", required=True, help="directory of this run's outputs")
    parser.add_argument("--run-name", help="run id in telemetry (default: the run directory's name)")
    parser.add_argument("--telemetry-dir", help="where rank-NNNNN.jsonl go (default: <run-dir>/telemetry)")
    parser.add_argument("--checkpoint-dir", help="default: <run-dir>/checkpoints")
    parser.add_argument("--checkpoint-interval", type=int, default=0, help="save every N steps (0: never)")
    parser.add_argument("--steps", type=int, default=100, help="train up to this step number")
    parser.add_argument("--warmup-steps", type=int, default=3, help="steps reported as the warmup phase")
    parser.add_argument("--model-dim", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--micro-batch", type=int, default=8, help="sequences per data-parallel replica per step")
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel degree; dp = world size / tp")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--device", choices=("auto", "cpu", "neuron"), default="auto")
    parser.add_argument("--heartbeat-interval", type=float, default=2.0, help="seconds between heartbeats")
    parser.add_argument("--probe-interval", type=int, default=100, help="Neuron only: steps between collective probes")
    parser.add_argument("--slow-rank", type=int, help="make this rank's compute slower")
    parser.add_argument("--slow-factor", type=float, default=3.0, help="compute time multiplier for --slow-rank")
    parser.add_argument("--hang-rank", type=int, help="make this rank hang forever ...")
    parser.add_argument("--hang-step", type=int, help="... at this step ...")
    parser.add_argument("--hang-region", choices=HANG_REGIONS, default="dataloader", help="... in this region")
    parser.add_argument("--crash-rank", type=int, help="make this rank raise ...")
    parser.add_argument("--crash-step", type=int, help="... at this step")
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and complete the workload's flags."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.telemetry_dir = args.telemetry_dir or os.path.join(args.run_dir, "telemetry")
    args.checkpoint_dir = args.checkpoint_dir or os.path.join(args.run_dir, "checkpoints")
    args.run_name = args.run_name or os.path.basename(os.path.abspath(args.run_dir))
    if args.model_dim % args.heads or args.heads % args.tp:
        parser.error("--model-dim must divide by --heads, and --heads by --tp")
    return args


# ---- model (shared by both backends; the backend supplies the tensor-parallel linears) ----------


class Block(nn.Module):
    """Pre-norm transformer block; attention heads and MLP columns are split across the TP group."""

    def __init__(self, dim: int, heads: int, parallel):
        super().__init__()
        self.local_heads = heads // parallel.tp_size
        self.head_dim = dim // heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = parallel.column(dim, 3 * dim)  # local output: this rank's q, k and v heads
        self.out = parallel.row(dim, dim)  # all-reduce across the TP group inside
        self.norm2 = nn.LayerNorm(dim)
        self.up = parallel.column(dim, 4 * dim)
        self.down = parallel.row(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        q, k, v = (
            part.view(batch, seq, self.local_heads, self.head_dim).transpose(1, 2)
            for part in self.qkv(self.norm1(x)).chunk(3, dim=-1)
        )
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(attended.transpose(1, 2).reshape(batch, seq, -1))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class TinyGPT(nn.Module):
    """Byte-level GPT; embeddings, norms and the LM head are replicated across the TP group."""

    def __init__(self, dim: int, layers: int, heads: int, seq_len: int, parallel):
        super().__init__()
        self.token_embedding = nn.Embedding(VOCAB, dim)
        self.position_embedding = nn.Embedding(seq_len, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, parallel) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, VOCAB, bias=False)

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.token_embedding(ids) + self.position_embedding(positions)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())


def parameter_count(dim: int, layers: int, seq_len: int) -> int:
    """Parameters of the whole (unsharded) TinyGPT."""
    per_block = 12 * dim * dim + 4 * dim  # qkv 3d², out d², up 4d², down 4d², two LayerNorms
    return VOCAB * dim + seq_len * dim + layers * per_block + 2 * dim + dim * VOCAB


def synthetic_batch(seed: int, step: int, dp_rank: int, micro_batch: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Deterministic batch for (step, DP replica), so a resumed run sees the data it would have."""
    generator = torch.Generator().manual_seed((seed * 1_000_003 + step) * 1_009 + dp_rank)
    pattern = torch.randint(VOCAB, (micro_batch, PATTERN_PERIOD), generator=generator)
    tokens = pattern.repeat(1, seq_len // PATTERN_PERIOD + 2)[:, : seq_len + 1]
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


# ---- CPU backend: gloo, hand-made tensor parallelism, every collective timed --------------------


class TimedCollectives:
    """Blocking gloo all-reduces, each timed and reported as a `collective` event.

    Each all-reduce is preceded by a 1-element all-reduce on the same group: it returns when the
    last peer has arrived, so its duration is this rank's wait for peers (plus one small-message
    round trip). `latency_s` spans both, i.e. the time this rank spent in the collective.
    """

    def __init__(self, emitter: JobEmitter):
        self.emitter = emitter
        self.step = 0
        self.step_collective_s = 0.0

    def start_step(self, step: int) -> None:
        self.step, self.step_collective_s = step, 0.0

    def all_reduce(self, tensor: torch.Tensor, group, op: str) -> None:
        arrival = torch.zeros(1)
        with self.emitter.region(f"collective:{op}"):
            start_s = time.perf_counter()
            dist.all_reduce(arrival, group=group)
            arrived_s = time.perf_counter()
            dist.all_reduce(tensor, group=group)
            done_s = time.perf_counter()
        self.step_collective_s += done_s - start_s
        self.emitter.collective(op, tensor.numel() * tensor.element_size(), done_s - start_s, arrived_s - start_s, self.step)


class _CopyToTensorParallel(torch.autograd.Function):
    """Identity forward, all-reduce of the gradient backward (NxD copy_to_tensor_model_parallel_region)."""

    @staticmethod
    def forward(ctx, x, parallel):
        ctx.parallel = parallel
        return x

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        ctx.parallel.all_reduce(grad)
        return grad, None


class _ReduceFromTensorParallel(torch.autograd.Function):
    """All-reduce forward, identity backward (NxD reduce_from_tensor_model_parallel_region)."""

    @staticmethod
    def forward(ctx, x, parallel):
        x = x.clone()
        parallel.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class ColumnLinear(nn.Module):
    """Output features split across the TP group (gather_output=False)."""

    def __init__(self, in_features: int, out_features: int, parallel):
        super().__init__()
        self.parallel = parallel
        full = torch.empty(out_features, in_features)
        nn.init.normal_(full, std=0.02)  # same seed on every rank: the shards form one matrix
        shard = out_features // parallel.tp_size
        self.weight = nn.Parameter(full[parallel.tp_rank * shard : (parallel.tp_rank + 1) * shard].clone())
        self.weight.tensor_model_parallel = True  # the attribute NxD sets on sharded parameters

    def forward(self, x):
        if self.parallel.tp_size > 1:
            x = _CopyToTensorParallel.apply(x, self.parallel)
        return F.linear(x, self.weight)


class RowLinear(nn.Module):
    """Input features split across the TP group; partial outputs summed by an all-reduce."""

    def __init__(self, in_features: int, out_features: int, parallel):
        super().__init__()
        self.parallel = parallel
        full = torch.empty(out_features, in_features)
        nn.init.normal_(full, std=0.02)
        shard = in_features // parallel.tp_size
        self.weight = nn.Parameter(full[:, parallel.tp_rank * shard : (parallel.tp_rank + 1) * shard].clone())
        self.weight.tensor_model_parallel = True

    def forward(self, x):
        y = F.linear(x, self.weight)
        return _ReduceFromTensorParallel.apply(y, self.parallel) if self.parallel.tp_size > 1 else y


class CpuBackend:
    """torch.distributed + gloo on CPU; ranks laid out TP-contiguous like NxD ([DP, TP] grid)."""

    precision = "fp32"

    def __init__(self, args: argparse.Namespace, emitter: JobEmitter):
        self.args = args
        self.emitter = emitter
        self.collectives = TimedCollectives(emitter)

    def setup(self) -> None:
        dist.init_process_group("gloo")
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.tp_size = self.args.tp
        if self.world % self.tp_size:
            raise ValueError(f"world size {self.world} is not a multiple of --tp {self.tp_size}")
        self.dp_size = self.world // self.tp_size
        self.tp_rank, self.dp_rank = self.rank % self.tp_size, self.rank // self.tp_size
        # gloo needs every rank to create every group, in the same order.
        tp_groups = [dist.new_group(list(range(i * self.tp_size, (i + 1) * self.tp_size))) for i in range(self.dp_size)]
        dp_groups = [dist.new_group(list(range(j, self.world, self.tp_size))) for j in range(self.tp_size)]
        self.tp_group, self.dp_group = tp_groups[self.dp_rank], dp_groups[self.tp_rank]
        self.first_collective_op = "tp_all_reduce" if self.tp_size > 1 else "dp_all_reduce"

    def run_start_fields(self) -> dict:
        return {"backend": "cpu", "core": None, "chip": None, "lnc": None, "precision": self.precision,
                "versions": {"torch": torch.__version__, "python": platform.python_version()}}

    def column(self, in_features: int, out_features: int) -> nn.Module:
        return ColumnLinear(in_features, out_features, self)

    def row(self, in_features: int, out_features: int) -> nn.Module:
        return RowLinear(in_features, out_features, self)

    def all_reduce(self, tensor: torch.Tensor) -> None:
        """Tensor-parallel all-reduce (used by the TP layers)."""
        self.collectives.all_reduce(tensor, self.tp_group, "tp_all_reduce")

    def build(self, make_model):
        model = make_model()
        return model, torch.optim.AdamW(model.parameters(), lr=self.args.learning_rate, weight_decay=0.01)

    def broadcast_step(self, step: int | None) -> int | None:
        """Rank 0's step number (or None) on every rank."""
        return broadcast_step(step, group=None)

    def train_step(self, step: int, model, optimizer, ids, labels) -> tuple[float, float | None]:
        """One optimizer step; returns (loss averaged over DP replicas, seconds in collectives)."""
        self.collectives.start_step(step)
        with self.emitter.region("compute"):
            loss = model(ids, labels)
            loss.backward()
        loss_value = loss.item()
        if self.dp_size > 1:
            loss_value = self._average_gradients_and_loss(model, loss)
        with self.emitter.region("optimizer"):
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return loss_value, self.collectives.step_collective_s

    def _average_gradients_and_loss(self, model, loss: torch.Tensor) -> float:
        params = [p for p in model.parameters() if p.grad is not None]
        # One flat bucket: all gradients plus the loss, so the loss average costs no extra collective.
        flat = torch.cat([p.grad.reshape(-1) for p in params] + [loss.detach().reshape(1)])
        self.collectives.all_reduce(flat, self.dp_group, "dp_all_reduce")
        flat /= self.dp_size
        offset = 0
        for p in params:
            p.grad.copy_(flat[offset : offset + p.numel()].view_as(p.grad))
            offset += p.numel()
        return float(flat[-1])

    def after_step(self, step: int) -> None:
        """Nothing: on CPU every real collective is already timed."""

    def save(self, tag_dir: str, model, optimizer, resume_info: dict) -> None:
        if self.rank == 0:
            write_atomic(os.path.join(tag_dir, "checkpoint"), b"")
        if self.dp_rank == 0:  # DP replicas hold identical state, like NxD without ZeRO-1
            shard = f"dp_rank_00_tp_rank_{self.tp_rank:02d}_pp_rank_00.pt"
            _save_atomic(model.state_dict(), os.path.join(tag_dir, "model", shard))
            _save_atomic(optimizer.state_dict(), os.path.join(tag_dir, "optim", shard))
        if self.rank == 0:
            write_atomic(os.path.join(tag_dir, RESUME_INFO), json.dumps(resume_info).encode())
        with self.emitter.region("collective:barrier"):
            dist.barrier()  # every shard is on disk before `done` says so
        if self.rank == 0:
            write_atomic(os.path.join(tag_dir, "done"), b"")

    def load(self, tag_dir: str, model, optimizer) -> None:
        shard = f"dp_rank_00_tp_rank_{self.tp_rank:02d}_pp_rank_00.pt"
        model.load_state_dict(torch.load(os.path.join(tag_dir, "model", shard), weights_only=True))
        optimizer.load_state_dict(torch.load(os.path.join(tag_dir, "optim", shard), weights_only=True))

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def broadcast_step(step: int | None, group) -> int | None:
    """Rank 0's step number (or None) on every rank of `group`."""
    # A plain tensor: broadcast_object_list needs numpy, which the CPU wheel does not bring.
    box = torch.tensor([-1 if step is None else step], dtype=torch.int64)
    dist.broadcast(box, src=0, group=group)
    return None if box.item() < 0 else box.item()


def write_atomic(path: str, data: bytes) -> None:
    """Write a file under a temporary name and rename it, so readers never see it half written."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temporary = f"{path}.tmp.{os.getpid()}"
    with open(temporary, "wb") as out:
        out.write(data)
    os.replace(temporary, path)


def _save_atomic(state: dict, path: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temporary = f"{path}.tmp.{os.getpid()}"
    torch.save(state, temporary)
    os.replace(temporary, path)


# ---- checkpoints --------------------------------------------------------------------------------


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


# ---- fault injection ----------------------------------------------------------------------------


class Faults:
    """The injected faults for this rank (all off unless the flags name this rank)."""

    def __init__(self, args: argparse.Namespace, rank: int):
        self.slow_factor = args.slow_factor if args.slow_rank == rank else 1.0
        self.hang_step = args.hang_step if args.hang_rank == rank else None
        self.hang_region = args.hang_region
        self.crash_step = args.crash_step if args.crash_rank == rank else None

    def before_step(self, step: int, emitter: JobEmitter, first_collective_op: str) -> None:
        if step == self.crash_step:
            raise InjectedCrash(f"injected crash at step {step}")
        if step == self.hang_step:
            region = f"collective:{first_collective_op}" if self.hang_region == "collective" else self.hang_region
            with emitter.region(region):
                while True:  # the main thread is stuck; the heartbeat thread keeps reporting it
                    time.sleep(1.0)

    def slow_down(self, compute_s: float, emitter: JobEmitter) -> None:
        if self.slow_factor > 1.0:
            with emitter.region("compute"):
                time.sleep((self.slow_factor - 1.0) * compute_s)


# ---- the run ------------------------------------------------------------------------------------


def train(args: argparse.Namespace, emitter: JobEmitter, backend) -> None:
    """Set up, resume if a complete checkpoint exists, and train up to `args.steps`."""
    with emitter.region("init:process_group"):
        backend.setup()
    # Rank 0 decides, so all ranks resume from the same checkpoint even on a lagging shared FS.
    resumed_step = backend.broadcast_step(newest_complete_checkpoint(args.checkpoint_dir) if backend.rank == 0 else None)
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

    faults = Faults(args, backend.rank)
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


def backend_class(device: str):
    """CpuBackend, or NeuronBackend when asked for (or `auto` and a Neuron device is usable)."""
    if device == "cpu":
        return CpuBackend
    from trnwatch.workloads import train_neuron  # imports no Neuron package until asked to

    reason = train_neuron.neuron_unavailable_reason()
    if reason is None:
        return train_neuron.NeuronBackend
    if device == "neuron":
        raise SystemExit(f"--device neuron: {reason}. {train_neuron.INSTALL_HINT}")
    return CpuBackend


def main(argv: list[str] | None = None) -> int:
    """Entry point for each torchrun worker; returns the process exit code."""
    args = parse_args(argv)
    backend_type = backend_class(args.device)
    emitter = JobEmitter(args.telemetry_dir, run=args.run_name, heartbeat_interval_s=args.heartbeat_interval)

    def on_sigterm(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM kills at once
        raise Terminated()

    signal.signal(signal.SIGTERM, on_sigterm)
    backend = backend_type(args, emitter)
    status = "failed"
    try:
        train(args, emitter, backend)
        status = "success"
    except (Terminated, KeyboardInterrupt):
        status = "aborted"
    except Exception as exc:
        emitter.error(f"{type(exc).__name__}: {exc}")
        raise
    finally:
        emitter.run_end(status)
        backend.close()
    return 0 if status == "success" else 143


if __name__ == "__main__":
    sys.exit(main())
