"""A generator of TorchTitan training logs (TorchTitan needs GPUs or its accelerator; it cannot run
here): the statements of pytorch/torchtitan, printed through the logging formatter it installs,
at the times of a `tests/nxd_logs.py` clock, returning the run's truth.

- torchtitan/tools/logging.py `init_logger`: `[titan] %(asctime)s - %(name)s - %(levelname)s - %(message)s`
  on the root logger (name `root`).
- torchtitan/train.py: `Starting job: {job_config.job.description}` (Trainer.__init__), `Training
  starts at step {self.step + 1}` (Trainer.train, after the checkpoint load).
- torchtitan/components/metrics.py `MetricsProcessor.log`: `{color.red}step: {step:2}  {color.green}loss:
  {global_avg_loss:8.5f}  {color.orange}grad_norm: {grad_norm:7.4f}  {color.turquoise}memory:
  {max_reserved_gib:5.2f}GiB({max_reserved_pct:.2f}%)  {color.blue}tps: {round(tps):,}  {color.cyan}tflops:
  {tflops:,.2f}  {color.magenta}mfu: {mfu:.2f}%{color.reset}` (NoColor: empty strings, as
  --metrics.disable_color_printing gives).
- torchtitan/components/checkpoint.py: `Saving the checkpoint.` ... `Finished saving the checkpoint in
  {time:.2f} seconds.`
"""

import logging
from dataclasses import dataclass, field

TOKENS_PER_STEP = 8 * 8192  # local batch x sequence length


@dataclass
class Truth:
    started_s: float = 0.0
    first_step_began_s: float = 0.0
    step_end_s: dict[int, float] = field(default_factory=dict)
    step_time_s: dict[int, float] = field(default_factory=dict)


def _logger(stream, clock) -> logging.Logger:
    logger = logging.getLogger(f"trnwatch-test-titan-{id(stream)}")
    logger.propagate = False
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("[titan] %(asctime)s - %(name)s - %(levelname)s - %(message)s"))

    def stamp(record: logging.LogRecord) -> bool:
        record.created = clock.now()
        record.msecs = int((record.created % 1) * 1000)
        record.name = "root"  # TorchTitan logs through the root logger
        return True

    handler.addFilter(stamp)
    logger.handlers = [handler]
    logger.setLevel(logging.INFO)
    return logger


def run(stream, clock, steps: int, step_s: float, init_s: float, first_step_s: float) -> Truth:
    """`init_s` from the job's start to the train loop, a first step of `first_step_s` (it
    compiles), then steps of `step_s`, logged every step."""
    logger = _logger(stream, clock)
    truth = Truth(started_s=clock.now())
    logger.info("Starting job: Llama 3 8B training")
    clock.sleep(init_s)
    logger.info(f"Training starts at step {0 + 1}")
    truth.first_step_began_s = clock.now()
    for step in range(1, steps + 1):
        began = clock.now()
        clock.sleep(first_step_s if step == 1 else step_s)
        tps = TOKENS_PER_STEP / (clock.now() - began)
        global_avg_loss, grad_norm = 10.0 / (1 + 0.1 * step), 1.0 + 1 / step
        tflops, mfu = tps * 4.8e9 / 1e12, 100 * tps * 4.8e9 / 9.89e14
        logger.info(
            f"step: {step:2}  "
            f"loss: {global_avg_loss:8.5f}  "
            f"grad_norm: {grad_norm:7.4f}  "
            f"memory: {61.53:5.2f}GiB"
            f"({64.79:.2f}%)  "
            f"tps: {round(tps):,}  "
            f"tflops: {tflops:,.2f}  "
            f"mfu: {mfu:.2f}%"
        )
        truth.step_end_s[step], truth.step_time_s[step] = clock.now(), clock.now() - began
    return truth
