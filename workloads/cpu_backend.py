"""CPU backend of the reference workload: torch.distributed + gloo, with the tensor-parallel
all-reduces done by hand (NxD's ColumnParallel/RowParallel semantics) so both backends show the
same collectives, every one of them timed.

The backend interface (both this and `neuron_backend.NeuronBackend`): setup, run_start_fields,
column / row (the TP linears the model asks for), build, broadcast_step, train_step, after_step,
save, load, close; attributes rank, world, local_rank, tp_size / tp_rank, dp_size / dp_rank,
first_collective_op and precision.
"""

import argparse
import json
import os
import platform
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from trnwatch.workloads.checkpoint_files import RESUME_INFO, write_atomic
from trnwatch.workloads.emitter import JobEmitter


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
        self.emitter.collective(
            op, tensor.numel() * tensor.element_size(), done_s - start_s, arrived_s - start_s, self.step
        )


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
        # the attribute NxD sets on sharded parameters (torch's stubs do not know it)
        self.weight.tensor_model_parallel = True  # type: ignore[attr-defined]

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
        self.weight.tensor_model_parallel = True  # type: ignore[attr-defined]  # as above

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
        return {
            "backend": "cpu",
            "core": None,
            "chip": None,
            "lnc": None,
            "precision": self.precision,
            "versions": {"torch": torch.__version__, "python": platform.python_version()},
        }

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
    """Rank 0's step number (or None) on every rank of `group` (a gloo group: also the Neuron
    backend's host-side side channel)."""
    # A plain tensor: broadcast_object_list needs numpy, which the CPU wheel does not bring.
    box = torch.tensor([-1 if step is None else step], dtype=torch.int64)
    dist.broadcast(box, src=0, group=group)
    return None if box.item() < 0 else int(box.item())


def _save_atomic(state: dict, path: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temporary = f"{path}.tmp.{os.getpid()}"
    torch.save(state, temporary)
    os.replace(temporary, path)
