"""A tiny Hugging Face transformers Trainer run on CPU that records its own truth, for
tests/test_hf_logs.py.

`python tests/hf_train.py TRUTH_DIR [--steps N] [--logging-steps L] [--step-s S] [--slow-step K
--slow-s T] [--fail-rank R --fail-step K [--fail-attempts A]] [--hang-rank R --hang-step K]
[--save-steps C] [--eval-steps E] [--output-dir D]`, alone or under `torchrun --nproc-per-node 2`
(gloo): a GPT-2 made from a config (2 layers, no hub download, HF_HUB_OFFLINE=1) trained by the
real `Trainer` on random token ids for N steps (max_steps), the default console output (tqdm bar,
a dict every L steps, the train_runtime summary). A real `TrainerCallback` sleeps S seconds in
every step and T more in step K (`--slow-step`), raises a RuntimeError on rank R at the end of
step K in torchrun's first A attempts (`--fail-*`), or blocks rank R there for good (`--hang-*`,
until the launcher stops it). The truth (each step's end and time by this process's clock, each
logged loss as the Trainer handed it to the callbacks, what happened at which step) is written
by every rank to TRUTH_DIR/rank-R-attempt-A.json as it goes (a failing or hung rank keeps what it
had).
"""

import argparse
import json
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

import torch  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments  # noqa: E402

SEQ_LEN, BATCH, VOCAB = 32, 4, 128


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, n: int):
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, VOCAB, (n, SEQ_LEN), generator=generator)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict:
        return {"input_ids": self.ids[index], "labels": self.ids[index]}


class Truth(TrainerCallback):
    """Records each step's end on this process's clock, and makes the case happen."""

    def __init__(self, args: argparse.Namespace, rank: int):
        self.args, self.rank = args, rank
        attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        self.path = Path(args.truth_dir) / f"rank-{rank}-attempt-{attempt}.json"
        self.truth: dict = {"rank": rank, "attempt": attempt, "steps": {}, "case": None}
        self.started = time.time()
        self.last_end = None

    def write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.truth))
        os.replace(tmp, self.path)

    def on_step_begin(self, args, state, control, **kwargs):
        step = state.global_step + 1
        time.sleep(self.args.step_s + (self.args.slow_s if step == self.args.slow_step else 0.0))

    def on_step_end(self, args, state, control, **kwargs):
        now = time.time()
        step = state.global_step
        previous = self.last_end if self.last_end is not None else self.started
        self.truth["steps"][str(step)] = {"end_s": now, "interval_s": now - previous}
        self.truth["last_step"] = step
        self.last_end = now
        failing = self.truth["attempt"] < self.args.fail_attempts
        if self.rank == self.args.fail_rank and step == self.args.fail_step and failing:
            self.truth["case"] = {"what": "raise", "step": step, "ts": now}
            self.write()
            raise RuntimeError(f"injected failure on rank {self.rank} at step {step}")
        if self.rank == self.args.hang_rank and step == self.args.hang_step:
            self.truth["case"] = {"what": "hang", "step": step, "ts": now}
            self.write()
            while True:  # blocked for good: the peers wait in their next all-reduce
                time.sleep(3600)
        self.write()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and isinstance(logs.get("loss"), (int, float)):  # the training log's loss, unrounded
            self.truth.setdefault("losses", {})[str(state.global_step)] = float(logs["loss"])
            self.write()

    def on_train_end(self, args, state, control, **kwargs):
        self.truth["finished_s"] = time.time()
        self.write()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("truth_dir")
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--logging-steps", type=int, default=2)
    parser.add_argument("--save-steps", type=int, default=0)
    parser.add_argument("--step-s", type=float, default=0.0)
    parser.add_argument("--slow-step", type=int, default=0)
    parser.add_argument("--slow-s", type=float, default=0.0)
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--fail-step", type=int, default=0)
    parser.add_argument("--fail-attempts", type=int, default=1000)
    parser.add_argument("--hang-rank", type=int, default=-1)
    parser.add_argument("--hang-step", type=int, default=0)
    parser.add_argument("--eval-steps", type=int, default=0)
    parser.add_argument("--output-dir", default="")
    args = parser.parse_args()
    rank = int(os.environ.get("RANK", "0"))
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=SEQ_LEN, n_embd=32, n_layer=2, n_head=2))
    output_dir = args.output_dir or os.path.join(args.truth_dir, "out")
    training = TrainingArguments(
        output_dir=output_dir,
        max_steps=args.steps,
        per_device_train_batch_size=BATCH,
        logging_steps=args.logging_steps,
        save_strategy="steps" if args.save_steps else "no",
        save_steps=args.save_steps or 500,
        learning_rate=5e-4,
        report_to=[],
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=False,
        eval_strategy="steps" if args.eval_steps else "no",
        eval_steps=args.eval_steps or None,
        per_device_eval_batch_size=BATCH,
    )
    trainer = Trainer(
        model=model,
        args=training,
        train_dataset=RandomTokens(BATCH * args.steps * 2),
        eval_dataset=RandomTokens(BATCH * 6) if args.eval_steps else None,
    )
    trainer.add_callback(Truth(args, rank))
    trainer.train()


if __name__ == "__main__":
    main()
