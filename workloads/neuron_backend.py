"""Trainium backend of the reference workload: torch-neuronx + neuronx-distributed (NxD), bf16.

NEVER RUN HERE: written against the NxD training APIs of Neuron SDK 2.28.x (the last release with
supported NxD training) from their documented signatures; there was no Trainium to run it on.
Same interface as `cpu_backend.CpuBackend`. Differences that matter to the monitor:

- Collectives live inside the XLA step graph, so host timers around them lie. Every
  `--probe-interval` steps the backend drains the device queue and times a 1-element all-reduce
  (the wait for the slowest peer) then a 1 MiB all-reduce on the DP groups (TP groups when dp = 1),
  reported as `probe_all_reduce` inside a `probe` phase; `compute_s` of steps is null.
- The step time ends at device completion: the loss is read with `.item()` after `mark_step`, one
  host sync per step (simpler honest timing, at the cost of host/device overlap).
- The first step is reported as the `compile` phase (graph compile or NEFF cache load).
"""

import importlib.metadata
import json
import os
import subprocess
import time

import torch
import torch.distributed as dist

from trnwatch.workloads.checkpoint_files import RESUME_INFO, write_atomic
from trnwatch.workloads.cpu_backend import broadcast_step

INSTALL_HINT = (
    "Install torch-neuronx, torch-xla and neuronx-distributed from AWS's Neuron pip repository on a "
    "Trainium host (PyPI's packages of those names are placeholders), or run with --device cpu."
)
PROBE_BYTES = 1 << 20
_VERSIONED = ("torch", "torch-neuronx", "torch-xla", "neuronx-distributed", "neuronx-cc", "libneuronxla")


def neuron_unavailable_reason() -> str | None:
    """Why the Neuron backend cannot run here, or None when it can."""
    if not os.path.exists("/dev/neuron0"):
        return "no Neuron device (/dev/neuron0 is missing)"
    try:
        import neuronx_distributed  # noqa: F401
        import torch_neuronx  # noqa: F401
        import torch_xla  # noqa: F401
    except ImportError as exc:  # also what PyPI's placeholder packages raise
        return f"Neuron packages are not importable ({exc})"
    return None


def _chip_of_core(core: int) -> int | None:
    """Device index holding NeuronCore `core`, from `neuron-ls -j`; None if it cannot tell."""
    try:
        listing = json.loads(subprocess.run(["neuron-ls", "-j"], capture_output=True, timeout=10, check=True).stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    for index, device in enumerate(listing if isinstance(listing, list) else []):
        if core in (device.get("neuroncore_ids") or []):
            return device.get("neuron_device", index)
    return None


class NeuronBackend:
    """NxD on Trainium, same methods as `cpu_backend.CpuBackend`; Neuron modules are imported on creation."""

    precision = "bf16"

    def __init__(self, args, emitter):
        import neuronx_distributed as nxd
        import torch_xla.core.xla_model as xm
        from neuronx_distributed.parallel_layers import layers, parallel_state

        self.args, self.emitter = args, emitter
        self.nxd, self.xm, self.ps, self.layers = nxd, xm, parallel_state, layers
        self.first_collective_op = "all_reduce"
        self._compiled = False

    def setup(self) -> None:
        import torch_xla.distributed.xla_backend  # noqa: F401  registers the "xla" process group

        os.environ.setdefault("NEURON_RT_STOCHASTIC_ROUNDING_EN", "1")  # pure bf16 weights
        dist.init_process_group("xla")
        self.config = self.nxd.neuronx_distributed_config(tensor_parallel_size=self.args.tp)  # also sets up groups
        self.cpu_group = dist.new_group(backend="gloo")  # host-side side channel (checkpoint tag broadcast)
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.tp_size, self.tp_rank = self.ps.get_tensor_model_parallel_size(), self.ps.get_tensor_model_parallel_rank()
        self.dp_size, self.dp_rank = self.ps.get_data_parallel_size(), self.ps.get_data_parallel_rank()
        self.device = self.xm.xla_device()

    def run_start_fields(self) -> dict:
        visible = os.environ.get("NEURON_RT_VISIBLE_CORES", "")
        core = int(visible) if visible.isdigit() else self.local_rank  # torchrun maps LOCAL_RANK to a core
        versions = {}
        for package in _VERSIONED:
            try:
                versions[package] = importlib.metadata.version(package)
            except importlib.metadata.PackageNotFoundError:
                pass
        lnc = os.environ.get("NEURON_LOGICAL_NC_CONFIG", "")
        return {
            "backend": "neuron",
            "core": core,
            "chip": _chip_of_core(core),
            "precision": self.precision,
            "versions": versions,
            "lnc": int(lnc) if lnc.isdigit() else None,
        }

    def column(self, in_features: int, out_features: int):
        return self.layers.ColumnParallelLinear(in_features, out_features, bias=False, gather_output=False)

    def row(self, in_features: int, out_features: int):
        return self.layers.RowParallelLinear(in_features, out_features, bias=False, input_is_parallel=True)

    def build(self, make_model):
        model = self.nxd.initialize_parallel_model(self.config, lambda: make_model().to(torch.bfloat16))
        optimizer = self.nxd.initialize_parallel_optimizer(
            self.config, torch.optim.AdamW, model.parameters(), lr=self.args.learning_rate, weight_decay=0.01
        )
        return model, optimizer

    def broadcast_step(self, step: int | None) -> int | None:
        """Rank 0's step number (or None) on every rank, over the gloo side group."""
        return broadcast_step(step, group=self.cpu_group)

    def train_step(self, step: int, model, optimizer, ids, labels) -> tuple[float, None]:
        if not self._compiled:
            self._compiled = True
            with self.emitter.phase("compile"):
                return self._train_step(model, optimizer, ids, labels)
        return self._train_step(model, optimizer, ids, labels)

    def _train_step(self, model, optimizer, ids, labels) -> tuple[float, None]:
        xm = self.xm
        with self.emitter.region("compute"):
            loss = model(ids.to(self.device), labels.to(self.device))
            loss.backward()
            optimizer.step()  # NxD optimizer: DP gradient all-reduce + clipping inside the graph
            optimizer.zero_grad()
            if self.dp_size > 1:
                groups = self.ps.get_data_parallel_replica_groups()
                loss = xm.all_reduce(xm.REDUCE_SUM, loss.detach() / self.dp_size, groups=groups)
            xm.mark_step()
        with self.emitter.region("device_wait"):
            return loss.item(), None  # blocks until the step's graph has run on the device

    def after_step(self, step: int) -> None:
        """Every --probe-interval steps: drained, timed all-reduce probes (see module docstring)."""
        if self.args.probe_interval <= 0 or step % self.args.probe_interval:
            return
        xm = self.xm
        if self.dp_size > 1:
            groups = self.ps.get_data_parallel_replica_groups()
        else:
            groups = self.ps.get_tensor_model_parallel_replica_groups()
        with self.emitter.phase("probe"), self.emitter.region("collective:probe_all_reduce"):
            marker = torch.zeros(1, device=self.device)
            payload = torch.zeros(PROBE_BYTES // 4, device=self.device)
            xm.mark_step()
            xm.wait_device_ops()  # drain: the probe must not queue behind this rank's own work
            # Results are bound to names: XLA runs only ops whose results are alive at mark_step.
            start_s = time.perf_counter()
            arrived = xm.all_reduce(xm.REDUCE_SUM, marker, groups=groups)  # noqa: F841
            xm.mark_step()
            xm.wait_device_ops()
            arrived_s = time.perf_counter()
            reduced = xm.all_reduce(xm.REDUCE_SUM, payload, groups=groups)  # noqa: F841
            xm.mark_step()
            xm.wait_device_ops()
            done_s = time.perf_counter()
        self.emitter.collective("probe_all_reduce", PROBE_BYTES, done_s - start_s, arrived_s - start_s, step)

    def save(self, tag_dir: str, model, optimizer, resume_info: dict) -> None:
        # NxD writes <tag>/checkpoint first and <tag>/done last, the layout the monitor watches.
        checkpoint_dir, tag = os.path.split(tag_dir)
        self.nxd.save_checkpoint(checkpoint_dir, tag, model=model, optimizer=optimizer, user_content=resume_info)
        if self.rank == 0:
            write_atomic(os.path.join(tag_dir, RESUME_INFO), json.dumps(resume_info).encode())

    def load(self, tag_dir: str, model, optimizer) -> None:
        checkpoint_dir, tag = os.path.split(tag_dir)
        self.nxd.load_checkpoint(checkpoint_dir, tag=tag, model=model, optimizer=optimizer)

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
