"""ruda.Future: awaited in asyncio (completions through call_soon_threadsafe), waited with
result(), cancelled, with done-callbacks, and never a deadlock inside a running loop."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

import ruda

BIG = {"big": np.ones(64 << 20, dtype=np.uint8)}  # 64 MiB: a copy long enough to cancel


async def test_await_gives_the_record() -> None:
    record = await ruda.snapshot({"w": np.arange(3.0)})
    assert np.from_dlpack(record["w"]).tolist() == [0.0, 1.0, 2.0]


async def test_a_sync_wait_inside_a_running_loop_is_refused_not_a_deadlock() -> None:
    future = ruda.snapshot(BIG)
    with pytest.raises(ruda.Error) as raised:
        future.result()
    assert raised.value.code == "sync_read_unavailable"
    assert "use await" in str(raised.value)
    await future  # the operation itself went on


async def test_cancelling_the_awaiting_task_cancels_the_operation() -> None:
    futures: list[ruda.Future] = []

    async def snapshot_many() -> None:
        while True:
            futures.append(ruda.snapshot(BIG))
            await futures[-1]

    task = asyncio.ensure_future(snapshot_many())
    while not futures:
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert futures[-1].cancelled()
    with pytest.raises(asyncio.CancelledError):
        futures[-1].result()


async def test_wait_for_timeout_cancels_the_operation() -> None:
    future = ruda.snapshot({"big": np.ones(256 << 20, dtype=np.uint8)})
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(future, timeout=0.001)
    assert future.done()
    assert future.cancelled() or future.exception() is None


def test_result_cancel_done_and_exception() -> None:
    future = ruda.snapshot(BIG)
    if future.cancel():
        assert future.done() and future.cancelled()
        with pytest.raises(asyncio.CancelledError):
            future.result()
    else:  # it finished first
        assert future.result()["big"].nbytes == 64 << 20
    done = ruda.snapshot({"w": np.ones(2)})
    assert done.result(timeout=60)["w"].shape == (2,)
    assert done.done() and not done.cancelled() and done.exception() is None
    assert not done.cancel()


def test_a_cancelled_snapshot_stops_its_copy() -> None:
    seen = 0
    for _ in range(20):
        future = ruda.snapshot(BIG)
        if future.cancel():
            seen += 1
            with pytest.raises(asyncio.CancelledError):
                future.result()
    assert seen > 0


def test_result_times_out_with_timed_out() -> None:
    future = ruda.snapshot({"big": np.empty(256 << 20, dtype=np.uint8)})
    try:
        future.result(timeout=0)
    except ruda.TimedOut as e:
        assert e.code == "timed_out"
        assert isinstance(e, TimeoutError)
    future.result()


def test_done_callbacks_run_once_with_the_future() -> None:
    called: list[object] = []
    event = threading.Event()
    future = ruda.snapshot({"w": np.ones(4)})
    future.add_done_callback(lambda f: (called.append(f), event.set()))
    assert event.wait(60)
    assert called == [future]
    future.add_done_callback(called.append)  # done already: at once, here
    assert called == [future, future]


def test_a_raising_callback_is_reported_as_unraisable(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    reports: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", reports.append)
    future = ruda.snapshot({"w": np.ones(4)})
    future.result()
    future.add_done_callback(lambda f: 1 / 0)
    assert len(reports) == 1
    assert isinstance(reports[0].exc_value, ZeroDivisionError)  # type: ignore[attr-defined]
    assert future.result()["w"].shape == (4,)


def test_futures_are_generic_in_annotations() -> None:
    assert ruda.Future[ruda.Record] is not None
