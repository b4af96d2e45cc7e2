"""A tiny PyTorch Lightning run on CPU that records its own truth, for tests/test_lightning_logs.py.

`python tests/lightning_run.py TRUTH.json [--steps N] [--batches B] [--step-s S] [--stall-step K
--stall-s T] [--save-every C] [--rich] [--nxdt]`: a linear model trained for N optimizer steps (max_steps)
over epochs of B batches, each step sleeping S seconds (T more in step K), a checkpoint every C
steps (ModelCheckpoint, verbose, so Lightning logs each save), the default TQDM progress bar (or
RichProgressBar with --rich). Lightning writes its bar to stdout and its messages to stderr; the
caller decides where they go (a file, a pseudo-terminal). The truth (each step's end and time by
this process's clock, the stall, the saves, the last step) is written to TRUTH.json at the end.

`--nxdt`: NxD Training's side of the same Lightning 2.5.0 (the version NxD Training pins,
aws-neuron/neuronx-distributed-training@9169aa0 requirements.txt), which cannot run here (it needs
Trainium): the module logs to the bar what NxDT's `log_metrics` logs, in its order and with its
calls (src/neuronx_distributed_training/lightning_modules/model/base.py @9169aa0, lines 640-654:
`log_fn(name, value, prog_bar=True, rank_zero_only=True)`), the run starts with the line its
exp_manager logs through NeMo's logger (src/neuronx_distributed_training/utils/exp_manager.py:246
`logging.info(f"Experiments will be logged at {log_dir}")`, NVIDIA/NeMo nemo/utils/formatters/base.py
BaseNeMoFormatter `[NeMo %(levelname)1.1s %(asctime)s %(module)s:%(lineno)d] %(message)s`), a
logger gives the bar its `v_num`, and each save is NxD's own (tests/nxd_logs.py's library logger:
`synced saving of checkpoint step_N began` / `completed`) instead of ModelCheckpoint's.
"""

import argparse
import json
import logging
import sys
import time

import nxd_logs  # tests/ is this script's directory
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Checkpoint, ModelCheckpoint, RichProgressBar
from pytorch_lightning.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset


class Tiny(pl.LightningModule):
    def __init__(self, step_s: float, stall_step: int | None, stall_s: float):
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)
        self.step_s, self.stall_step, self.stall_s = step_s, stall_step, stall_s

    def training_step(self, batch, batch_idx):
        time.sleep(self.step_s + (self.stall_s if self.global_step + 1 == self.stall_step else 0.0))
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss, prog_bar=True)
        # More bar metrics, as real trainers log (NxD Training logs these): a postfix longer than
        # a 120-column terminal, so tqdm cuts the line there.
        step = float(self.global_step + 1)
        for name, value in (
            ("lr", 0.01),
            ("consumed_samples", 4 * step),
            ("throughput", 35.2),
            ("throughput_peak", 36.0),
            ("grad_norm", 1.23),
            ("global_step", step),
        ):
            self.log(name, value, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class NxdtTiny(Tiny):
    """The same step, its bar metrics logged as NxD Training's `log_metrics` logs them."""

    def training_step(self, batch, batch_idx):
        time.sleep(self.step_s + (self.stall_s if self.global_step + 1 == self.stall_step else 0.0))
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        norm = torch.linalg.vector_norm(self.layer.weight.detach())
        self.log_metrics(
            self.log, loss, None, 1.5e-4, self.global_step, 4.0 * (self.global_step + 1), norm, norm, 35.2, 36.0
        )
        return loss

    def log_metrics(
        self,
        log_fn,
        loss_mean,
        misc_metrics,
        lr,
        global_step,
        consumed_samples,
        grad_norm,
        param_norm,
        throughput,
        throughput_peak,
    ):
        # base.py @9169aa0 lines 638-654, statement for statement (no misc metrics here).
        loss_cpu = loss_mean.detach().cpu()
        log_fn("reduced_train_loss", loss_cpu, prog_bar=True, rank_zero_only=True)
        log_fn("lr", lr, prog_bar=True, rank_zero_only=True)
        if param_norm:
            log_fn("parameter_norm", param_norm.detach().cpu(), prog_bar=True, rank_zero_only=True)
        if grad_norm:
            log_fn("gradient_norm", grad_norm.detach().cpu(), prog_bar=True, rank_zero_only=True)
        log_fn("global_step", global_step, prog_bar=True, rank_zero_only=True)
        log_fn("consumed_samples", consumed_samples, prog_bar=True, rank_zero_only=True)
        log_fn("throughput", throughput, prog_bar=True, rank_zero_only=True)
        log_fn("throughput_peak", throughput_peak, prog_bar=True, rank_zero_only=True)


class NxdSaves(Checkpoint):
    """A synced NxD save every `every` steps, logged by NxD's library logger (its own clock). A
    `Checkpoint`, as NxDT's NeMo ModelCheckpoint is (utils/exp_manager.py:579): Lightning runs it
    after the other callbacks, the progress bar's redraw of the step included."""

    def __init__(self, every: int, truth: "Truth"):
        self.every, self.truth = every, truth
        self.logger = nxd_logs.library_logger(sys.stderr, nxd_logs.RealClock())

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step % self.every == 0:
            self.logger.info("synced saving of checkpoint %s began", f"step_{trainer.global_step}")
            self.truth.saves.append({"step": trainer.global_step, "ts": time.time()})
            self.logger.info("synced saving of checkpoint %s completed", f"step_{trainer.global_step}")


def nemo_start_line(log_dir: str) -> None:
    """exp_manager.py:246's line through NeMo's formatter (colour off: not a terminal)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter("[NeMo %(levelname)1.1s %(asctime)s %(module)s:%(lineno)d] %(message)s", "%Y-%m-%d %H:%M:%S")
    )
    record = logging.LogRecord(
        "nemo_logger", logging.INFO, "exp_manager.py", 246, f"Experiments will be logged at {log_dir}", None, None
    )
    handler.handle(record)


class Truth(pl.Callback):
    """Each optimizer step's begin and end (global step after it), and each save, by time.time()."""

    def __init__(self):
        self.begin_s = 0.0
        self.steps: dict[int, dict[str, float]] = {}
        self.saves: list[dict] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.begin_s = time.time()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        end = time.time()
        self.steps[trainer.global_step] = {"end_s": end, "step_time_s": end - self.begin_s}

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        self.saves.append({"step": trainer.global_step, "ts": time.time()})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("truth")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batches", type=int, default=16)
    parser.add_argument("--step-s", type=float, default=0.1)
    parser.add_argument("--stall-step", type=int)
    parser.add_argument("--stall-s", type=float, default=0.0)
    parser.add_argument("--save-every", type=int, default=0)
    parser.add_argument("--rich", action="store_true")
    parser.add_argument("--nxdt", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(args.batches * 4, 8), torch.randn(args.batches * 4, 1))
    truth = Truth()
    callbacks: list[pl.Callback] = [truth]
    if args.nxdt:
        nemo_start_line(args.truth + ".root")
        if args.save_every:
            callbacks.append(NxdSaves(args.save_every, truth))
    elif args.save_every:
        callbacks.append(
            ModelCheckpoint(monitor="train_loss", every_n_train_steps=args.save_every, save_top_k=-1, verbose=True)
        )
    if args.rich:
        callbacks.append(RichProgressBar())
    trainer = pl.Trainer(
        max_steps=args.steps,
        accelerator="cpu",
        logger=CSVLogger(args.truth + ".root") if args.nxdt else False,
        enable_checkpointing=bool(args.save_every),
        callbacks=callbacks,
        default_root_dir=args.truth + ".root",
        enable_model_summary=False,
    )
    started_s = time.time()
    model = (NxdtTiny if args.nxdt else Tiny)(args.step_s, args.stall_step, args.stall_s)
    trainer.fit(model, DataLoader(data, batch_size=4))
    with open(args.truth, "w") as out:
        json.dump(
            {
                "started_s": started_s,
                "ended_s": time.time(),
                "steps": truth.steps,
                "saves": truth.saves,
                "stall_step": args.stall_step,
                "last_step": trainer.global_step,
            },
            out,
        )


if __name__ == "__main__":
    main()
