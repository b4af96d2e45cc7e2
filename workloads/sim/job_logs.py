"""The simulated job written as a framework's own log, so the demo runs every passive path.

The events are the simulated job's (workloads/sim/job.py, rank 0: the rank these frameworks log
from); each writer renders them as its framework prints them (the same formats the log profiles
read, see collectors/log_profiles_builtin.py for the source files):

| format     | what rank 0's log shows                                                         |
|------------|---------------------------------------------------------------------------------|
| nxd        | NxD Core tp_zero1: `LOG <asctime> - (0, step) step_loss : ... throughput : T seq/s`, |
|            | torch-neuronx compile lines, the NxD library's synced checkpoint lines            |
| nxdt       | NxD Training: a Lightning progress bar redrawn with `\\r` (counter, then metrics) |
|            | per step, compile lines, the NxD library's synced checkpoint lines               |
| torchtitan | TorchTitan through torchrun (`[rank0]:`), colours on: step lines with per-device |
|            | tps, `Saving the checkpoint.` / `Finished saving the checkpoint in X seconds.`   |

Saves are written as synchronous (blocking) because the simulated job does not step while it
saves. Heartbeats and collectives have no log form and are not written.
"""

import time
from pathlib import Path

from trnwatch.workloads.sim.fleet import SimHost
from trnwatch.workloads.sim.job import GLOBAL_BATCH, rank_events

LOG_FORMATS = ("nxd", "nxdt", "torchtitan")
_COLOURS = {
    "red": "\033[31m",
    "green": "\033[32m",
    "orange": "\033[38;2;180;60;0m",
    "turquoise": "\033[38;2;54;234;195m",
    "blue": "\033[34m",
    "cyan": "\033[36m",
    "magenta": "\033[35m",
    "reset": "\033[39m",
}
_CC = "||NEURON_CC_WRAPPER||"


def _local(ts: float, fmt: str) -> str:
    return time.strftime(fmt, time.localtime(ts))


def _ms(ts: float) -> str:
    return f"{int(ts * 1000) % 1000:03d}"


class _LogRenderer:
    """What the formats share; each subclass renders run_start, step and save as its framework does."""

    def __init__(self):
        self.world_size = 1
        self.save_began_ts: float | None = None
        self.compile_pid = 4242

    def render(self, event: dict) -> str:
        kind = event["event"]
        if kind == "run_start":
            self.world_size = event["world_size"]
            return self.run_start(event)
        if kind == "phase" and event["phase"] == "compile":
            return self.compile(event)
        if kind == "step":
            return self.step(event)
        if kind == "checkpoint" and event["action"] == "save":
            if event["state"] == "begin":
                self.save_began_ts = event["ts"]
            return self.save(event)
        return ""

    def run_start(self, event: dict) -> str:
        raise NotImplementedError

    def step(self, event: dict) -> str:
        raise NotImplementedError

    def save(self, event: dict) -> str:
        raise NotImplementedError

    def compile(self, event: dict) -> str:
        micros = int(event["ts"] * 1e6) % 1_000_000
        stamp = f"{_local(event['ts'], '%Y-%m-%d %H:%M:%S')}.{micros:06d}: {self.compile_pid} INFO {_CC}: "
        if event["state"] == "begin":
            return (
                f"{stamp}Call compiler with cmd: neuronx-cc compile --target=trn3 --framework=XLA "
                f"/tmp/sim/neuroncc_compile_workdir/0/model.MODULE_1+1.hlo_module.pb --output model.neff\n"
            )
        return f"{stamp}Compiler status PASS\n"

    def nxd_save(self, event: dict) -> str:
        state = "began" if event["state"] == "begin" else "completed"
        line = 144 if event["state"] == "begin" else 192
        return (
            f"[{_local(event['ts'], '%Y-%m-%d %H:%M:%S')}.{_ms(event['ts'])}: I neuronx_distributed/trainer/"
            f"checkpoint.py:{line}] synced saving of checkpoint step_{event['step']} {state}\n"
        )


class _Nxd(_LogRenderer):
    def run_start(self, event: dict) -> str:
        return (
            f"--------TRAINING CONFIG----------\nNamespace(model='{event['model']['name']}', batch_size="
            f"{event['micro_batch']}, seq_len={event['seq_len']}, tensor_parallel_size={event['parallel']['tp']})\n"
        )

    def step(self, event: dict) -> str:
        throughput = GLOBAL_BATCH / event["step_time_s"]  # sequences/s, as the example computes it
        return (
            f"LOG {time.asctime(time.localtime(event['ts']))} - (0, {event['step']}) step_loss : {event['loss']:.4f} "
            f"learning_rate : 1.50e-04 throughput : {throughput:.2f} seq/s grad-norm : 0.9\n"
        )

    save = _LogRenderer.nxd_save


class _Nxdt(_LogRenderer):
    """A Lightning bar: each step redraws the counter (old metrics) then the metrics; no newline."""

    def __init__(self):
        super().__init__()
        self.postfix = ""
        self.bar_open = False
        self.first_step_ts: float | None = None

    def run_start(self, event: dict) -> str:
        return (
            f"[NeMo I {_local(event['ts'], '%Y-%m-%d %H:%M:%S')} exp_manager:400] Experiments will be logged at sim\n"
        )

    def step(self, event: dict) -> str:
        n = event["step"] + 1  # the bar counts batches done; global_step is the 0-based step
        if self.first_step_ts is None:
            self.first_step_ts = event["ts"] - event["step_time_s"]
        elapsed_s = max(event["ts"] - self.first_step_ts, 1e-9)
        rate = n / elapsed_s  # tqdm's average since the bar started (Lightning's smoothing=0)
        elapsed = time.strftime("%M:%S", time.gmtime(elapsed_s))
        # Lightning's BAR_FORMAT with an unknown total, as tqdm 4.70 renders it: rate_noinv_fmt is
        # always it/s, the remaining time 00:00.
        head = f"Epoch 0: |          | {n}/? [{elapsed}<00:00, {rate:5.2f}it/s"
        throughput = GLOBAL_BATCH / event["step_time_s"]
        redraw_counter = head + (", " + self.postfix if self.postfix else "") + "]"
        self.postfix = (
            f"v_num=0, reduced_train_loss={event['loss']:.3f}, lr=1.5e-5, global_step={event['step']}.000, "
            f"consumed_samples={n * GLOBAL_BATCH}.0, throughput={throughput:.1f}, throughput_peak={throughput:.1f}"
        )
        self.bar_open = True
        return f"\r{redraw_counter}\r{head}, {self.postfix}]"

    save = _LogRenderer.nxd_save

    def render(self, event: dict) -> str:
        text = super().render(event)
        if text and event["event"] != "step" and self.bar_open:
            self.bar_open = False
            return "\n" + text  # tqdm's write(): the next line starts below the bar
        return text


class _TorchTitan(_LogRenderer):
    def compile(self, event: dict) -> str:
        return ""  # native PyTorch: no torch-neuronx compile wrapper lines

    def _line(self, ts: float, message: str) -> str:
        return f"[rank0]:[titan] {_local(ts, '%Y-%m-%d %H:%M:%S')},{_ms(ts)} - root - INFO - {message}\n"

    def run_start(self, event: dict) -> str:
        return self._line(event["ts"], f"Starting job: {event['model']['name']} training")

    def step(self, event: dict) -> str:
        c = _COLOURS
        tps = event["tokens"] / event["step_time_s"] / self.world_size  # per device, as TorchTitan logs it
        return self._line(
            event["ts"],
            f"{c['red']}step: {event['step']:2}  {c['green']}loss: {event['loss']:8.5f}  "
            f"{c['orange']}grad_norm:  1.0000  {c['turquoise']}memory: 61.53GiB(42.73%)  "
            f"{c['blue']}tps: {round(tps):,}  {c['cyan']}tflops: 300.00  {c['magenta']}mfu: 40.00%{c['reset']}",
        )

    def save(self, event: dict) -> str:
        if event["state"] == "begin":
            return self._line(event["ts"], "Saving the checkpoint.")
        duration_s = event["ts"] - (self.save_began_ts or event["ts"])
        return self._line(event["ts"], f"Finished saving the checkpoint in {duration_s:.2f} seconds.")


_RENDERERS = {"nxd": _Nxd, "nxdt": _Nxdt, "torchtitan": _TorchTitan}


class SimLogWriter:
    """Appends rank 0's simulated events to `path` in a framework's log format, one tick at a time."""

    def __init__(self, hosts: list[SimHost], path: Path, log_format: str):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.host = hosts[0]
        self._renderer = _RENDERERS[log_format]()
        self._file = open(path, "a", encoding="utf-8")

    def write_tick(self, tick: int, ts: float) -> None:
        """Write and flush what rank 0's log shows during `tick`."""
        text = "".join(self._renderer.render(event) for event in rank_events(self.host, 0, 0, tick, ts))
        if text:
            self._file.write(text)
            self._file.flush()

    def close(self) -> None:
        self._file.close()
