"""The CUDA driver double (tests/backend/fake_cuda, whose "device memory" is host memory) seen
from Python, and a DLPack producer of tensors in it: what the CUDA tests hand ruda in place of
a GPU framework's tensors. The double's library is named by RUDA_FAKE_CUDA, which the build's
test sets."""

from __future__ import annotations

import ctypes
import os
from typing import Any, Optional

import numpy as np

KDL_CUDA = 2


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                            ("deleter", DELETER)]

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
_CAPSULE_NAME = ctypes.create_string_buffer(b"dltensor")

# DLPack's type of each NumPy dtype the tests use; bf16 is given as uint16 with code 4.
_CODES = {"float64": (2, 64), "float32": (2, 32), "float16": (2, 16), "int64": (0, 64),
          "uint8": (1, 8)}
BFLOAT16 = (4, 16)

# Every capsule's tensor, shape and deleter, kept for the process's life: as for a real
# producer, what a capsule points into must outlive the array object (the consumer may call
# the deleter after the array is gone), and a ctypes callback must not be freed while it runs.
_EXPORTED: list[Any] = []


class FakeGpu:
    """The double's controls: memory, streams, failures."""

    def __init__(self, path: str) -> None:
        lib = ctypes.CDLL(path)
        lib.fake_cuda_alloc.restype = ctypes.c_uint64
        lib.fake_cuda_alloc.argtypes = [ctypes.c_size_t]
        lib.fake_cuda_free.argtypes = [ctypes.c_uint64]
        lib.fake_cuda_fill.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int,
                                       ctypes.c_size_t]
        lib.fake_cuda_hold_stream.argtypes = [ctypes.c_void_p, ctypes.c_bool]
        lib.fake_cuda_hold_copies.argtypes = [ctypes.c_bool]
        lib.fake_cuda_fail.argtypes = [ctypes.c_char_p, ctypes.c_long, ctypes.c_int]
        lib.fake_cuda_calls.restype = ctypes.c_long
        lib.fake_cuda_calls.argtypes = [ctypes.c_char_p]
        lib.cuStreamSynchronize.argtypes = [ctypes.c_void_p]
        lib.cuCtxSetCurrent.argtypes = [ctypes.c_void_p]
        lib.fake_cuda_set_devices(2)  # a second GPU, opened with other options
        self.lib = lib
        self.path = path

    def alloc(self, nbytes: int) -> int:
        return int(self.lib.fake_cuda_alloc(nbytes))

    def synchronize(self) -> None:
        """Waits for the legacy default stream's work (ruda's uploads are ordered before it)."""
        context = ctypes.c_void_p()
        assert self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(context), 0) == 0
        assert self.lib.cuCtxSetCurrent(context) == 0
        assert self.lib.cuStreamSynchronize(None) == 0

    def calls(self, entry: str) -> int:
        return int(self.lib.fake_cuda_calls(entry.encode()))


def fake_gpu() -> Optional[FakeGpu]:
    path = os.environ.get("RUDA_FAKE_CUDA")
    return FakeGpu(path) if path and os.path.exists(path) else None


class CudaArray:
    """A tensor in the double's device memory, exported through DLPack as a kDLCUDA tensor the
    way a GPU framework does: ``__dlpack_device__``, then ``__dlpack__(stream=...)``, which
    records the stream it was asked for. ``released`` counts the deleter's calls."""

    def __init__(self, gpu: FakeGpu, values: np.ndarray, *, ordinal: int = 0,
                 code: Optional[tuple[int, int]] = None,
                 strides: Optional[list[int]] = None) -> None:
        self.gpu = gpu
        self.shape = list(values.shape)
        self.nbytes = values.nbytes
        self.address = gpu.alloc(max(values.nbytes, 1))
        ctypes.memmove(self.address, np.ascontiguousarray(values).ctypes.data, values.nbytes)
        self.ordinal = ordinal
        self.code = code or _CODES[values.dtype.name]
        self.strides = strides
        self.streams: list[Any] = []
        self.released = 0

    def __dlpack_device__(self) -> tuple[int, int]:
        return (KDL_CUDA, self.ordinal)

    def __dlpack__(self, stream: Any = None) -> Any:
        self.streams.append(stream)
        shape = (ctypes.c_int64 * len(self.shape))(*self.shape)
        strides = (ctypes.c_int64 * len(self.strides))(*self.strides) if self.strides else None
        managed = DLManagedTensor()
        t = managed.dl_tensor
        t.data = self.address
        t.device = DLDevice(KDL_CUDA, self.ordinal)
        t.ndim = len(self.shape)
        t.dtype = DLDataType(self.code[0], self.code[1], 1)
        t.shape = shape
        t.strides = strides
        t.byte_offset = 0

        counts = self._count_release

        def deleter(_: Any) -> None:
            counts()

        callback = DELETER(deleter)
        managed.deleter = callback
        _EXPORTED.append((managed, shape, strides, callback))
        return _capsule_new(ctypes.addressof(managed), ctypes.addressof(_CAPSULE_NAME), None)

    def _count_release(self) -> None:
        self.released += 1

    def bytes(self) -> bytes:
        return ctypes.string_at(self.address, self.nbytes)
