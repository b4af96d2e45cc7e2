"""A scrape's request must pass the session's cancel through even when its answer arrives in the
same turn of the event loop (issue 9: nothing keeps running after the session ends). On Python
3.11 `asyncio.wait_for` returned the answer instead (CPython gh-86296): the scrape loop, which only
ends by cancellation, then ran on, and a session under CPU load hung on its stop."""

import asyncio

import pytest

from trnwatch.collectors import prometheus_http


class InlineThread:
    """Runs the request's work at `start()`, in the loop's thread: its answer is then queued
    (call_soon_threadsafe) before the awaiting task suspends, so the cancel below lands in the
    same turn as the answer, every time."""

    def __init__(self, target, name=None, daemon=None):
        self.target = target

    def start(self) -> None:
        self.target()


def test_a_cancel_in_the_turn_the_answer_arrives_is_not_swallowed(monkeypatch):
    monkeypatch.setattr(prometheus_http.threading, "Thread", InlineThread)
    monkeypatch.setattr(prometheus_http, "fetch", lambda url, token, timeout_s, max_bytes, request: b"answer")

    async def main() -> None:
        task = asyncio.create_task(prometheus_http.fetch_async("http://127.0.0.1:9/metrics", None, 5.0, 1000))
        await asyncio.sleep(0)  # the task ran to its await; the answer is queued behind it
        task.cancel()  # runs after the answer is set, before the task resumes
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


def test_the_answer_is_returned_when_nothing_cancels(monkeypatch):
    monkeypatch.setattr(prometheus_http.threading, "Thread", InlineThread)
    monkeypatch.setattr(prometheus_http, "fetch", lambda url, token, timeout_s, max_bytes, request: b"answer")
    assert asyncio.run(prometheus_http.fetch_async("http://127.0.0.1:9/metrics", None, 5.0, 1000)) == b"answer"
