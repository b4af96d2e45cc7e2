"""A generator of TorchTitan training logs (TorchTitan needs GPUs or its accelerator; it cannot run
here): the statements of pytorch/torchtitan (the layouts as of b5bcd76c66d0acb1a08b176d9639425bc55e0b2a),
printed through the logging formatter it installs, at the times of a `tests/nxd_logs.py` clock,
returning the run's truth.

- torchtitan/tools/logging.py `init_logger`: `[titan] %(asctime)s - %(name)s - %(levelname)s - %(message)s`
  on the root logger (name `root`).
- torchtitan/train.py: `Starting job: {job_config.job.description}` (Trainer.__init__), `Training
  starts at step {self.step + 1}` (Trainer.train, after the checkpoint load).
- torchtitan/components/metrics.py `MetricsProcessor.log`: `{color.red}step: {step:2}  {color.green}loss:
  {global_avg_loss:8.5f}  {color.orange}grad_norm: {grad_norm:7.4f}  {color.turquoise}memory:
  {max_reserved_gib:5.2f}GiB({max_reserved_pct:.2f}%)  {color.blue}tps: {round(tps):,}  {color.cyan}tflops:
  {tflops:,.2f}  {color.magenta}mfu: {mfu:.2f}%{color.reset}` (NoColor: empty strings, as
  --metrics.disable_color_printing gives); torchtitan/tools/utils.py `Color` (`\\033[31m` ...,
  orange `\\033[38;2;180;60;0m`, turquoise `\\033[38;2;54;234;195m`, reset `\\033[39m`).
- torchtitan/components/checkpoint.py: `Saving the checkpoint.` ... `Finished saving the checkpoint in
  {time:.2f} seconds.`; `Loading the checkpoint from {checkpoint_id}.` ... `Finished loading the
  checkpoint in {time:.2f} seconds.`
- run_train.sh: torchrun --local-ranks-filter 0 --role rank --tee 3 (each line after `[rank0]:`,
  `tests/nxd_logs.py` `TorchrunTee`).
"""

import logging
import time
from dataclasses import dataclass, field

from tests.nxd_logs import TorchrunTee, VirtualClock

TOKENS_PER_STEP = 8 * 8192  # local batch x sequence length


@dataclass
class Truth:
    started_s: float = 0.0
    first_step_began_s: float = 0.0
    step_end_s: dict[int, float] = field(default_factory=dict)
    step_time_s: dict[int, float] = field(default_factory=dict)
    tps: dict[int, int] = field(default_factory=dict)
    loss: dict[int, float] = field(default_factory=dict)
    saves: list[tuple[int, float, float]] = field(default_factory=list)  # (after step, began, finished)
    load: tuple[str, float, float] | None = None  # (checkpoint id, began, finished)


@dataclass(frozen=True)
class Color:
    red = "\033[31m"
    green = "\033[32m"
    blue = "\033[34m"
    magenta = "\033[35m"
    cyan = "\033[36m"
    reset = "\033[39m"
    orange = "\033[38;2;180;60;0m"
    turquoise = "\033[38;2;54;234;195m"


@dataclass(frozen=True)
class NoColor:
    red = green = blue = magenta = cyan = reset = orange = turquoise = ""


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


def run(
    stream,
    clock,
    steps: int,
    step_s: float,
    init_s: float,
    first_step_s: float,
    *,
    resume_from: int = 0,
    load_s: float = 0.0,
    own_step_s: dict[int, float] | None = None,
    save_after: tuple[int, ...] = (),
    save_s: float = 0.0,
    color: bool = False,
    rank_header: str = "",
) -> Truth:
    """`init_s` from the job's start to the train loop (with `resume_from`, the load of that step's
    checkpoint taking `load_s` at its end), a first step of `first_step_s` (it compiles), then
    steps of `step_s` (or `own_step_s[step]`), logged every step, a synced save of `save_s` after
    each step of `save_after`; coloured as TorchTitan prints to a terminal with `color`, through
    torchrun --tee's `rank_header` when given."""
    logger = _logger(TorchrunTee(stream, rank_header) if rank_header else stream, clock)
    paint = Color if color else NoColor
    truth = Truth(started_s=clock.now())
    logger.info("Starting job: Llama 3 8B training")
    clock.sleep(init_s)
    if resume_from:
        checkpoint_id, began = f"./outputs/checkpoint/step-{resume_from}", clock.now()
        logger.info(f"Loading the checkpoint from {checkpoint_id}.")
        clock.sleep(load_s)
        logger.info(f"Finished loading the checkpoint in {clock.now() - began:.2f} seconds.")
        truth.load = (checkpoint_id, began, clock.now())
    logger.info(f"Training starts at step {resume_from + 1}")
    truth.first_step_began_s = clock.now()
    for step in range(resume_from + 1, resume_from + steps + 1):
        began = clock.now()
        clock.sleep(first_step_s if step == resume_from + 1 else (own_step_s or {}).get(step, step_s))
        tps = TOKENS_PER_STEP / (clock.now() - began)
        global_avg_loss, grad_norm = 10.0 / (1 + 0.1 * step), 1.0 + 1 / step
        tflops, mfu = tps * 4.8e9 / 1e12, 100 * tps * 4.8e9 / 9.89e14
        logger.info(
            f"{paint.red}step: {step:2}  "
            f"{paint.green}loss: {global_avg_loss:8.5f}  "
            f"{paint.orange}grad_norm: {grad_norm:7.4f}  "
            f"{paint.turquoise}memory: {61.53:5.2f}GiB"
            f"({64.79:.2f}%)  "
            f"{paint.blue}tps: {round(tps):,}  "
            f"{paint.cyan}tflops: {tflops:,.2f}  "
            f"{paint.magenta}mfu: {mfu:.2f}%{paint.reset}"
        )
        truth.step_end_s[step], truth.step_time_s[step] = clock.now(), clock.now() - began
        truth.tps[step], truth.loss[step] = round(tps), round(global_avg_loss, 5)
        if step in save_after:
            began = clock.now()
            logger.info("Saving the checkpoint.")
            clock.sleep(save_s)
            logger.info(f"Finished saving the checkpoint in {clock.now() - began:.2f} seconds.")
            truth.saves.append((step, began, clock.now()))
    return truth


def resumed_fixture(path, color: bool = False, rank_header: str = "") -> Truth:
    """tests' TorchTitan log: a resume from step 10 (a 4.25 s load), steps 11-15 (the first 10.25 s,
    then about 2 s), a 12.5 s save after step 13, at simulated times from 2025-03-01 09:00:00 local."""
    start = time.mktime((2025, 3, 1, 9, 0, 0, 0, 0, -1))
    with open(path, "w", encoding="utf-8") as out:
        return run(
            out,
            VirtualClock(start),
            steps=5,
            step_s=2.0,
            init_s=5.5,
            first_step_s=10.25,
            resume_from=10,
            load_s=4.25,
            own_step_s={12: 2.1, 13: 1.9},
            save_after=(13,),
            save_s=12.5,
            color=color,
            rank_header=rank_header,
        )
