"""Passive NxD log source: realistic lines (formats from the reference notes) become job events
that the job ledger folds like the emitter's."""

import asyncio
import math
from datetime import datetime

from trnwatch.collectors.job_events import Checkpoint, Error, Phase, Step, parse_job_line
from trnwatch.collectors.job_log import NxdLogParser, follow_job_log
from trnwatch.ledger.job import JobLedger

RECEIVED_S = 1_800_000_000.0
PREFIX = "2024-01-04 10:00:00.250000: 31337 INFO ||NEURON_CC_WRAPPER||: "
COLD = (
    PREFIX + "Call compiler with cmd: neuronx-cc compile --target=trn1 --framework=XLA "
    "/tmp/ubuntu/neuroncc_compile_workdir/5e7c/model.MODULE_1234567890+abcdef12.hlo_module.pb "
    "--output /tmp/ubuntu/neuroncc_compile_workdir/5e7c/model.MODULE_1234567890+abcdef12.neff --verbose=35"
)
PASS = "2024-01-04 10:03:20.750000: 31337 INFO ||NEURON_CC_WRAPPER||: Compiler status PASS"
HIT = (
    "2024-01-04 10:03:25.000000: 31338 INFO ||NEURON_CC_WRAPPER||: Using a cached neff at "
    "/var/tmp/neuron-compile-cache/neuronxcc-2.23.6484.0/MODULE_987+abcdef12/model.neff. "
    "Exiting with a successfully compiled graph."
)
TP_ZERO1_10 = "LOG Thu Jan  4 10:05:00 2024 - (0, 10) step_loss : 2.1234 learning_rate : 1.50e-04 throughput : 12.34 seq/s grad-norm : 0.9"
TP_ZERO1_20 = "LOG Thu Jan  4 10:05:30 2024 - (0, 20) step_loss : 1.9876 learning_rate : 1.50e-04 throughput : 12.40 seq/s grad-norm : 0.8"
TP_PP = "step 21 step_time 3.25s throughput 78.8 seq/s step loss 1.95 grad norm 0.77"


def local_ts(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S.%f").timestamp()


def parse(parser: NxdLogParser, text: str):
    return parser.parse(text, RECEIVED_S)


def test_cold_compile_begin_and_end_carry_the_line_timestamps():
    parser = NxdLogParser("llama")
    [begin] = parse(parser, COLD)
    [end] = parse(parser, PASS)
    assert isinstance(begin, Phase) and (begin.phase, begin.state, begin.cache) == ("compile", "begin", "miss")
    assert (end.phase, end.state, end.cache) == ("compile", "end", "miss")
    assert begin.ts == local_ts("2024-01-04 10:00:00.250000")
    assert end.ts - begin.ts == 200.5


def test_cache_hit_and_compiler_error():
    parser = NxdLogParser("llama")
    [hit] = parse(parser, HIT)
    assert (hit.phase, hit.state, hit.cache) == ("compile", "end", "hit")
    end, error = parse(parser, PREFIX + "Compiler status ERROR: [XTP003] out of memory")
    assert isinstance(error, Error) and "[XTP003]" in error.message and end.state == "end"


def test_tp_zero1_steps_get_loss_and_the_average_step_time_over_the_log_interval():
    parser = NxdLogParser("llama", global_batch=256, seq_len=4096)
    [first] = parse(parser, TP_ZERO1_10)
    [second] = parse(parser, TP_ZERO1_20)
    assert isinstance(first, Step) and (first.step, first.loss, first.step_time_s) == (10, 2.1234, None)
    assert (second.step, second.loss) == (20, 1.9876)
    assert second.step_time_s == 3.0  # 30 s between the lines / 10 steps
    assert second.tokens == 256 * 4096 and second.compute_s is None


def test_tp_pp_line_gives_its_own_step_time_and_tokens_stay_unknown_without_batch_shape():
    [step] = parse(NxdLogParser("llama"), TP_PP)
    assert (step.step, step.step_time_s, step.loss, step.tokens) == (21, 3.25, 1.95, None)
    assert step.ts == RECEIVED_S  # no timestamp on the line: receive time


def test_nxdt_progress_fields():
    line = (
        "Epoch 0:  10%|█         | 10/100 [00:30<04:30, reduced_train_loss=2.340, lr=0.000150, "
        "parameter_norm=1.23e+03, global_step=9.000, consumed_samples=2560.0, throughput=85.2, "
        "throughput_peak=86.0, gradient_norm=0.912, train_step_timing in s=3.01]"
    )
    [step] = parse(NxdLogParser("llama"), line)
    assert (step.step, step.loss, step.step_time_s) == (9, 2.34, 3.01)


def test_checkpoint_lines_with_the_step_from_the_tag():
    parser = NxdLogParser("llama")
    lines = [
        "synced saving of checkpoint step_100 began",
        "synced saving of checkpoint step_100 completed",
        "async saving of checkpoint step_200 began",
        "async saving of checkpoint step_200 requested",
        "async saving of checkpoint step_200 completed",
        "loading checkpoint from step_200",
        "loading checkpoint done",
    ]
    events = [event for text in lines for event in parse(parser, text)]
    assert all(isinstance(event, Checkpoint) for event in events)
    assert [(e.action, e.state, e.step, e.tag) for e in events] == [
        ("save", "begin", 100, "step_100"),
        ("save", "end", 100, "step_100"),
        ("save", "begin", 200, "step_200"),
        ("save", "end", 200, "step_200"),
        ("load", "begin", 200, "step_200"),
        ("load", "end", 200, "step_200"),
    ]


def test_torchrun_prefix_names_the_rank_and_a_nan_loss_survives():
    [step] = parse(NxdLogParser("llama"), "[default3]:" + TP_ZERO1_10.replace("2.1234", "nan"))
    assert step.rank == 3 and math.isnan(step.loss)
    assert parse_job_line(step.model_dump_json()).rank == 3  # round-trips as a trnwatch.job/1 line


def test_unrelated_lines_give_no_events():
    parser = NxdLogParser("llama")
    for text in [
        "",
        "2024-01-04 10:00:00.250000: 31337 INFO ||NEURON_CACHE||: Compile cache path: /var/tmp/neuron-compile-cache",
        "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default",
        "step_loss is fine",
        "2024-99-99 25:00:00.0: garbage timestamp",
    ]:
        assert parse(parser, text) == []


def test_a_passive_log_folds_into_the_ledger_without_special_cases():
    parser = NxdLogParser("llama", global_batch=256, seq_len=4096)
    ledger = JobLedger()
    for text in [COLD, PASS, HIT, TP_ZERO1_10, TP_ZERO1_20]:
        for event in parse(parser, text):
            ledger.ingest(event, RECEIVED_S)
    summary = ledger.summary(now_s=local_ts("2024-01-04 10:05:31.000000"))
    assert summary["cold_compiles"] == 1 and summary["cold_compile_s"] == 200.5
    assert summary["compile_cache_hits"] == 1
    assert summary["throughput"]["tokens_per_s"] == 256 * 4096 / 3.0
    assert summary["collectives"] == "unavailable: needs the in-job emitter"
    assert summary["verdict"] == "steady"


def test_follow_job_log_yields_trnwatch_job_lines(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("\n".join(["noise", COLD, PASS, TP_PP, "step 22 step_time 1e999s throughput 1 seq/s step loss 1.0"]) + "\n")

    async def run():
        lines = follow_job_log(str(log), poll_s=0.02)
        got = []
        async with asyncio.timeout(5):
            async for line in lines:
                got.append(line)
                if len(got) == 4:
                    break
        await lines.aclose()
        return got

    got = asyncio.run(run())
    assert {line.source_id for line in got} == {"joblog:train.log"} and {line.kind for line in got} == {"job"}
    events = [parse_job_line(line.text) for line in got[:3]]
    assert [event.event for event in events] == ["phase", "phase", "step"]
    assert events[0].run == "train"
    # An event-shaped line that does not validate is passed on raw, to be rejected and counted.
    assert got[3].text.startswith("step 22")
