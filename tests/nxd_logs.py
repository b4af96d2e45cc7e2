"""Generators of NxD Core training logs: each layout prints with the statement of the public file
it names (the f-string, the `print` separators, the number formats, the logging formatter), so
trnwatch's profiles are tested against what that code prints, never against typed lines. NxD
needs Trainium and cannot run here; the generator runs the loop instead, with its own clock: a
`RealClock` (the lines are written as the steps happen, for live tests) or a `VirtualClock`
(the same layouts at simulated times, for fast tests). Each run returns its own truth.

Sources (aws-neuron/neuronx-distributed unless said):
- tp_zero1 with the unit: examples/training/llama/tp_zero1_llama_hf_pretrain/logger.py `Logger.log`
  @fbac349 (Release 2.29; also @4f95471, 2.20.0): `throughput : {throughput:.2f} seq/s `.
- tp_zero1 without the unit: the same file @0f2a90f (2.19.0) and
  examples/training/llama2/tp_zero1_llama2_7b_hf_pretrain/logger.py @a80091d (2.16.0):
  `throughput : {throughput:.2f} `.
- param-norm: aws-neuron/aws-neuron-samples torch-neuronx/training/zero1_gpt2/neuron_utils.py
  `Logger.log` @2015d65: `print(f'LOG ... throughput : {throughput:.2f} ' f'{grad_norm_msg}',
  f'{param_norm_msg}')`, `param-norm : {param_norm}`.
- tp_pp new: examples/training/llama/tp_pp_llama_hf_pretrain/logger.py @fbac349 (and 2.26.0 @fecfe75):
  `step {total_steps} step_time {iteration_time}s throughput {tps} seq/s step loss {loss} grad norm {norm}`.
- tp_pp old: the same file @e834945 (2.23.0, May 2025) back to
  examples/training/llama2/tp_pp_llama2_hf_pretrain/logger.py @a80091d: `... seq/s loss {loss} grad norm ...`.
- MFU logger: the Mamba-2 example's `Logger.log(step, step_loss, learning_rate, step_time, throughput, MFU)`
  (it imports the example's `predefined_configs`; public code index id 2813984137):
  `print(f"LOG {time_now} - step: {step}, step_loss : {step_loss:.8f} " f"learning_rate : {learning_rate:.2e} "
  f"{step_time_msg} ", f"{throughput_msg} ", f"{MFU_msg} ")`, step time and throughput over a 10-step window.
- Lightning example: examples/training/llama/lightning/module_llama.py `on_train_batch_end` @fbac349:
  `step {self.global_step} loss is {loss}, lr is {self.lr}, throughput {self.tps} seq/s,  input_ids {...},
  norm {self.global_norm}, global rank {rank}`.
- Throughput: examples/training/llama/training_utils.py `Throughput.get_throughput` @fbac349 (a moving
  window of 10 steps).
- The library's lines: src/neuronx_distributed/utils/logger.py `get_logger` @fbac349 (the formatter
  `[%(asctime)s.%(msecs)03d: %(levelname).1s %(relativepath)s:%(lineno)d] %(message)s`, datefmt
  `%Y-%m-%d %H:%M:%S`), src/neuronx_distributed/trainer/checkpoint.py @fbac349 (lines 144, 192: synced
  saving began / completed; 888, 964: loading checkpoint from <path> / loading checkpoint done).
- torchrun --tee 3: torch/distributed/elastic/multiprocessing/tail_log.py writes each line as
  `f"{header}{line}"`, the header `[{role}{local_rank}]:` (role `default` unless --role).
- The banner: examples/training/llama/tp_zero1_llama_hf_pretrain/tp_zero1_llama_hf_pretrain.py @fbac349
  (`print("--------TRAINING CONFIG----------")`, `print(flags)`).
"""

import io
import logging
import math
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, field

SEQS_PER_STEP = 64  # batch x world x grad accumulation the generated run reports throughput for


class RealClock:
    def now(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class VirtualClock:
    def __init__(self, start: float):
        self.t = start

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


class _Throughput:
    """training_utils.py `Throughput` with the clock passed in: a window of 10 steps."""

    def __init__(self, clock, window: int = 10):
        self.clock = clock
        self.window = window
        self.times: queue.Queue = queue.Queue()
        self.window_time = 0.0
        self.start_time = clock.now()

    def get(self) -> tuple[float, float]:
        """(mean step time over the window, sequences/s over it)."""
        step_time = self.clock.now() - self.start_time
        self.start_time += step_time
        self.window_time += step_time
        self.times.put(step_time)
        size = self.times.qsize()
        if size > self.window:
            self.window_time -= self.times.get()
            size -= 1
        return self.window_time / size, size * SEQS_PER_STEP / self.window_time


def _asctime(clock) -> str:
    return time.asctime(time.localtime(clock.now()))


def tp_zero1_unit(clock, step: int, loss: float, lr: float, tput: float, grad_norm: float, **_) -> str:
    grad_norm_msg = f"grad-norm : {grad_norm}" if grad_norm else ""
    return (
        f"LOG {_asctime(clock)} - (0, {step}) step_loss : {loss:.4f} "
        f"learning_rate : {lr:.2e} "
        f"throughput : {tput:.2f} seq/s "
        f"{grad_norm_msg}"
    )


def tp_zero1_no_unit(clock, step: int, loss: float, lr: float, tput: float, grad_norm: float, **_) -> str:
    grad_norm_msg = f"grad-norm : {grad_norm}" if grad_norm else ""
    return (
        f"LOG {_asctime(clock)} - (0, {step}) step_loss : {loss:.4f} "
        f"learning_rate : {lr:.2e} throughput : {tput:.2f} "
        f"{grad_norm_msg}"
    )


def param_norm(clock, step: int, loss: float, lr: float, tput: float, grad_norm: float, **_) -> str:
    out = io.StringIO()
    grad_norm_msg = f"grad-norm : {grad_norm}" if grad_norm else ""
    param_norm_msg = f"param-norm : {grad_norm * 40}" if grad_norm else ""
    print(
        f"LOG {_asctime(clock)} - (0, {step}) step_loss : {loss:.4f} "
        f"learning_rate : {lr:.2e} throughput : {tput:.2f} "
        f"{grad_norm_msg}",
        f"{param_norm_msg}",
        file=out,
        end="",
    )
    return out.getvalue()


def tp_pp_new(clock, step: int, loss: float, tput: float, grad_norm: float, iteration_time: float, **_) -> str:
    return f"step {step} step_time {iteration_time}s throughput {tput} seq/s step loss {loss} grad norm {grad_norm}"


def tp_pp_old(clock, step: int, loss: float, tput: float, grad_norm: float, iteration_time: float, **_) -> str:
    return f"step {step} step_time {iteration_time}s throughput {tput} seq/s loss {loss} grad norm {grad_norm}"


def mfu(clock, step: int, loss: float, lr: float, tput: float, window_time: float, **_) -> str:
    out = io.StringIO()
    step_time_msg = f"step time : {window_time:.4f} s" if window_time else ""
    throughput_msg = f"throughput : {tput:.4f} seq/s" if tput else ""
    mfu_msg = f"MFU : {0.4 * tput / SEQS_PER_STEP:.4f}" if tput else ""
    print(
        f"LOG {_asctime(clock)} - step: {step}, step_loss : {loss:.8f} learning_rate : {lr:.2e} {step_time_msg} ",
        f"{throughput_msg} ",
        f"{mfu_msg} ",
        file=out,
        end="",
    )
    return out.getvalue()


def lightning_example(clock, step: int, loss: float, lr: float, tput: float, grad_norm: float, **_) -> str:
    # global_step is the number of optimizer steps done: step N's line says N.
    return (
        f"step {step} loss is {loss}, lr is {lr}, throughput {tput} seq/s,  input_ids {524288 + step}, "
        f"norm {grad_norm}, global rank 0"
    )


LAYOUTS: dict[str, Callable[..., str]] = {
    "tp_zero1": tp_zero1_unit,
    "tp_zero1_no_unit": tp_zero1_no_unit,
    "param_norm": param_norm,
    "tp_pp": tp_pp_new,
    "tp_pp_old": tp_pp_old,
    "mfu": mfu,
    "lightning_example": lightning_example,
}
TIMESTAMPED = {"tp_zero1", "tp_zero1_no_unit", "param_norm", "mfu"}  # time.asctime() on the line


# checkpoint.py's lines of those statements @fbac349: began (144), synced completed (192), async
# requested (188), async completed (240, inside the next save's wait_save), removing (260).
_LINES = {
    "began": 144,
    "completed": 192,
    "requested": 188,
    "async-completed": 240,
    "removing": 260,
    "loading-from": 888,  # load_checkpoint: loading checkpoint from <path>
    "loading-done": 964,  # loading checkpoint done
}


class TorchrunTee:
    """A stream as torchrun --tee shows a rank's lines: tail_log.py's `[{role}{local_rank}]:` header
    before each line."""

    def __init__(self, stream, header: str):
        self.stream, self.header, self.at_line_start = stream, header, True

    def write(self, text: str) -> int:
        for piece in text.splitlines(keepends=True):
            if self.at_line_start:
                self.stream.write(self.header)
            self.stream.write(piece)
            self.at_line_start = piece.endswith("\n")
        return len(text)

    def flush(self) -> None:
        self.stream.flush()


class _RelativePath(logging.Filter):
    """PackagePathFilter's relativepath, and the line of the library's statement."""

    def filter(self, record) -> bool:
        record.relativepath = "neuronx_distributed/trainer/checkpoint.py"
        message = record.getMessage()
        last = message.rsplit(" ", 1)[-1]
        if message.startswith("removing"):
            last = "removing"
        elif message.startswith("loading"):
            last = "loading-done" if last == "done" else "loading-from"
        elif message.startswith("async") and last == "completed":
            last = "async-completed"
        record.lineno = _LINES[last]
        return True


def library_logger(stream, clock) -> logging.Logger:
    """A logger with the library's formatter (`get_logger`), its records stamped by `clock`."""
    logger = logging.getLogger(f"trnwatch-test-nxd-{id(stream)}")
    logger.propagate = False
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        logging.Formatter(
            fmt="[%(asctime)s.%(msecs)03d: %(levelname).1s %(relativepath)s:%(lineno)d] %(message)s",
            datefmt="%Y-%m-%d %H:%M:%S",
        )
    )
    handler.addFilter(_RelativePath())
    logger.handlers = [handler]
    logger.setLevel(logging.INFO)

    def stamp(record: logging.LogRecord) -> bool:
        record.created = clock.now()
        record.msecs = math.floor((record.created % 1) * 1000)
        return True

    handler.addFilter(stamp)
    return logger


@dataclass
class Truth:
    """What the generated run did, by its own clock."""

    layout: str
    step_end_s: dict[int, float] = field(default_factory=dict)
    step_time_s: dict[int, float] = field(default_factory=dict)
    saves: list[tuple[int, float, float]] = field(default_factory=list)  # (step, began, completed)
    stall_step: int | None = None
    last_step: int | None = None
    load_s: tuple[float, float] | None = None  # (began, done) of the resumed checkpoint's load


_CC = "||NEURON_CC_WRAPPER||"  # torch-neuronx's compile wrapper lines, as the neuron-compile profile cites them


def _compile_line(clock, text: str) -> str:
    micros = int(clock.now() * 1e6) % 1_000_000
    return f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(clock.now()))}.{micros:06d}: 31337 INFO {_CC}: {text}"


def run(
    stream,
    layout: str,
    clock,
    steps: int,
    step_s: float,
    stall_step: int | None = None,
    stall_s: float = 0.0,
    save_every: int = 0,
    save_s: float = 0.0,
    banner: bool = False,
    log_every: int = 1,
    async_saves: bool = False,
    compile_s: float = 0.0,
    first_steps_s: tuple[float, ...] = (),
    resume_from: int = 0,
    load_s: float = 0.0,
) -> Truth:
    """Run a training loop of `steps` steps of `step_s` (one of `stall_s` more at `stall_step`),
    writing and flushing each line as the loop prints it: the step line every `log_every` steps, a
    save every `save_every` steps (synced: began, `save_s`, completed; async: began, `save_s`,
    requested, and completed inside the next save), a cold compile of `compile_s` first, the
    first steps taking `first_steps_s` (a warm-up) instead; with `resume_from` the run loads that
    step's checkpoint first (`load_s`) and steps on from the next step."""
    line = LAYOUTS[layout]
    truth = Truth(layout)
    logger = library_logger(stream, clock)
    if banner:
        print("--------TRAINING CONFIG----------", file=stream)
        print(f"Namespace(batch_size=1, max_steps={steps}, seq_len=4096, tensor_parallel_size=8)", file=stream)
        stream.flush()
    if compile_s:
        print(
            _compile_line(clock, "Call compiler with cmd: neuronx-cc compile --framework=XLA model.hlo_module.pb"),
            file=stream,
        )
        clock.sleep(compile_s)
        print(_compile_line(clock, "Compiler status PASS"), file=stream, flush=True)
    if resume_from:
        truth.load_s = (clock.now(), 0.0)
        logger.info("loading checkpoint from %s", f"/fsx/ckpt/step_{resume_from}")
        clock.sleep(load_s)
        logger.info("loading checkpoint done")
        truth.load_s = (truth.load_s[0], clock.now())
    throughput = _Throughput(clock)
    pending_async: str | None = None
    for step in range(resume_from + 1, resume_from + steps + 1):
        began = clock.now()
        nth = step - resume_from
        own_s = first_steps_s[nth - 1] if nth <= len(first_steps_s) else step_s
        clock.sleep(own_s + (stall_s if step == stall_step else 0.0))
        window_time, tput = throughput.get()
        end = clock.now()
        truth.step_end_s[step], truth.step_time_s[step] = end, end - began
        loss = 10.0 / (1 + 0.1 * step)
        if step % log_every:
            continue
        print(
            line(
                clock,
                step=step,
                loss=loss,
                lr=1.5e-4,
                tput=tput,
                grad_norm=0.25 + 1 / step,
                iteration_time=end - began,
                window_time=window_time,
            ),
            file=stream,
            flush=True,
        )
        if save_every and step % save_every == 0:
            tag = f"step_{step}"
            save_began = clock.now()
            if async_saves and pending_async is not None:
                logger.info("async saving of checkpoint %s completed", pending_async)
                logger.info("removing previous checkpoint in %s", [pending_async])
            logger.info("%s saving of checkpoint %s began", "async" if async_saves else "synced", tag)
            clock.sleep(save_s)
            if async_saves:
                logger.info("async saving of checkpoint %s requested", tag)
                pending_async = tag
            else:
                logger.info("synced saving of checkpoint %s completed", tag)
            truth.saves.append((step, save_began, clock.now()))
    truth.stall_step, truth.last_step = stall_step, resume_from + steps
    return truth


def tp_zero1_fixture(path) -> Truth:
    """tests' NxD Core log: the tp_zero1 example (banner, a 200 s cold compile, 50 steps of 3 s
    logged every 10, async saves at steps 20 and 40 taking 2.5 s to hand over) at simulated times
    from 2024-01-04 10:00:00 local time."""
    start = time.mktime((2024, 1, 4, 10, 0, 0, 0, 0, -1))
    with open(path, "w", encoding="utf-8") as stream:
        return run(
            stream,
            "tp_zero1",
            VirtualClock(start),
            steps=50,
            step_s=3.0,
            save_every=20,
            save_s=2.5,
            banner=True,
            log_every=10,
            async_saves=True,
            compile_s=200.0,
        )


def tp_pp_resumed_fixture(path, header: str = "[default0]:") -> Truth:
    """tests' tp_pp log through torchrun --tee: a resume from step 100's checkpoint (12.5 s), steps
    101-103 of about 3.2 s logged every step, a synced save of 30.5 s after step 102, at simulated
    times from 2024-01-04 11:00:00 local time. tp_pp's step lines carry no timestamp."""
    start = time.mktime((2024, 1, 4, 11, 0, 0, 0, 0, -1))
    with open(path, "w", encoding="utf-8") as out:
        return run(
            TorchrunTee(out, header),
            "tp_pp",
            VirtualClock(start),
            steps=3,
            step_s=3.2,
            first_steps_s=(3.2512345, 3.1),
            save_every=2,
            save_s=30.5,
            resume_from=100,
            load_s=12.5,
        )
