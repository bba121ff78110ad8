"""ruda's exceptions: one base class, ``ruda.Error``, with ``.code`` naming what failed (the
C++ ``ruda::errc`` enumerator, or one of the few codes only the Python module has), and
subclasses where Python has a natural one."""

from __future__ import annotations

from . import _ruda


class Error(Exception):
    """A ruda failure: ``.code`` names it ("not_found", "checksum_mismatch"...), the message
    says what was wrong and names the tensor, file or step involved."""

    code: str

    def __init__(self, message: str = "", code: str = "io_error") -> None:
        super().__init__(message)
        self.code = code


class NotFound(Error, FileNotFoundError):
    """``not_found``: no such checkpoint, step, group or section."""


class TimedOut(Error, TimeoutError):
    """``timed_out``: ``result(timeout=...)`` ran out of time (the operation goes on)."""


class InvalidArgument(Error, TypeError, ValueError):
    """``invalid_argument``: a call's argument is of the wrong type or value."""


class UnsafeSection(Error):
    """``unsafe_section``: a load met pickled sections without ``allow_pickle=True``."""


class Closed(Error):
    """``closed``: the checkpoint manager was closed."""


#: The codes only the Python module has, next to the C++ ones (``ruda.error_codes``).
PYTHON_CODES = ("invalid_argument", "unsafe_section", "closed")

_BY_CODE: dict[str, type[Error]] = {
    "not_found": NotFound,
    "timed_out": TimedOut,
    "invalid_argument": InvalidArgument,
    "unsafe_section": UnsafeSection,
    "closed": Closed,
}

_ruda._register_errors(Error, _BY_CODE)

#: Every code a ruda.Error may carry.
error_codes: tuple[str, ...] = tuple(_ruda._error_codes) + PYTHON_CODES


def invalid_argument(message: str) -> InvalidArgument:
    """The exception for a bad argument, its code set."""
    return InvalidArgument(message, "invalid_argument")
