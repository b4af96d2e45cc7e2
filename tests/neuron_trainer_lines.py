"""optimum-neuron's NeuronTrainer console, which needs Trainium to run: the real transformers
ProgressCallback (the callback NeuronTrainer prints through) driven step by step with the dicts
NeuronTrainer logs, built with its statements, for tests/test_hf_logs.py.

Read from huggingface/optimum-neuron@213224e6aae42e570b88b3a5e6f2716112823469:
- optimum/neuron/trainers/transformers.py `maybe_log_train_step_metrics`: `logs["loss"] =
  round(loss_scalar / (self.state.global_step - self.global_step_last_logged), 4)`,
  `logs["learning_rate"] = ...`, `logs["grad_norm"] = ...`, `logs.update(metrics)` where
  `metrics = self.metrics_collector.calculate_metric("all")`; `log`: `logs["epoch"] = self.state.epoch`,
  then `callback_handler.on_log(...)`;
- optimum/neuron/trainers/metrics/throughput.py `calculate_realtime`: `metrics["train/tokens_per_sec"] =
  global_tps` (local tokens / window time x dp_size), `metrics["train/step_time"] =
  window_stats["avg_time_per_step"]`;
- metrics/mfu.py `calculate_realtime`: `{"train/mfu": round(system_mfu_pct, 2)}`;
- metrics/efficiency.py: `"train/efficiency": round(efficiency_pct, 2)` and the time percents.

`python tests/neuron_trainer_lines.py TRUTH.json [--steps N] [--logging-steps L] [--step-s S]`:
the bar and dicts go to stderr as the Trainer's do; each step sleeps S seconds and its measured
time, the tokens/s logged and the steps are written to TRUTH.json.
"""

import argparse
import json
import sys
import time

from transformers import TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_callback import ProgressCallback

SEQ_LEN, BATCH, DP_SIZE = 4096, 1, 2


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("truth")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--logging-steps", type=int, default=1)
    parser.add_argument("--step-s", type=float, default=0.2)
    args = parser.parse_args()
    training = TrainingArguments(output_dir="/nonexistent", report_to=[], max_steps=args.steps)
    state, control = TrainerState(max_steps=args.steps, is_world_process_zero=True), TrainerControl()
    callback = ProgressCallback()
    callback.on_train_begin(training, state, control)
    truth: dict = {"steps": {}, "logged": {}}
    window: list[float] = []
    for step in range(1, args.steps + 1):
        started = time.perf_counter()
        time.sleep(args.step_s)
        step_time = time.perf_counter() - started
        window.append(step_time)
        state.global_step, state.epoch = step, step / args.steps
        callback.on_step_end(training, state, control)
        truth["steps"][str(step)] = step_time
        if step % args.logging_steps == 0:
            total_time = sum(window)
            metrics = {
                "train/tokens_per_sec": BATCH * SEQ_LEN * len(window) / total_time * DP_SIZE,
                "train/step_time": total_time / len(window),
                "train/mfu": round(31.4159, 2),
                "train/efficiency": round(87.5, 2),
            }
            window = []
            logs: dict = {"loss": round(10.0 / (1 + 0.1 * step), 4), "learning_rate": 1e-4, "grad_norm": 0.75}
            logs.update(metrics)
            logs["epoch"] = state.epoch
            truth["logged"][str(step)] = metrics
            callback.on_log(training, state, control, logs=logs)
    callback.on_train_end(training, state, control)
    with open(args.truth, "w") as out:
        json.dump(truth, out)


if __name__ == "__main__":
    sys.exit(main())
