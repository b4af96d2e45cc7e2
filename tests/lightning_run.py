"""A tiny PyTorch Lightning run on CPU that records its own truth, for tests/test_lightning_logs.py.

`python tests/lightning_run.py TRUTH.json [--steps N] [--batches B] [--step-s S] [--stall-step K
--stall-s T] [--save-every C] [--rich]`: a linear model trained for N optimizer steps (max_steps)
over epochs of B batches, each step sleeping S seconds (T more in step K), a checkpoint every C
steps (ModelCheckpoint, verbose, so Lightning logs each save), the default TQDM progress bar (or
RichProgressBar with --rich). Lightning writes its bar to stdout and its messages to stderr; the
caller decides where they go (a file, a pseudo-terminal). The truth (each step's end and time by
this process's clock, the stall, the saves, the last step) is written to TRUTH.json at the end.
"""

import argparse
import json
import time

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint, RichProgressBar
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
    args = parser.parse_args()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(args.batches * 4, 8), torch.randn(args.batches * 4, 1))
    truth = Truth()
    callbacks: list[pl.Callback] = [truth]
    if args.save_every:
        callbacks.append(
            ModelCheckpoint(monitor="train_loss", every_n_train_steps=args.save_every, save_top_k=-1, verbose=True)
        )
    if args.rich:
        callbacks.append(RichProgressBar())
    trainer = pl.Trainer(
        max_steps=args.steps,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=bool(args.save_every),
        callbacks=callbacks,
        default_root_dir=args.truth + ".root",
        enable_model_summary=False,
    )
    started_s = time.time()
    trainer.fit(Tiny(args.step_s, args.stall_step, args.stall_s), DataLoader(data, batch_size=4))
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
