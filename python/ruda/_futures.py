"""``ruda.Future`` in asyncio and with callbacks, and ``SaveFutures``: a save's two moments,
*staged* (the tensors are copied; training may change them) and *durable* (on disk)."""

from __future__ import annotations

import asyncio
import types
from typing import Any, Callable, Generator, Generic, Optional, TypeVar

from ._ruda import Future

T = TypeVar("T")


def _await(self: "Future[Any]") -> Generator[Any, None, Any]:
    """Awaits the operation in the running loop: its completion reaches the loop through
    ``call_soon_threadsafe``, never by polling; cancelling the awaiting task cancels it."""
    loop = asyncio.get_running_loop()
    waiter = loop.create_future()

    def transfer() -> None:
        if waiter.done():
            return
        if self.cancelled():
            waiter.cancel()
            return
        error = self.exception()
        if error is None:
            waiter.set_result(self.result())
        else:
            waiter.set_exception(error)

    def on_done() -> None:  # on the completing thread, GIL held
        try:
            loop.call_soon_threadsafe(transfer)
        except RuntimeError:
            pass  # the loop is closed: nobody awaits any more

    def on_waiter_done(w: "asyncio.Future[Any]") -> None:
        if w.cancelled():
            self.cancel()

    waiter.add_done_callback(on_waiter_done)
    self._add_done_callback(on_done)
    return (yield from waiter)


def _add_done_callback(self: "Future[Any]", callback: Callable[["Future[Any]"], object]) -> None:
    """Calls ``callback(future)`` once done, on the completing thread (at once when done); an
    exception from it is reported as unraisable, like asyncio's."""
    self._add_done_callback(lambda: callback(self))


setattr(Future, "__await__", _await)
setattr(Future, "add_done_callback", _add_done_callback)
setattr(Future, "__class_getitem__", classmethod(types.GenericAlias))


class SaveFutures(Generic[T]):
    """A save's two futures. Awaiting it, ``result()``, ``done()`` and callbacks follow
    ``durable``; ``cancel()`` cancels the save while it is not yet staged (nothing is written),
    and is refused after."""

    def __init__(self, staged: "Future[None]", durable: "Future[T]") -> None:
        #: Completes (with None) once the tensors are copied into ruda's memory and the write
        #: is queued: the trainer may change them again.
        self.staged = staged
        #: Completes with ``ruda.Saved`` once the checkpoint is durable on disk.
        self.durable = durable

    def __await__(self) -> Generator[Any, None, T]:
        return self.durable.__await__()

    def result(self, timeout: Optional[float] = None) -> T:
        """The durable outcome (``ruda.Saved``), waiting like ``Future.result``."""
        return self.durable.result(timeout)

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        return self.durable.exception(timeout)

    def done(self) -> bool:
        return self.durable.done()

    def cancel(self) -> bool:
        """Cancels the save unless it is staged already; returns whether it did."""
        return self.staged.cancel()

    def cancelled(self) -> bool:
        return self.staged.cancelled()

    def add_done_callback(self, callback: Callable[["SaveFutures[T]"], object]) -> None:
        """Calls ``callback(self)`` once the save is durable or failed."""
        self.durable._add_done_callback(lambda: callback(self))
