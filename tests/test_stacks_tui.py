"""The job view's stack key on a live session: `k` takes the selected suspect's stack with py-spy
(off the event loop), the view shows it as data, the receipt keeps it; a failing py-spy is said
in the view and the screen goes on."""

import asyncio
import json
import os

import pytest

from trnwatch.collectors.stacks import StackOptions
from trnwatch.ledger.ledger import Ledger
from trnwatch.ledger.rules import Rules
from trnwatch.session import Session, SourceSpec
from trnwatch.stacks import STACKS_PER_INCIDENT, StackCapturer, incident_requests
from trnwatch.tui.app import TrnwatchApp
from tests.job_story import event, lines, steady_run
from tests.test_stacks import NO_PY_SPY, PY_SPY, hung_process, on_path  # noqa: F401 - fixtures
from tests.test_tui_app import drive, wait_until
from tests.waiting import until

T0 = 1_800_000_000.0
STEPS = [1.0] * 20


def stalled_job(pid: int) -> tuple[list, float]:
    """Two ranks on this host (both with `pid`): rank 0 waits in its all-reduce at step 23,
    rank 1 sits in its dataloader; judged 40 s after the last step, the job is STALLED on rank 1."""
    events = steady_run(STEPS, t0=T0, host=os.uname().nodename, pid=pid)
    last_ts = max(e["ts"] for e in events)
    for rank, region in ((0, "collective:all_reduce"), (1, "dataloader")):
        for k in range(1, 41):
            events.append(event("heartbeat", last_ts + k, rank, step=23, region=region, region_since=last_ts + 0.5))
    return sorted(events, key=lambda e: e["ts"]), last_ts + 40.0


def session_with_stacks(tmp_path, pid: int, options: StackOptions) -> tuple[Session, float]:
    events, now_s = stalled_job(pid)

    async def job_lines():
        for line in lines(events):
            yield line
        await asyncio.Event().wait()  # a live job: no EOF

    session = Session(Ledger("live"), [SourceSpec("job:story", "job", job_lines)], receipt_path=tmp_path / "r.json")
    session.stacks = StackCapturer(session.ledger, options, session.apply)
    session.background.append(session.stacks.run)
    return session, now_s


def run_keys(session: Session, now_s: float, keys: tuple[str, ...]):
    app = TrnwatchApp(
        session.ledger,
        session=session,
        clock=lambda: now_s,
        refresh_s=0.1,
        theme="dark",
        receipt_path=session.receipt_path,
    )

    async def check(app, pilot):
        await wait_until(pilot, lambda: session.ledger.job is not None and len(session.ledger.job.ranks) == 2, "job")
        await wait_until(pilot, lambda: session.ledger.job.diagnose(now_s).verdict == "stalled", "stalled")
        await pilot.press("j", *keys)
        await wait_until(pilot, lambda: len(session.ledger.stacks) == 1, "the capture folded")
        app.render_now()
        await pilot.pause()
        text = app.view.plain_text()
        await pilot.press("q")
        await app._session_task
        return text

    texts: list[str] = []

    async def keep(app, pilot):
        texts.append(await check(app, pilot))

    drive(app, size=(120, 60), check=keep)
    return texts[0]


@pytest.mark.skipif(NO_PY_SPY is not None, reason=NO_PY_SPY or "")
def test_k_on_the_suspect_shows_its_stack_in_the_job_view_and_keeps_it(tmp_path, hung_process):  # noqa: F811
    session, now_s = session_with_stacks(tmp_path, hung_process.pid, StackOptions(py_spy=PY_SPY, timeout_s=60))
    text = run_keys(session, now_s, ("k",))
    [capture] = session.ledger.stacks.captures
    if capture.outcome == "permission-denied":
        pytest.skip(f"the kernel refused ptrace here: {capture.message}")
    assert (capture.rank, capture.trigger, capture.outcome) == (1, "key", "ok"), capture.message
    assert "Stacks" in text and "stuck_in_a_known_function" in text and "hung.py:9" in text
    kept = json.loads((tmp_path / "r.json").read_text())["stacks"]["captures"]
    assert [(c["rank"], c["outcome"]) for c in kept] == [(1, "ok")]


def test_a_py_spy_printing_markup_is_shown_as_data_and_the_screen_goes_on(tmp_path, on_path):  # noqa: F811
    on_path("printf '[bold red]boom[/] \\033[2J\\n' >&2\nexit 3\n")
    session, now_s = session_with_stacks(tmp_path, os.getpid(), StackOptions(timeout_s=60))
    text = run_keys(session, now_s, ("K",))  # native asked: the same path
    [capture] = session.ledger.stacks.captures
    assert (capture.outcome, capture.native) == ("failed", True)
    assert "failed: exit status 3: [bold red]boom[/]" in text and "\x1b" not in text


def many_ranks_stalled_on_one(ranks: int) -> tuple[Ledger, float]:
    """`ranks` ranks on this host: all wait in their all-reduce at step 23 but the last one,
    which sits in its dataloader; judged 40 s after the last step (STALLED on the last rank)."""
    events = steady_run(STEPS, t0=T0, ranks=ranks, host=os.uname().nodename, pid=os.getpid())
    last_ts = max(e["ts"] for e in events)
    for rank in range(ranks):
        region = "dataloader" if rank == ranks - 1 else "collective:all_reduce"
        for k in range(1, 41):
            events.append(event("heartbeat", last_ts + k, rank, step=23, region=region, region_since=last_ts + 0.5))
    ledger = Ledger("live")
    for line in lines(sorted(events, key=lambda e: e["ts"])):
        ledger.ingest(line)
    return ledger, last_ts + 40.0


def test_a_confirmed_stall_takes_its_suspects_and_a_bounded_sample_of_waiting_ranks_once(tmp_path):
    ledger, now_s = many_ranks_stalled_on_one(12)
    incident, requests = incident_requests(ledger, now_s)
    assert [(r.rank, r.contrast, r.incident) for r in requests] == [
        (11, False, incident),
        (0, True, incident),
        (5, True, incident),  # spread over the 11 waiting ranks, CONTRAST_PER_INCIDENT of them
    ]
    assert incident.startswith("stalled since ") and len(requests) <= STACKS_PER_INCIDENT
    delivered: list = []

    async def twice():
        capturer = StackCapturer(ledger, StackOptions(py_spy=str(tmp_path / "no-py-spy")), delivered.append)
        first, again = capturer.check_stall(now_s), capturer.check_stall(now_s + 5)
        await until(lambda: len(delivered) == 3 and not capturer.in_flight, "the three captures delivered")
        return first, again

    first, again = asyncio.run(twice())
    assert (first, again) == (incident, None)  # the same stall is captured once
    for line in delivered:
        ledger.ingest(line)
    assert [c.outcome for c in ledger.stacks.of_incident(incident)] == ["py-spy-missing"] * 3
    assert incident_requests(ledger, T0 + 20.5) is None  # steady then: nothing to capture


def test_a_checkpoint_stuck_past_its_pause_limit_is_captured_as_a_stall():
    events = steady_run(STEPS, t0=T0, ranks=2, host=os.uname().nodename)
    last_ts = max(e["ts"] for e in events)
    for rank in range(2):
        events.append(event("checkpoint", last_ts + 0.5, rank, action="save", state="begin", step=22))
        for k in range(1, 91):
            events.append(
                event("heartbeat", last_ts + k, rank, step=22, region="checkpoint", region_since=last_ts + 0.5)
            )
    ledger = Ledger("live", rules=Rules(checkpoint_limit_s=60))
    for line in lines(sorted(events, key=lambda e: e["ts"])):
        ledger.ingest(line)
    assert incident_requests(ledger, last_ts + 30) is None  # checkpointing, within its bound
    incident, requests = incident_requests(ledger, last_ts + 90)
    assert incident.startswith("stalled (checkpoint) since ")
    assert [(r.rank, r.contrast) for r in requests] == [(0, False), (1, False)]  # the ranks in the save
