"""The built-in log profiles: patterns written against each framework's code as it emits its lines.

Each profile names the public source it was read from (`source`); tests/fixtures/logs/ holds
lines in each format with the same references. Data only: the translator is log_profiles.py.
"""

from trnwatch.collectors.log_profiles import LogProfile

_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_LOSS = rf"(?:{_NUMBER}|[-+]?nan|[-+]?inf)"

# The library's layout: `[<time>: I <path>:<line>] <message>` (`[I <path>:<line>]` with NXD_LOG_HIDE_TIME).
_LIBRARY = r"(?:^|\] )"

NXD_LIBRARY = {
    "name": "nxd-library",
    "description": "neuronx-distributed's own logger: checkpoint saves (synced and async) and loads, in every log",
    "source": "aws-neuron/neuronx-distributed@fbac349 src/neuronx_distributed/utils/logger.py (get_logger's "
    "formatter), src/neuronx_distributed/trainer/checkpoint.py (CheckpointIOState begin/end/wait_save, load_checkpoint)",
    # Whatever else the log is (NxD Core, NxD Training, a script of one's own, nothing detected).
    "always": True,
    # A progress bar writes no newline: in one file the library's line follows its last redraw
    # (cut to the terminal's width, with no closing `]`, under a terminal).
    "split": r"(?<=.)(?=\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [DIWECF] \S+:\d+\] )",
    "timestamps": [
        {"pattern": r"^\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+): [DIWECF] ", "format": "%Y-%m-%d %H:%M:%S.%f"}
    ],
    "rules": [
        # An async save: `began` (the loop is inside save_checkpoint, staging tensors), `requested`
        # (the write goes on in a background process; steps continue), `completed` (logged only
        # inside the next save's wait, or at exit). So the save is non-blocking, and only the
        # began..requested part is a checkpoint phase that explains a pause in steps.
        {
            "pattern": rf"{_LIBRARY}async saving of checkpoint (?P<tag>\S+) began",
            "emit": [
                {"event": "checkpoint", "action": "save", "state": "begin", "blocking": False},
                {"event": "phase", "phase": "checkpoint", "state": "begin"},
            ],
        },
        {
            "pattern": rf"{_LIBRARY}async saving of checkpoint (?P<tag>\S+) requested",
            "emit": [{"event": "phase", "phase": "checkpoint", "state": "end"}],
        },
        {
            "pattern": rf"{_LIBRARY}async saving of checkpoint (?P<tag>\S+) completed",
            "emit": [{"event": "checkpoint", "action": "save", "state": "end", "blocking": False}],
        },
        {
            "pattern": rf"{_LIBRARY}synced saving of checkpoint (?P<tag>\S+) began",
            "emit": [{"event": "checkpoint", "action": "save", "state": "begin", "blocking": True}],
        },
        {
            "pattern": rf"{_LIBRARY}synced saving of checkpoint (?P<tag>\S+) completed",
            "emit": [{"event": "checkpoint", "action": "save", "state": "end", "blocking": True}],
        },
        {
            "pattern": rf"{_LIBRARY}loading checkpoint from (?P<tag>\S+)",
            "emit": [{"event": "checkpoint", "action": "load", "state": "begin"}],
        },
        {
            "pattern": rf"{_LIBRARY}loading checkpoint done",
            "emit": [{"event": "checkpoint", "action": "load", "state": "end"}],
        },
    ],
}

NEURON_COMPILE = {
    "name": "neuron-compile",
    "description": "torch-neuronx compile wrapper: cold compiles, persistent-cache hits, compiler errors",
    "source": "aws-neuron/aws-neuron-sdk torch-neuronx docs and issue logs (NEURON_CC_WRAPPER lines)",
    "timestamps": [
        {
            "pattern": r"^(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+): +\d+ +[A-Z]+ +\|\|",
            "format": "%Y-%m-%d %H:%M:%S.%f",
        }
    ],
    "rules": [
        {
            "pattern": r"Call compiler with cmd",
            "emit": [{"event": "phase", "phase": "compile", "state": "begin", "cache": "miss"}],
        },
        {
            "pattern": r"Compiler status PASS",
            "emit": [{"event": "phase", "phase": "compile", "state": "end", "cache": "miss"}],
        },
        {
            "pattern": r"Compiler status ERROR",
            "emit": [
                {"event": "phase", "phase": "compile", "state": "end", "cache": "miss"},
                {"event": "error", "source": "job"},
            ],
        },
        # A hit ends a compile lookup whose start the log does not show.
        {
            "pattern": r"Using a cached neff",
            "emit": [{"event": "phase", "phase": "compile", "state": "end", "cache": "hit"}],
        },
    ],
}

NXD = {
    "name": "nxd",
    "description": "NxD Core training examples and samples (tp_zero1, tp_pp, the MFU logger, the Lightning example)",
    "source": "aws-neuron/neuronx-distributed examples/training/llama/tp_zero1_llama_hf_pretrain/logger.py "
    "@fbac349 and @0f2a90f, tp_pp_llama_hf_pretrain/logger.py @fbac349 and @e834945, lightning/module_llama.py "
    "@fbac349, the Mamba-2 example's MFU Logger; aws-neuron/aws-neuron-samples "
    "torch-neuronx/training/zero1_gpt2/neuron_utils.py @2015d65 (tests/nxd_logs.py prints each)",
    # Not the library's lines: NxD Training prints them too.
    "detect": [
        r"\(\d+, \d+\) step_loss : ",
        r"^step \d+ step_time \S+s throughput ",
        r"^-+TRAINING CONFIG-+$",
        r"- step: \d+, step_loss : ",
        r"^step \d+ loss is \S+, lr is ",
    ],
    "include": ["neuron-compile"],
    "timestamps": [
        {
            "pattern": r"^LOG (?P<ts>[A-Z][a-z]{2} [A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d \d{4}) - ",
            "format": "%a %b %d %H:%M:%S %Y",
        }
    ],
    "rules": [
        # tp_zero1 (Logger.log): `LOG <time.asctime()> - (epoch, step) step_loss : L learning_rate : LR
        # throughput : T seq/s [grad-norm : G]`; releases up to 2.19 (and the aws-neuron-samples
        # loggers) print no ` seq/s`; zero1_gpt2 adds ` param-norm : P`. T is the sequences/s of the
        # job over a window of 10 steps (training_utils.py Throughput).
        {
            "pattern": rf"\(\d+, (?P<step>\d+)\) step_loss : (?P<loss>{_LOSS}) learning_rate : \S+ "
            rf"throughput : (?P<seq_per_s>{_NUMBER})(?: seq/s)?(?: |$)",
            "emit": [{"event": "step"}],
        },
        # The MFU logger: `LOG <asctime> - step: N, step_loss : L learning_rate : LR step time : S s
        # throughput : T seq/s  MFU : M ` (each part only when non-zero); S and T over a 10-step window.
        {
            "pattern": rf"- step: (?P<step>\d+), step_loss : (?P<loss>{_LOSS}) learning_rate : \S+ +"
            rf"(?:step time : (?P<step_time_s>{_NUMBER}) s +)?(?:throughput : (?P<seq_per_s>{_NUMBER}) seq/s)?",
            "emit": [{"event": "step"}],
        },
        # tp_pp: `step N step_time Ss throughput T seq/s step loss L grad norm G` (`... seq/s loss L
        # grad norm G` before mid 2025); S is this step's own time.
        {
            "pattern": rf"^step (?P<step>\d+) step_time (?P<step_time_s>{_NUMBER})s throughput (?P<seq_per_s>{_NUMBER}) "
            rf"seq/s (?:step )?loss (?P<loss>{_LOSS})",
            "emit": [{"event": "step"}],
        },
        # The Lightning example (on_train_batch_end): `step N loss is L, lr is LR, throughput T seq/s,
        # input_ids I, norm G, global rank R`; no timestamp.
        {
            "pattern": rf"^step (?P<step>\d+) loss is (?P<loss>{_LOSS}), lr is \S+, throughput (?P<seq_per_s>{_NUMBER}) seq/s,",
            "emit": [{"event": "step"}],
        },
    ],
}

# Lightning's bar, `{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_noinv_fmt}{postfix}]`:
# `Epoch 1:  25%|██▌       | 4/16 [00:00<00:01,  8.46it/s, train_loss=0.784]`.
_BAR = r"^Epoch (?P<epoch>\d+): +(?:\d+%)?\|[^|]*\| *(?P<step>\d+)/(?:\d+|\?) \[(?P<elapsed>\d+(?::\d\d)+)"
_BAR_RATE = rf"<[^,\]]*, *(?:(?P<it_per_s>{_NUMBER})it/s|\?it/s)"

NXDT = {
    "name": "nxdt",
    "description": "NxD Training: PyTorch Lightning 2.5.0's TQDM bar with NxDT's metrics on it, one `\\r` "
    "redraw per step, read as the lightning profile reads the bar",
    "source": "aws-neuron/neuronx-distributed-training@9169aa0 (2.26.0; requirements.txt pins pytorch-lightning "
    "2.5.0) src/neuronx_distributed_training/lightning_modules/model/base.py (log_metrics: reduced_train_loss, lr, "
    "parameter_norm, gradient_norm, global_step, consumed_samples, throughput, throughput_peak on the bar), "
    "utils/exp_manager.py:246 through NVIDIA/NeMo nemo/utils/formatters/base.py (BaseNeMoFormatter); the bar as "
    "in the lightning profile; run for real with those calls in tests/test_lightning_logs.py",
    "detect": [r"reduced_train_loss=", r"\[NeMo [DIWE] ", r"neuronx_distributed_training"],
    "include": ["lightning", "neuron-compile"],
    "rules": [
        # `Epoch 0:  62%|██████▎   | 5/8 [00:01<00:01,  2.77it/s, v_num=0, reduced_train_loss=0.272,
        # lr=0.00015, parameter_norm=0.317, gradient_norm=0.317, global_step=4.000,
        # consumed_samples=20.00, throughput=35.20, throughput_peak=36.00]`. The step and its time
        # come from the bar's counter and elapsed field (the lightning profile's rules, below);
        # this rule adds NxDT's loss and its throughput (sequences/s over NxDT's window: tokens with
        # --seq-len, never the step time).
        {
            "pattern": rf"{_BAR}{_BAR_RATE}, *(?P<metrics>[^\]]*?\breduced_train_loss=(?P<loss>{_LOSS})"
            rf"(?:[^\]]*?\bthroughput=(?P<seq_per_s>{_NUMBER}))?[^\]]*)\]",
            "emit": [{"event": "step"}],
        },
    ],
}

LIGHTNING = {
    "name": "lightning",
    "description": "PyTorch Lightning 2.x: the default TQDM training bar (one \\r redraw per step), its "
    "checkpoint and end messages",
    "source": "Lightning-AI/pytorch-lightning 2.5.0 src/lightning/pytorch/callbacks/progress/tqdm_progress.py "
    "(BAR_FORMAT, smoothing=0, dynamic_ncols, a bar per epoch: reset in on_train_epoch_start, _update_n then "
    "set_postfix in on_train_batch_end), loops/fit_loop.py (`Trainer.fit` stopped: ...), callbacks/"
    "model_checkpoint.py (verbose: Epoch E, global step N: ... saving model to ...); run for real in "
    "tests/test_lightning_logs.py",
    # The bar only: Lightning's messages (saves, `Trainer.fit` stopped) come with a Rich bar too,
    # before its one frame in a file (a capture with rich 13.9.4, tests/fixtures/logs).
    "detect": [r"^Epoch \d+: +(?:\d+%)?\|"],
    # The bar writes no newline and the messages go to stderr: in one file a message follows the
    # bar's last redraw on the same line.
    "split": r"(?<=.)(?=Epoch \d+, global step \d+: |`Trainer\.fit` stopped: )",
    "rules": [
        # A whole redraw: the postfix tells the counter redraw (last step's metrics) from the
        # step's own (see LogTranslator._step_events); a loss named `loss` or `train_loss` is read
        # (and NxD Training's `reduced_train_loss`, when the bar comes before any line of NxDT's).
        {
            "pattern": rf"{_BAR}{_BAR_RATE}(?:, *(?P<metrics>(?:[^\]]*?\b(?:reduced_train_loss|(?:train_)?loss(?:_step)?)="
            rf"(?P<loss>{_LOSS}))?[^\]]*))?\]",
            "emit": [{"event": "step"}],
        },
        # A redraw cut by a narrow terminal (tqdm trims the line to the width): counter and elapsed
        # time still read, the rate when whole.
        {"pattern": rf"{_BAR}(?:{_BAR_RATE})?", "emit": [{"event": "step"}]},
        # ModelCheckpoint(verbose=True) says it saves before it does, and nothing after: a save of
        # unknown length.
        {
            "pattern": r"^Epoch \d+, global step (?P<step>\d+): .* saving model to '(?P<tag>[^']*)'",
            "emit": [
                {"event": "checkpoint", "action": "save", "state": "begin"},
                {"event": "checkpoint", "action": "save", "state": "end"},
            ],
        },
        {"pattern": r"^`Trainer\.fit` stopped: ", "emit": [{"event": "run_end", "status": "success"}]},
    ],
}

LIGHTNING_RICH = {
    "name": "lightning-rich",
    "description": "PyTorch Lightning with RichProgressBar: nothing per step in a file",
    "source": "Lightning-AI/pytorch-lightning 2.5.0 src/lightning/pytorch/callbacks/progress/rich_progress.py "
    "(a Rich live display: to a file, only its last frame when the run ends; with rich >= 14 it fails in "
    "_init_progress, console.clear_live); run for real in tests/test_lightning_logs.py",
    "detect": [
        r"^Epoch \d+/-?\d+ [━╸╺ ]*\S* +\d+/\d+ \d+:\d\d:\d\d • ",
        r"pytorch_lightning/callbacks/progress/rich_progress\.py",
    ],
    # Lightning's messages are read as the lightning profile reads them (saves, the end).
    "include": ["lightning"],
    "no_steps": "Lightning's RichProgressBar writes no line per step to a file: use the TQDM bar "
    "(Trainer(callbacks=[TQDMProgressBar()])) or the in-job emitter (trnwatch.workloads.emitter)",
}

TORCHTITAN = {
    "name": "torchtitan",
    "description": "TorchTitan (native PyTorch): per-step metrics line and checkpoint saves, through torchrun",
    "source": "pytorch/torchtitan torchtitan/components/metrics.py (MetricsProcessor.log), "
    "torchtitan/components/checkpoint.py and components/checkpointer/dcp.py (save/load lines), torchtitan/train.py "
    "(Starting job, Training starts at step N), "
    "torchtitan/tools/logging.py (layout), torchtitan/tools/utils.py (Color), run_train.sh (--role rank --tee 3)",
    "detect": [r"^\[titan\] ", r"\bstep: *\d+ +loss: *\S+ +(?:grad_norm: *\S+ +)?memory: "],
    "timestamps": [
        {"pattern": r"^\[titan\] (?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+) - ", "format": "%Y-%m-%d %H:%M:%S,%f"}
    ],
    # The first step line ends the compile opened at "Training starts at step N" (the step that
    # traces and compiles the model: its time is the compile), and start-up if that line is missing.
    "first_step_ends": ["init", "compile"],
    "rules": [
        # torchtitan/train.py: `Starting job: <description>` (Trainer.__init__), then after the
        # checkpoint load `Training starts at step N` (Trainer.train).
        {"pattern": r"(?:^|- )Starting job: ", "emit": [{"event": "phase", "phase": "init", "state": "begin"}]},
        {
            "pattern": r"(?:^|- )Training starts at step \d+",
            "emit": [
                {"event": "phase", "phase": "init", "state": "end"},
                {"event": "phase", "phase": "compile", "state": "begin"},
            ],
        },
        # tps is tokens per second per device, as TorchTitan computes it (local tokens over time
        # x non-data-parallel size); it is kept as such, never taken for the job's rate.
        {
            "pattern": rf"\bstep: *(?P<step>\d+) +loss: *(?P<loss>{_LOSS}) +(?:grad_norm: *\S+ +)?memory: *\S+ +"
            r"tps: *(?P<tokens_per_s_per_device>[\d,]+) +tflops: *\S+ +mfu: *\S+",
            "emit": [{"event": "step"}],
        },
        # The span between these lines is synchronous in the training loop (for async modes it is
        # the staging part; the upload after it is not logged), so it blocks steps.
        {
            "pattern": r"(?:^|- )(?:Saving|Staging) the checkpoint\b",
            "emit": [{"event": "checkpoint", "action": "save", "state": "begin", "blocking": True}],
        },
        {
            "pattern": r"(?:^|- )(?:Finished (?:saving|staging) the checkpoint\b|Last step checkpoint completed in )",
            "emit": [{"event": "checkpoint", "action": "save", "state": "end", "blocking": True}],
        },
        {
            "pattern": r"(?:^|- )Loading the checkpoint from (?P<tag>\S+?)\.?$",
            "emit": [{"event": "checkpoint", "action": "load", "state": "begin"}],
        },
        {
            "pattern": r"(?:^|- )Finished loading the checkpoint in ",
            "emit": [{"event": "checkpoint", "action": "load", "state": "end"}],
        },
    ],
}

# The Hugging Face Trainer's console (transformers ProgressCallback): a tqdm bar with no description,
# `{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}{postfix}]` redrawn with `\r`:
# ` 50%|█████     | 15/30 [00:08<00:20,  1.40s/it]`. Its rate is tqdm's smoothed one (smoothing 0.3):
# never read; the step time comes from the elapsed field.
_HF_BAR = r"^ *\d+%\|[^|]*\| *(?P<step>\d+)/\d+ \[(?P<elapsed>\d+(?::\d\d)+)[<\]]"


# One value of the dict ProgressCallback.on_log prints: transformers 5 writes a float as '%.4g' in
# quotes ('loss': '6.227'), 4.x the bare float ('loss': 6.2271); ints bare in both.
def _hf_value(key: str, group: str) -> str:
    return rf"(?:(?=.*?'{key}': '?(?P<{group}>{_LOSS})'?[,}}]))?"


HF = {
    "name": "hf",
    "description": "Hugging Face transformers Trainer and optimum-neuron's NeuronTrainer: the tqdm training "
    "bar (one \\r redraw per step), the dict printed every logging_steps (quoted values in transformers 5, "
    "bare in 4.x; NeuronTrainer's train/tokens_per_sec and train/step_time), the train_runtime summary, "
    "the checkpoint's `Writing model shards` bar",
    "source": "huggingface/transformers 5.25.0 src/transformers/trainer_callback.py (ProgressCallback: "
    "tqdm(total=state.max_steps, dynamic_ncols=True), update in on_step_end, training_bar.write(str(logs)) "
    "in on_log with floats as f'{v:.4g}'; the prediction bar nested under it), trainer.py (the train_runtime "
    "metrics logged at the end of train); huggingface/optimum-neuron@213224e optimum/neuron/trainers/"
    "metrics/throughput.py (train/tokens_per_sec, train/step_time), mfu.py (train/mfu), "
    "transformers.py (report_and_save_summary_metrics); run for real in tests/test_hf_logs.py, "
    "NeuronTrainer's keys printed by tests/neuron_trainer_lines.py",
    # The bar alone detects (the first dict comes only after logging_steps, 500 by default).
    "detect": [_HF_BAR, r"^\{'(?:loss|train_runtime)': "],
    # A dict belongs to the step of the bar's last redraw (tqdm.write clears the bar, prints, redraws).
    "records_after_bar": True,
    "bar_rate_smoothed": True,
    "rules": [
        {"pattern": _HF_BAR, "emit": [{"event": "step"}]},
        # The end of train(): `{'train_runtime': '10.54', 'train_samples_per_second': ..., ...}`.
        {"pattern": r"^\{'train_runtime': ", "emit": [{"event": "run_end", "status": "success"}]},
        # NeuronTrainer logs its summary (logger.info) after the loop: the run's training is done.
        {"pattern": r"(?:^|\] )TRAINING SUMMARY METRICS$", "emit": [{"event": "run_end", "status": "success"}]},
        # `{'loss': '4.704', 'grad_norm': '1.046', 'learning_rate': '0.00045', 'epoch': '0.1'}`, and
        # NeuronTrainer's `'train/tokens_per_sec'` (the job's tokens/s: local x data-parallel size)
        # and `'train/step_time'` (the mean step over the logging window).
        {
            "pattern": r"^\{(?=.*?'loss': )"
            + _hf_value("loss", "loss")
            + _hf_value("train/step_time", "step_time_s")
            + _hf_value("train/tokens_per_sec", "tokens_per_s"),
            "amend": True,
        },
        # Evaluation's dict and the checkpoint's bar (transformers 5 save_pretrained: a nested bar).
        {"pattern": r"^\{'eval_"},
        {
            "pattern": r"^Writing model shards: +0%\|",
            "emit": [{"event": "checkpoint", "action": "save", "state": "begin", "blocking": True}],
        },
        {
            "pattern": r"^Writing model shards: +100%\|",
            "emit": [{"event": "checkpoint", "action": "save", "state": "end", "blocking": True}],
        },
        {"pattern": r"^Writing model shards: "},
    ],
}

NEURON_RUNTIME = {
    "name": "neuron-runtime",
    "description": "Neuron runtime lines in any rank's log: execution timeouts and hardware errors (fatal), "
    "collectives warnings such as retried timeouts (warnings)",
    "source": "aws-neuron/aws-neuron-sdk neuron-runtime/nrt-troubleshoot.rst (NEURON_HW_ERR), "
    "neuron-runtime/explore/device-memory.rst (device OOM); aws-neuron/aws-neuron-sdk issue #1014 (device OOM), "
    "issues #713 and #851 (CCOM WARN lines); NVIDIA/nccl src/debug.cc (the WARN line layout CCOM follows)",
    "always": True,
    "timestamps": [
        {
            "pattern": r"^(?P<ts>\d{4}-[A-Z][a-z]{2}-\d\d \d\d:\d\d:\d\d\.\d+) +\d+:\d+ ",
            "format": "%Y-%b-%d %H:%M:%S.%f",
        }
    ],
    "rules": [
        # A device out of memory, one failure on its chip and core with the size and category:
        # `<time> <pid>:<tid> ERROR  TDRV:log_dev_mem <pad to 45>Failed to allocate 4.000GB
        # (alignment: none, usage: tensors) on ND 0:NC 4` (Neuron 2.23+, neuron-runtime/explore/
        # device-memory.rst; `ND14:NC 6` in the 2.23 release notes), `Failed to allocate 172.000MB
        # (usage: tensors) on ND 0:NC 0, current utilization:` before (issue #1014, with `* total: ...`
        # lines after it). The 2.23 report's other ERROR lines (the HBM's cores, the usage table's
        # header) are the same failure: read, no event.
        {
            "pattern": r"\bERROR +TDRV:log_dev_mem +(?P<message>Failed to allocate \S+ \([^)]*\) on ND ?(?P<chip>\d+):NC ?(?P<core>\d+))",
            "emit": [{"event": "error", "source": "runtime"}],
        },
        {"pattern": r"\bERROR +TDRV:(?:log_dev_mem_usage_table|print_lnc_hbm_details) "},
        # The kernel's hardware-error line (`NEURON_HW_ERR=SRAM_UNCORRECTABLE_ERROR instance-id=...
        # nd-id=0 nc-id=0 ... action=TERMINATE_INSTANCE`) is not a rule here: the translator reads
        # it in every log with the kernel-log source's own parser (collectors/kernel_log.py), one
        # reader of that line.
        # `2023-Jan-09 20:27:41.0593 15042:15042 ERROR  TDRV:exec_consume_infer_status_notifications
        #  (FATAL-RT-UNDEFINED-STATE) inference timeout (600000 ms) on Neuron Device 0 NC 0, ...`
        {
            "pattern": r"\bERROR +(?P<message>(?:NRT|TDRV|NMGR|ENC|HAL|NCCL):\w+ +\S.*)",
            "emit": [{"event": "error", "source": "runtime"}],
        },
        # The collectives library (CCOM) logs in a layout close to NCCL's WARN lines,
        # `<time> <pid>:<tid> [<dev>] <file>:<line> CCOM WARN <message>`, and at WARN it logs
        # conditions it goes on after: a bootstrap or
        # exchange timeout it retries (`- retrying`, then the same line with `waited 240 sec`),
        # a network plugin it falls back from. A warning: counted and kept as evidence (a rank
        # waiting for a peer points at a hang elsewhere), never a failure.
        {
            "pattern": r"\[-?\d+\] \S+:\d+ CCOM WARN (?P<message>\S.*)",
            "emit": [{"event": "error", "source": "runtime", "severity": "warning"}],
        },
        {
            "pattern": r"(?P<message>Uncorrectable memory error is detected on Neuron device.*)",
            "emit": [{"event": "error", "source": "runtime"}],
        },
        {
            "pattern": r"(?P<message>Error notifications found on NC.*)",
            "emit": [{"event": "error", "source": "runtime"}],
        },
    ],
}

BUILTIN_PROFILES = [
    LogProfile.model_validate(profile)
    for profile in (
        NXD,
        NXDT,
        TORCHTITAN,
        HF,
        LIGHTNING,
        LIGHTNING_RICH,
        NXD_LIBRARY,
        NEURON_COMPILE,
        NEURON_RUNTIME,
    )
]
