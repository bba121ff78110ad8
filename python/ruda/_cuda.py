"""CUDA tensors: ruda reads them on the GPU's own copy streams into pinned host memory, after
the producer's work (DLPack's stream exchange), and restores into them in place."""

from __future__ import annotations

from typing import Any, Optional

from . import _ruda
from ._errors import invalid_argument
from ._ruda import CudaDevice


def _ordinal(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise invalid_argument(f"a CUDA device ordinal is an int >= 0, not {value!r}")
    return value


def open_cuda_device(ordinal: int = 0, *, driver_library: Optional[str] = None,
                     piece_bytes: Optional[int] = None, staging_bytes: Optional[int] = None,
                     pinned_records: Optional[bool] = None,
                     max_cached_record_bytes: Optional[int] = None,
                     device_staging_bytes: Optional[int] = None) -> CudaDevice:
    """Opens GPU ``ordinal`` with these options (None: ruda's default) for every later snapshot,
    save and restore of its tensors; without this call, the first of them opens it with the
    defaults. Once per GPU and process: a GPU already open is ``ruda.InvalidArgument``.

    ``driver_library``: the CUDA driver to ``dlopen`` ("libcuda.so.1"). ``piece_bytes``: the
    largest copy issued at once (8 MiB). ``staging_bytes``: the pinned ring uploads go through
    (64 MiB). ``pinned_records``: reads land in pinned buffers kept from one snapshot to the
    next (True). ``max_cached_record_bytes``: the most pinned bytes kept free (16 GiB).
    ``device_staging_bytes``: a GPU buffer a snapshot copies the tensors into when it is
    taken, so that the trainer may overwrite them at once (0: none). No driver or no such GPU
    is ``ruda.Error`` with code ``device_unavailable``."""
    defaults = _ruda._cuda_defaults

    def pick(value: Any, key: str) -> Any:
        return defaults[key] if value is None else value

    return _ruda._open_cuda_device(
        _ordinal(ordinal), str(pick(driver_library, "driver_library")),
        int(pick(piece_bytes, "piece_bytes")), int(pick(staging_bytes, "staging_bytes")),
        bool(pick(pinned_records, "pinned_records")),
        int(pick(max_cached_record_bytes, "max_cached_record_bytes")),
        int(pick(device_staging_bytes, "device_staging_bytes")))


def cuda_device(ordinal: int = 0) -> CudaDevice:
    """GPU ``ordinal`` as ruda uses it (opened now with the defaults unless it is open): its
    name, driver version and ``stats()``."""
    return _ruda._cuda_device(_ordinal(ordinal))
