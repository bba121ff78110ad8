"""CUDA tensors from Python, against the CUDA driver double: read after their producer's work
(DLPack's stream exchange on the legacy default stream), every float dtype bit for bit, mixed
with host tensors, saved and restored in place, device staging, cancellation that waits for
the copies out, and every refusal with its message."""

from __future__ import annotations

import ctypes
import os
import pathlib
import subprocess
import sys
import textwrap
import time
from typing import Iterator

import numpy as np
import pytest

import ruda
from fake_gpu import BFLOAT16, CudaArray, FakeGpu, fake_gpu

STAGING_GPU = 1  # the double's second GPU, opened with device staging


@pytest.fixture(scope="module")
def gpu() -> Iterator[FakeGpu]:
    found = fake_gpu()
    if found is None:
        pytest.skip("the CUDA driver double is not built (RUDA_FAKE_CUDA unset)")
    ruda.open_cuda_device(0, driver_library=found.path, staging_bytes=1 << 20,
                          piece_bytes=64 << 10)
    ruda.open_cuda_device(STAGING_GPU, driver_library=found.path,
                          device_staging_bytes=1 << 20)
    yield found
    found.lib.fake_cuda_reset()
    found.lib.fake_cuda_set_devices(2)


def float_values(dtype: str) -> np.ndarray:
    """Values whose bits matter: NaN payloads, both zeros, subnormals, infinities."""
    kind = np.dtype(dtype)
    bits = {2: np.uint16, 4: np.uint32, 8: np.uint64}[kind.itemsize]
    special = np.array([0.0, -0.0, np.inf, -np.inf, 1.5, -2.25], dtype=kind)
    raw = np.frombuffer(special.tobytes(), dtype=bits).copy()
    nan_payload = np.array([(1 << (8 * kind.itemsize - 1)) - 3], dtype=bits)  # a NaN, bits set
    subnormal = np.array([1], dtype=bits)
    return np.concatenate([raw, nan_payload, subnormal]).view(kind)


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_every_float_dtype_is_read_bit_for_bit(gpu: FakeGpu, dtype: str) -> None:
    values = float_values(dtype).reshape(2, 4)
    tensor = CudaArray(gpu, values)
    record = ruda.snapshot({"fc.weight": tensor}).result(timeout=60)
    out = np.from_dlpack(record["fc.weight"])
    assert out.shape == (2, 4)
    assert out.tobytes() == values.tobytes()
    assert tensor.streams == [1]  # the legacy default stream, never None (which syncs nothing)
    assert tensor.released == 1


def test_bfloat16_is_read_as_bf16(gpu: FakeGpu) -> None:
    bits = np.array([0x3F80, 0x7FC1, 0x8000, 0x0001], dtype=np.uint16)
    record = ruda.snapshot({"b": CudaArray(gpu, bits, code=BFLOAT16)}).result(timeout=60)
    assert record["b"].dtype == "bf16"
    assert record["b"].tobytes() == bits.tobytes()


def test_host_and_cuda_tensors_in_one_snapshot_in_id_order(gpu: FakeGpu) -> None:
    names = [f"layer{i}.weight" for i in range(6)]
    tensors = {n: (CudaArray(gpu, np.full(5, i, dtype=np.float32)) if i % 2 else
                   np.full(5, i, dtype=np.float32)) for i, n in enumerate(names)}
    record = ruda.snapshot(tensors).result(timeout=60)
    assert record.ids() == sorted(ruda.param_id(n) for n in names)
    for i, name in enumerate(names):
        assert np.from_dlpack(record[name]).tolist() == [float(i)] * 5


def test_the_read_waits_for_the_producers_work(gpu: FakeGpu) -> None:
    # The producer's last "kernel" is queued on the legacy default stream, which is held: the
    # snapshot must see what that kernel writes, not what the memory held before.
    tensor = CudaArray(gpu, np.zeros(256, dtype=np.float32))
    gpu.lib.fake_cuda_hold_stream(None, True)
    try:
        gpu.lib.fake_cuda_fill(None, tensor.address, 0x3F, 1024)
        future = ruda.snapshot({"g": tensor})
        assert not future._wait(0.2)
    finally:
        gpu.lib.fake_cuda_hold_stream(None, False)
    assert record_bytes(future) == b"\x3f" * 1024


def record_bytes(future: "ruda.Future[ruda.Record]") -> bytes:
    return future.result(timeout=60)["g"].tobytes()


def test_a_save_and_load_of_cuda_tensors(gpu: FakeGpu, tmp_path: pathlib.Path) -> None:
    weights = {f"w{i}": CudaArray(gpu, np.arange(300, dtype=np.float32) * i) for i in range(4)}
    with ruda.CheckpointManager(tmp_path / "ck") as mgr:
        mgr.save(3, {"weights": weights, "gradients": {"w0": np.ones(2)}}).result(timeout=60)
        ckpt = mgr.load(3).result(timeout=60)
    for i in range(4):
        assert np.from_dlpack(ckpt["weights"][f"w{i}"]).tolist() == (np.arange(300.0) * i).tolist()


def test_restore_writes_cuda_tensors_in_place(gpu: FakeGpu) -> None:
    source = {"a": np.arange(70000, dtype=np.float32), "b": np.full(3, -1.5, dtype=np.float64)}
    record = ruda.snapshot(source).result(timeout=60)
    targets = {"a": CudaArray(gpu, np.zeros(70000, dtype=np.float32)),
               "b": CudaArray(gpu, np.zeros(3, dtype=np.float64))}
    ruda.restore_tensors(targets, record)
    gpu.synchronize()  # the uploads are ordered before the legacy default stream's next work
    assert targets["a"].bytes() == source["a"].tobytes()  # through the 1 MiB ring, in pieces
    assert targets["b"].bytes() == source["b"].tobytes()
    assert targets["a"].streams == [1] and targets["a"].released == 1


def test_restore_checks_every_cuda_target_before_writing(gpu: FakeGpu) -> None:
    record = ruda.snapshot({"a": np.ones(4, dtype=np.float32),
                            "b": np.ones(4, dtype=np.float32)}).result(timeout=60)
    a = CudaArray(gpu, np.zeros(4, dtype=np.float32))
    b = CudaArray(gpu, np.zeros(5, dtype=np.float32))
    with pytest.raises(ruda.Error, match="Tensor b: the target's shape") as raised:
        ruda.restore_tensors({"a": a, "b": b}, record)
    assert raised.value.code == "shape_mismatch"
    gpu.synchronize()
    assert a.bytes() == bytes(16)


def test_device_staging_copies_at_the_snapshot_call(gpu: FakeGpu) -> None:
    tensor = CudaArray(gpu, np.full(64, 2.0, dtype=np.float32), ordinal=STAGING_GPU)
    before = ruda.cuda_device(STAGING_GPU).stats()["staged_tensors"]
    future = ruda.snapshot({"g": tensor})
    assert ruda.cuda_device(STAGING_GPU).stats()["staged_tensors"] == before + 1
    # The trainer overwrites its gradient at once, on its stream (the legacy default here):
    # ruda ordered that stream after the staging copy, so the snapshot keeps the old values.
    gpu.lib.fake_cuda_fill(None, tensor.address, 0, 256)
    assert np.from_dlpack(future.result(timeout=60)["g"]).tolist() == [2.0] * 64


def test_cancel_waits_for_the_copies_out_before_releasing(gpu: FakeGpu) -> None:
    tensors = {f"t{i}": CudaArray(gpu, np.ones(1 << 16, dtype=np.float32)) for i in range(3)}
    gpu.lib.fake_cuda_hold_copies(True)
    try:
        future = ruda.snapshot(tensors)
        assert not future._wait(0.2)
        assert future.cancel()
        with pytest.raises(BaseException) as raised:
            future.result(timeout=60)
        assert type(raised.value).__name__ == "CancelledError"
        # The copies already queued still target the tensors: none is released until they
        # land, however long they take (a release that came with the cancel would show by now).
        time.sleep(0.3)
        assert all(t.released == 0 for t in tensors.values())
    finally:
        gpu.lib.fake_cuda_hold_copies(False)
    deadline = time.monotonic() + 60  # for a machine far slower than any seen
    while any(t.released == 0 for t in tensors.values()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert all(t.released == 1 for t in tensors.values())


def test_a_failed_copy_names_the_tensor(gpu: FakeGpu) -> None:
    gpu.lib.fake_cuda_fail(b"cuMemcpyDtoHAsync_v2", 1, 700)
    try:
        named = r"parameter \d+ \(layer.bias\): cuda device 0"
        with pytest.raises(ruda.Error, match=named) as raised:
            ruda.snapshot({"layer.bias": CudaArray(gpu, np.ones(8, dtype=np.float32))}
                          ).result(timeout=60)
        assert raised.value.code == "read_failed"
    finally:
        gpu.lib.fake_cuda_reset()
        gpu.lib.fake_cuda_set_devices(2)


@pytest.mark.parametrize("make, code, words", [
    (lambda g: CudaArray(g, np.ones(3, dtype=np.int64)), "invalid_dtype",
     "it is i64 on CUDA device 0; ruda reads float tensors"),
    (lambda g: CudaArray(g, np.ones((2, 3), dtype=np.float32), strides=[1, 2]),
     "invalid_tensor", "not contiguous"),
    (lambda g: CudaArray(g, np.ones(3, dtype=np.float32), ordinal=5), "device_unavailable",
     "Tensor t: "),
])
def test_refusals_name_the_cuda_tensor(gpu: FakeGpu, make: object, code: str,
                                       words: str) -> None:
    with pytest.raises(ruda.Error) as raised:
        ruda.snapshot({"t": make(gpu)}).result(timeout=60)  # type: ignore[operator]
    assert raised.value.code == code
    assert "Tensor t" in str(raised.value) and words in str(raised.value)


def test_a_device_opens_once(gpu: FakeGpu) -> None:
    with pytest.raises(ruda.InvalidArgument, match="CUDA device 0 is already open"):
        ruda.open_cuda_device(0, driver_library=gpu.path)
    with pytest.raises(ruda.InvalidArgument):
        ruda.open_cuda_device(-1)
    device = ruda.cuda_device(0)
    assert device.ordinal == 0 and device.driver_version >= 10000 and device.name


def test_no_driver_is_device_unavailable(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ruda.Error, match="CUDA driver .*nowhere.so") as raised:
        ruda.open_cuda_device(7, driver_library=str(tmp_path / "nowhere.so"))
    assert raised.value.code == "device_unavailable"


@pytest.mark.skipif("asan" in os.environ.get("LD_PRELOAD", ""),
                    reason="clang 14's AddressSanitizer allocator is not fork-safe with threads "
                    "running (test_runtime.py says how a child hangs)")
def test_a_forked_child_refuses_cuda_tensors(gpu: FakeGpu, tmp_path: pathlib.Path) -> None:
    program = textwrap.dedent(f"""
        import os, sys, numpy as np, ruda
        sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r})
        from fake_gpu import CudaArray, FakeGpu
        gpu = FakeGpu({gpu.path!r})
        ruda.open_cuda_device(0, driver_library=gpu.path)
        ruda.snapshot({{"w": CudaArray(gpu, np.ones(4, dtype=np.float32))}}).result()
        pid = os.fork()
        if pid == 0:
            try:
                ruda.snapshot({{"w": CudaArray(gpu, np.ones(4, dtype=np.float32))}}).result()
                os._exit(1)
            except ruda.Error as e:
                os._exit(0 if e.code == "device_unavailable" and "forked" in str(e) else 2)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
        """)
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "child 0"


def test_memory_of_the_double_is_what_the_test_wrote(gpu: FakeGpu) -> None:
    tensor = CudaArray(gpu, np.arange(4, dtype=np.float32))
    assert ctypes.string_at(tensor.address, 16) == np.arange(4, dtype=np.float32).tobytes()
