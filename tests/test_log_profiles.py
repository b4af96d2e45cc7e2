"""Log profiles on each framework's real output (captures in tests/fixtures/logs/, each naming
where it comes from) or, where the software cannot run here (NxD, TorchTitan), on the lines the
generators of its public statements print (tests/generated_logs.py): steps, loss, throughput, checkpoints,
errors, carriage-return progress bars, ANSI colours, torchrun prefixes, detection, user profiles."""

import io
import json
import re
from datetime import datetime
from pathlib import Path

import pytest

from trnwatch.collectors.job_events import Checkpoint, Error, Phase, Step
from trnwatch.collectors.log_profiles import (
    DETECT_LINES,
    LogProfileError,
    LogTranslator,
    load_profile_file,
    profile_registry,
)
from tests import generated_logs, nxd_logs

FIXTURES = Path(__file__).parent / "fixtures" / "logs"
RECEIVED_S = 1_900_000_000.0
PROFILES = profile_registry()


def local(text: str, fmt: str = "%Y-%m-%d %H:%M:%S.%f") -> float:
    return datetime.strptime(text, fmt).timestamp()


def translate(name: str | Path, profile: str | None = None, **options) -> tuple[LogTranslator, list]:
    translator = LogTranslator("run", PROFILES, profile, **options)
    events = []
    # As FileTail(split_cr=True) hands them over: \r, \n and \r\n all end a line.
    for line in re.split(r"\r\n|\r|\n", (FIXTURES / name).read_text(encoding="utf-8")):
        events += translator.feed(line, RECEIVED_S)
    return translator, events


def of(events, kind):
    return [event for event in events if isinstance(event, kind)]


def test_every_fixture_names_the_public_source_of_its_format():
    for path in FIXTURES.glob("*.log"):
        first = path.read_text(encoding="utf-8").splitlines()[0]
        assert first.startswith("# format: ") and "/" in first, path.name


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> dict:
    return generated_logs.write_all(tmp_path_factory.mktemp("generated"))


@pytest.fixture(scope="module")
def tp_zero1_log(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("nxd") / "nxd_tp_zero1.log"
    nxd_logs.tp_zero1_fixture(path)
    return path


@pytest.mark.parametrize(
    "name, profile",
    [
        ("nxd_tp_pp.log", "nxd"),
        ("nxdt_lightning_2.5.0_file.log", "nxdt"),
        ("torchtitan_torchrun_color.log", "torchtitan"),
        ("torchtitan_plain.log", "torchtitan"),
        ("neuron_runtime_errors.log", None),
        ("torchrun_sigkill.log", None),
    ],
)
def test_the_profile_is_detected_from_the_first_lines(name, profile, generated):
    translator, _ = translate(generated_logs.path_of(generated, name))
    assert translator.profile_name == profile


def test_nxd_tp_zero1_steps_with_loss_and_throughput_over_the_global_batch(tp_zero1_log):
    translator, events = translate(tp_zero1_log, global_batch=64, seq_len=4096)
    assert translator.profile_name == "nxd"
    steps = of(events, Step)
    assert [s.step for s in steps] == [10, 20, 30, 40, 50]
    assert [s.loss for s in steps] == [5.0, 3.3333, 2.5, 2.0, 1.6667]
    assert steps[0].step_time_s == pytest.approx(64 / 21.33)  # global batch / the logged sequences per second
    assert steps[0].tokens == 64 * 4096
    assert steps[0].ts == datetime(2024, 1, 4, 10, 3, 50).timestamp()  # time.asctime() on the LOG line
    assert translator.unparsed == 3  # the banner, the Namespace, the removal line: counted, not errors


def test_nxd_tp_zero1_without_batch_shape_times_steps_between_log_lines(tp_zero1_log):
    _, events = translate(tp_zero1_log, seq_len=4096)
    steps = of(events, Step)
    assert steps[0].step_time_s is None and steps[0].tokens is None
    assert steps[1].step_time_s == 3.0  # 30 s between the lines / 10 steps
    assert steps[1].tokens == round(21.33 * 4096 * 3.0)  # sequences/s x sequence length x step time


def test_nxd_async_checkpoint_is_non_blocking_and_only_its_staging_is_a_checkpoint_phase(tp_zero1_log):
    _, events = translate(tp_zero1_log)
    saves = [(e.state, e.tag, e.step, e.blocking, e.ts) for e in of(events, Checkpoint)]
    assert saves == [
        ("begin", "step_20", 20, False, local("2024-01-04 10:04:20.000")),
        # "completed" is logged only inside the next save's wait, after steps 30 and 40 went on.
        ("end", "step_20", 20, False, local("2024-01-04 10:05:22.500")),
        ("begin", "step_40", 40, False, local("2024-01-04 10:05:22.500")),
    ]
    phases = [(e.phase, e.state, e.ts) for e in of(events, Phase) if e.phase == "checkpoint"]
    assert phases == [
        ("checkpoint", "begin", local("2024-01-04 10:04:20.000")),
        ("checkpoint", "end", local("2024-01-04 10:04:22.500")),  # "requested": steps continue
        ("checkpoint", "begin", local("2024-01-04 10:05:22.500")),
        ("checkpoint", "end", local("2024-01-04 10:05:25.000")),
    ]


def test_compile_lines(tp_zero1_log):
    _, events = translate(tp_zero1_log)
    compiles = [(e.state, e.cache, e.ts) for e in of(events, Phase) if e.phase == "compile"]
    assert compiles == [
        ("begin", "miss", local("2024-01-04 10:00:00.000000")),
        ("end", "miss", local("2024-01-04 10:03:20.000000")),
    ]


@pytest.mark.parametrize("layout", sorted(nxd_logs.LAYOUTS))
def test_every_nxd_logger_layout_gives_each_step_its_loss_and_the_library_saves(layout):
    """Each public layout, printed by its statement at simulated times: 12 steps of 1.7 s, a 20 s
    stall in step 7, synced saves after steps 5 and 10."""
    stream = io.StringIO()
    truth = nxd_logs.run(
        stream,
        layout,
        nxd_logs.VirtualClock(1_790_000_000.0),
        12,
        1.7,
        stall_step=7,
        stall_s=20.0,
        save_every=5,
        save_s=3.0,
    )
    translator = LogTranslator("run", PROFILES, global_batch=nxd_logs.SEQS_PER_STEP)
    events = []
    for line in stream.getvalue().splitlines():
        events += translator.feed(line, RECEIVED_S)
    assert translator.profile_name == "nxd"
    steps = of(events, Step)
    assert [s.step for s in steps] == list(range(1, 13)) and steps[-1].step == truth.last_step
    assert [round(s.loss, 4) for s in steps] == [round(10.0 / (1 + 0.1 * n), 4) for n in range(1, 13)]
    if layout in nxd_logs.TIMESTAMPED:  # time.asctime(): whole seconds
        assert [s.ts for s in steps] == [float(int(truth.step_end_s[n])) for n in range(1, 13)]
    assert all(s.step_time_s and s.step_time_s > 0 for s in steps)
    saves = [(e.step, e.state, e.blocking) for e in of(events, Checkpoint)]
    assert saves == [(5, "begin", True), (5, "end", True), (10, "begin", True), (10, "end", True)]
    assert [(e.ts, f.ts) for e, f in zip(*[iter(of(events, Checkpoint))] * 2, strict=True)] == [
        pytest.approx((began, completed), abs=1e-3) for _, began, completed in truth.saves
    ]


def test_nxd_tp_pp_through_torchrun_prefix_with_synced_save_and_resume(generated):
    path, truth = generated["nxd_tp_pp.log"]
    _, events = translate(path, global_batch=256)
    steps = of(events, Step)
    assert [(s.rank, s.step, s.step_time_s, s.loss) for s in steps] == [
        (0, step, truth.step_time_s[step], 10.0 / (1 + 0.1 * step)) for step in (101, 102, 103)
    ]  # the line's own step time wins
    assert steps[0].ts == RECEIVED_S  # tp_pp lines carry no timestamp
    checkpoints = [(e.action, e.state, e.step, e.blocking) for e in of(events, Checkpoint)]
    assert checkpoints == [
        ("load", "begin", 100, None),
        ("load", "end", 100, None),
        ("save", "begin", 102, True),
        ("save", "end", 102, True),
    ]
    load_end = of(events, Checkpoint)[1]
    assert load_end.tag == "/fsx/ckpt/step_100"  # "loading checkpoint done" names no tag: the open load's


def test_a_real_nxdt_bar_gives_every_step_its_time_on_the_bars_clock_never_from_its_rate():
    """Lightning 2.5.0 run for real with NxD Training's bar metrics (tests/lightning_run.py --nxdt):
    a 1.5 s sleep in step 8, NxD's synced saves after steps 5, 10, 15, 20 (the library's lines
    right after the bar's redraw, on the same line), the end by max_steps."""
    truth = json.loads((FIXTURES / "nxdt_lightning_2.5.0_file.truth.json").read_text())
    translator, events = translate("nxdt_lightning_2.5.0_file.log", seq_len=4096)
    events = translator.settle(events, RECEIVED_S)
    assert translator.profile_name == "nxdt"
    steps = of(events, Step)
    ends = {int(n): step["end_s"] for n, step in truth["steps"].items()}
    assert [s.step for s in steps] == sorted(ends) == list(range(1, 21))
    for step in steps[1:]:
        assert step.step_time_s == pytest.approx(ends[step.step] - ends[step.step - 1], abs=0.02), step.step
    # The bar's mean rate (smoothing 0) after the stall would say ~0.2 s; the step's own time is read.
    assert steps[8].step_time_s == pytest.approx(truth["steps"]["9"]["step_time_s"], abs=0.02)
    # NxDT's loss on the step's own redraw (the counter's redraw still shows the last step's); the
    # first step is reported from its counter's redraw, which has no postfix yet.
    assert steps[0].loss is None and all(s.loss is not None for s in steps[1:])
    # Tokens from NxDT's throughput (35.2 seq/s as logged) x seq_len x the step's time.
    assert steps[3].tokens == round(35.2 * 4096 * steps[3].step_time_s)
    saves = [(e.step, e.state, e.blocking) for e in of(events, Checkpoint)]
    assert saves == [(s["step"], state, True) for s in truth["saves"] for state in ("begin", "end")]
    assert [e.status for e in events if e.event == "run_end"] == ["success"]


@pytest.mark.parametrize("name", ["torchtitan_torchrun_color.log", "torchtitan_plain.log"])
def test_torchtitan_steps_keep_tps_per_device_with_or_without_colours_and_prefix(name, generated):
    path, truth = generated[name]
    _, events = translate(path, global_batch=8, seq_len=8192)
    steps = of(events, Step)
    assert [(s.rank, s.step, s.loss) for s in steps] == [(0, step, truth.loss[step]) for step in range(11, 16)]
    assert [s.tokens_per_s_per_device for s in steps] == [truth.tps[n] for n in range(11, 16)]  # "tps: 31,208"
    # log timestamps (ms), log_freq 1
    assert [s.step_time_s for s in steps[1:3]] == pytest.approx(
        [truth.step_time_s[12], truth.step_time_s[13]], abs=1e-3
    )
    # The first step line after a blocking save is not timed across the save.
    assert steps[3].step_time_s is None and steps[4].step_time_s == pytest.approx(truth.step_time_s[15], abs=1e-3)
    assert steps[0].tokens == 8 * 8192
    begin, end = [e for e in of(events, Checkpoint) if e.action == "save"]
    [(saved_after, save_began, save_finished)] = truth.saves
    assert (begin.blocking, end.blocking, begin.step) == (True, True, saved_after)
    assert end.ts - begin.ts == pytest.approx(save_finished - save_began, abs=1e-3)  # "... in 12.50 seconds."
    load_begin, load_end = [e for e in of(events, Checkpoint) if e.action == "load"]
    checkpoint_id, load_began, load_finished = truth.load
    assert (load_begin.tag, load_begin.step) == (checkpoint_id, 10)
    assert load_end.ts - load_begin.ts == pytest.approx(load_finished - load_began, abs=1e-3)


def test_colour_codes_do_not_change_what_is_read(generated):
    _, coloured = translate(generated["torchtitan_torchrun_color.log"][0])
    _, plain = translate(generated["torchtitan_plain.log"][0])
    assert [e.model_dump() for e in coloured] == [e.model_dump() for e in plain]


def test_neuron_runtime_errors_are_runtime_errors_on_the_rank_that_logged_them():
    _, events = translate("neuron_runtime_errors.log")
    errors = of(events, Error)
    assert {e.source for e in errors} == {"runtime"}
    assert [e.rank for e in errors] == [3, 3, 3, 5, 6, 7]
    assert "inference timeout (600000 ms) on Neuron Device 0 NC 0" in errors[1].message
    assert errors[1].ts == local("2023-Jan-09 20:27:41.0593", "%Y-%b-%d %H:%M:%S.%f")
    assert errors[3].message.startswith("Timeout waiting for RX (waited 120 sec)")
    assert errors[4].message.startswith("Uncorrectable memory error")
    assert errors[5].message.startswith("Error notifications found on NC 3")


def test_torchrun_failure_summary_gives_one_launcher_error_per_failed_rank_root_cause_first():
    _, events = translate("torchrun_sigkill.log")
    root, other = of(events, Error)
    assert (root.rank, root.source, root.exit_code, root.signal) == (1, "launcher", -9, "SIGKILL")
    # The agent's failure line and the summary's Root Cause are one failure (pid 13151), reported
    # once at the line's time (ms), marked root cause. The line has no year: the latest that does
    # not put it after its receive time (RECEIVED_S is in March 2030: December 2029).
    assert root.failed_ts == root.ts == datetime(2029, 12, 1, 10, 0, 50, 704000).timestamp()
    assert root.message == "Signal 9 (SIGKILL) received by PID 13151" and root.root_cause
    assert (other.rank, other.exit_code, other.signal) == (0, -15, "SIGTERM")  # stopped by the agent
    assert other.ts == datetime(2026, 12, 1, 10, 0, 50).timestamp() and not other.root_cause


def test_torchrun_summary_of_a_python_exception_has_the_exit_code_and_no_signal():
    _, events = translate("torchrun_exception.log")
    root, _ = of(events, Error)
    assert (root.rank, root.exit_code, root.signal) == (1, 1, None)
    assert root.message == "RuntimeError: injected failure on rank 1"  # the rank's traceback's last line


def test_a_chosen_profile_skips_detection(generated):
    translator, events = translate(generated["torchtitan_plain.log"][0], profile="nxd")
    assert translator.profile_name == "nxd" and of(events, Step) == []


def test_lines_before_the_detecting_line_are_read_once_the_profile_is_known():
    translator = LogTranslator("run", PROFILES)
    early = translator.feed("Setting OMP_NUM_THREADS environment variable", 1.0)
    assert early == [] and translator.profile_name is None
    # The library's own lines are read at once, whatever profile is detected later.
    [load] = translator.feed(
        "[2024-01-04 10:00:00.100: I neuronx_distributed/trainer/checkpoint.py:888] loading checkpoint from step_5", 1.0
    )
    assert (load.action, load.state, load.step) == ("load", "begin", 5)
    error = translator.feed(
        "[rank0]:2024-Jan-04 10:00:01.0001 1:1 ERROR  NRT:nrt_init  Unable to determine Neuron Driver version.", 2.0
    )
    assert [e.source for e in error] == ["runtime"]  # always-on profiles do not wait for detection
    events = translator.feed(
        "LOG Thu Jan  4 10:05:00 2024 - (0, 6) step_loss : 2.0 learning_rate : 1.5e-04 throughput : 9.0 seq/s", 3.0
    )
    assert translator.profile_name == "nxd"
    assert [type(e).__name__ for e in events] == ["Step"]


def test_after_the_detection_window_unmatched_lines_are_unparsed_and_detection_still_works():
    translator = LogTranslator("run", PROFILES)
    for _ in range(DETECT_LINES + 5):
        assert translator.feed("hello from the data loader", 1.0) == []
    assert translator.unparsed == DETECT_LINES + 5 and translator.profile_name is None
    [step] = translator.feed("step 7 step_time 1.5s throughput 10.0 seq/s step loss 2.5 grad norm 1.0", 2.0)
    assert translator.profile_name == "nxd" and step.step == 7


def test_unmatched_lines_are_counted_as_unparsed_not_rejected():
    translator = LogTranslator("run", PROFILES, "nxd")
    for text in ["", "Setting OMP_NUM_THREADS environment variable", "step_loss is fine", "2024-99-99 25:00:00.0: x"]:
        assert translator.feed(text, 1.0) == []
    assert (translator.lines, translator.unparsed, translator.events) == (3, 3, 0)  # the empty line is no line


def test_a_matched_line_whose_values_cannot_be_valid_raises_for_the_caller_to_count():
    translator = LogTranslator("run", PROFILES, "nxd")
    with pytest.raises(ValueError):
        translator.feed("step 22 step_time 1e999s throughput 1 seq/s step loss 1.0", 1.0)


def test_a_user_profile_from_a_file_reads_its_format(tmp_path):
    path = tmp_path / "profiles.toml"
    path.write_text(r"""
[[profile]]
name = "mytrainer"
detect = ['^\[mytrainer\] ']
time_formats = ["%Y-%m-%dT%H:%M:%S"]
include = ["nxd-library"]

[[profile.timestamps]]
pattern = '^\[mytrainer\] (?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d) '
format = "%Y-%m-%dT%H:%M:%S"

[[profile.rules]]
pattern = 'iter (?P<step>\d+) loss (?P<loss>\S+) (?P<step_time_s>[\d.]+)s/iter'
emit = [{ event = "step" }]

[[profile.rules]]
pattern = 'writing checkpoint (?P<tag>\S+)'
emit = [{ event = "checkpoint", action = "save", state = "begin", blocking = false }]
""")
    profiles = profile_registry(load_profile_file(path, profile_registry()))
    translator = LogTranslator("run", profiles)
    events = []
    for text in [
        "[mytrainer] 2025-05-05T10:00:00 iter 3 loss 1.25 0.5s/iter",
        "[mytrainer] 2025-05-05T10:00:01 writing checkpoint ckpt-step_3",
        "[2025-05-05 10:00:02.000: I neuronx_distributed/trainer/checkpoint.py:964] loading checkpoint done",
    ]:
        events += translator.feed(text, 1.0)
    assert translator.profile_name == "mytrainer"
    step, save, load = events
    assert (step.step, step.loss, step.step_time_s, step.ts) == (3, 1.25, 0.5, datetime(2025, 5, 5, 10).timestamp())
    assert (save.action, save.blocking, save.step) == ("save", False, 3)
    assert (load.action, load.state) == ("load", "end")


@pytest.mark.parametrize(
    "body, message",
    [
        ("[[profile]\nname = 1", "not valid TOML"),
        ("[[profile]]\nname = 'x'\nrules = [{ pattern = '(' }]", "bad regular expression"),
        (
            "[[profile]]\nname = 'x'\nrules = [{ pattern = '(?P<speed>\\d+)', emit = [{ event = 'step' }] }]",
            "unknown group",
        ),
        ("[[profile]]\nname = 'x'\nrules = [{ pattern = 'a', emit = [{ event = 'stepp' }] }]", "rules.0.emit.0.event"),
        (
            "[[profile]]\nname = 'x'\nrules = [{ pattern = 'a', emit = [{ event = 'checkpoint', action = 'save', state = 'start' }] }]",
            "cannot be valid",
        ),
        (
            "[[profile]]\nname = 'x'\nrules = [{ pattern = '(?P<step>\\d+)', emit = [{ event = 'step', colour = 'red' }] }]",
            "emit field(s) ['colour']",
        ),
        ("[[profile]]\nname = 'x'\ninclude = ['nope']", "includes unknown profile 'nope'"),
        (
            "[[profile]]\nname = 'x'\nrules = [{ pattern = '(?P<failed_ts>\\S+)', emit = [{ event = 'error' }] }]",
            "time_formats",
        ),
        ("[[profile]]\nname = 'Bad Name'", "profile.0.name"),
        ("[[profile]]\nname = 'x'\n[[profile]]\nname = 'x'", "defined twice"),
        ("[something]\nname = 'x'", "expected only [[profile]] tables"),
    ],
)
def test_a_bad_user_profile_file_is_refused_with_a_message_saying_where(tmp_path, body, message):
    path = tmp_path / "bad.toml"
    path.write_text(body)
    with pytest.raises(LogProfileError, match=re.escape(message)) as info:
        load_profile_file(path, profile_registry())
    assert str(path) in str(info.value)


def test_every_builtin_profile_names_its_source():
    assert all(profile.source for profile in PROFILES.values())


def test_builtin_profiles_pass_the_checks_a_user_profile_file_gets():
    from trnwatch.collectors.log_profiles import check_profile

    for profile in PROFILES.values():
        check_profile(profile, PROFILES)


def test_a_real_lightning_log_gives_every_step_its_time_on_the_bars_clock():
    """Captured from Lightning 2.5.0 (the fixture's first line says how): two epochs' bars, a
    1.5 s sleep in step 8, ModelCheckpoint's verbose saves after steps 5, 10, 15, 20, the end."""
    truth = json.loads((FIXTURES / "lightning_2.5.0_file.truth.json").read_text())
    translator, events = translate("lightning_2.5.0_file.log")
    events = translator.settle(events, RECEIVED_S)
    assert translator.profile_name == "lightning"
    steps = of(events, Step)
    ends = {int(n): step["end_s"] for n, step in truth["steps"].items()}
    assert [s.step for s in steps] == sorted(ends) == list(range(1, 21))
    # Each step's time from the bar's elapsed clock (never its running-mean rate), within 0.02 s:
    # the rate's two decimals, and the bar drawn a few ms after the step's end (18 ms at worst in
    # this capture, made on a loaded machine).
    for step in steps[1:]:
        assert step.step_time_s == pytest.approx(ends[step.step] - ends[step.step - 1], abs=0.02), step.step
    # Stamped on the bar's clock, the last step at the read's receive time: the spacing is kept.
    assert [s.ts - steps[-1].ts for s in steps] == pytest.approx([ends[n] - ends[20] for n in range(1, 21)], abs=0.05)
    saves = [(e.step, e.state) for e in of(events, Checkpoint)]
    assert saves == [(n, state) for n in (5, 10, 15, 20) for state in ("begin", "end")]
    assert [e.status for e in events if e.event == "run_end"] == ["success"]


def test_a_real_rich_bar_log_is_recognised_with_its_saves_and_end_but_no_steps():
    """Lightning 2.5.0's RichProgressBar run for real with rich 13.9.4 (the fixture's first line
    says how): to a file it leaves its messages and one last frame. Its `Trainer.fit` stopped line
    comes before that frame: it must not make the log a TQDM one."""
    translator, events = translate("lightning_2.5.0_rich_13.9.4_file.log")
    assert translator.profile_name == "lightning-rich"
    assert of(events, Step) == []
    assert [e.step for e in of(events, Checkpoint) if e.state == "begin"] == [5, 10, 15, 20]
    assert [e.status for e in events if e.event == "run_end"] == ["success"]
    assert "use the TQDM bar" in PROFILES["lightning-rich"].no_steps


def test_a_lightning_run_cut_after_a_counter_redraw_counts_that_step_at_the_end_of_the_read():
    """Issue 33 item 5: Lightning redraws a step's counter before its metrics; a run killed (or a
    read ending) between the two still shows the step: the held redraw is reported when the read
    ends (release), so the last step is the bar's counter, not one short."""
    lines = re.split(r"\r\n|\r|\n", (FIXTURES / "lightning_2.5.0_file.log").read_text(encoding="utf-8"))
    cut = next(i for i, line in enumerate(lines) if re.match(r"^Epoch 0: .*\| 12/16 \[", line))
    translator = LogTranslator("run", PROFILES)
    events = [event for line in lines[: cut + 1] for event in translator.feed(line, RECEIVED_S)]
    assert [s.step for s in of(events, Step)][-1] == 11  # the redraw with step 11's metrics still waits
    assert [s.step for s in of(translator.release(), Step)] == [12]
    assert translator.release() == []
