"""Progress reports: a callable ``progress(done, total)`` (bytes), or ``True`` for a tqdm bar
when tqdm is installed."""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional, Union

Progress = Union[None, bool, Callable[[int, int], object]]


class _Bar:
    """One tqdm bar per operation: a report whose total changes, or that goes back, starts a
    new one (the manager's saves share one callback)."""

    def __init__(self, description: str) -> None:
        from tqdm import tqdm  # noqa: F401  (checked here, so that a missing tqdm fails early)

        self._description = description
        self._bar: Any = None
        self._lock = threading.Lock()

    def __call__(self, done: int, total: int) -> None:
        from tqdm import tqdm

        with self._lock:
            if self._bar is not None and (self._bar.total != total or done < self._bar.n):
                self._bar.close()
                self._bar = None
            if self._bar is None:
                self._bar = tqdm(total=total, unit="B", unit_scale=True,
                                 desc=self._description, leave=False)
            self._bar.update(done - self._bar.n)
            if done >= total:
                self._bar.close()
                self._bar = None


def progress_callback(progress: Progress,
                      description: str) -> Optional[Callable[[int, int], object]]:
    """The callable for the C++ core: None for none, a tqdm bar for True (none when tqdm is
    not installed), the callable itself otherwise."""
    if progress is None or progress is False:
        return None
    if progress is True:
        try:
            return _Bar(description)
        except ImportError:
            return None
    if not callable(progress):
        from ._errors import invalid_argument

        raise invalid_argument("progress is a callable progress(done, total), True or None")
    return progress
