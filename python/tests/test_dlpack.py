"""Tensors in through DLPack and out again: every dtype bit for bit, memory shared on the
way out, and each refusal with a message naming the tensor."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import ruda

torch = pytest.importorskip("torch")  # the torch cases need Debian's python3-torch


def special_values(dtype: np.dtype) -> np.ndarray:
    """NaN payloads, both zeros, subnormals, the extremes: as raw bits where they matter."""
    if dtype == np.float32:
        bits = np.array([0x7FC00001, 0xFFA00123, 0x80000000, 0x00000000, 0x00000001,
                         0x807FFFFF, 0x7F800000, 0xFF7FFFFF], dtype=np.uint32)
        return bits.view(np.float32)
    if dtype == np.float64:
        bits = np.array([0x7FF8000000000001, 0xFFF4000000000ABC, 0x8000000000000000, 0,
                         1, 0x800FFFFFFFFFFFFF, 0x7FF0000000000000], dtype=np.uint64)
        return bits.view(np.float64)
    if dtype == np.float16:
        bits = np.array([0x7E01, 0xFD01, 0x8000, 0x0000, 0x0001, 0x83FF, 0x7BFF], dtype=np.uint16)
        return bits.view(np.float16)
    info = np.iinfo(dtype)
    return np.array([info.min, info.max, 0, -1 if info.min < 0 else 1, 7], dtype=dtype)


NUMPY_DTYPES = [np.float64, np.float32, np.float16, np.int64, np.int32, np.int16, np.int8,
                np.uint64, np.uint32, np.uint16, np.uint8]
RUDA_NAMES = {np.float64: "f64", np.float32: "f32", np.float16: "f16", np.int64: "i64",
              np.int32: "i32", np.int16: "i16", np.int8: "i8", np.uint64: "u64",
              np.uint32: "u32", np.uint16: "u16", np.uint8: "u8"}


@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=lambda d: np.dtype(d).name)
def test_every_numpy_dtype_round_trips_bit_for_bit(dtype: type) -> None:
    values = special_values(np.dtype(dtype)).reshape(1, -1)
    record = ruda.snapshot({"t": values}).result()
    tensor = record["t"]
    assert tensor.dtype == RUDA_NAMES[dtype]
    assert tensor.shape == values.shape
    out = np.from_dlpack(tensor)
    assert out.dtype == values.dtype
    assert out.tobytes() == values.tobytes()
    assert tensor.tobytes() == values.tobytes()


def test_bf16_round_trips_through_torch_bit_for_bit() -> None:
    raw = np.array([0x7FC1, 0xFF81, 0x8000, 0x0000, 0x0001, 0x807F, 0x7F7F], dtype=np.uint16)
    bits = torch.from_numpy(raw.view(np.int16))
    values = bits.view(torch.bfloat16)
    record = ruda.snapshot({"t": values}).result()
    assert record["t"].dtype == "bf16"
    back = torch.from_dlpack(record["t"])
    assert back.dtype == torch.bfloat16
    assert torch.equal(back.view(torch.int16), bits)


def test_a_snapshot_is_a_copy_taken_when_it_completes() -> None:
    source = np.arange(8, dtype=np.float32)
    record = ruda.snapshot({"t": source}).result()
    source[:] = -1
    assert np.array_equal(np.from_dlpack(record["t"]), np.arange(8, dtype=np.float32))


def test_zero_dimensional_and_empty_tensors() -> None:
    record = ruda.snapshot({"scalar": torch.tensor(2.5), "empty": np.zeros((0, 3))}).result()
    assert record["scalar"].shape == ()
    assert torch.from_dlpack(record["scalar"]).item() == 2.5
    assert record["empty"].shape == (0, 3)
    assert np.from_dlpack(record["empty"]).shape == (0, 3)


def test_records_share_memory_with_their_views_and_outlive_the_record_object() -> None:
    record = ruda.snapshot({"w": np.arange(4, dtype=np.float64)}).result()
    first = np.from_dlpack(record["w"])
    second = np.from_dlpack(record["w"])
    assert first.ctypes.data == second.ctypes.data  # no copy: the record's own bytes
    view = torch.from_dlpack(record["w"])
    assert view.data_ptr() == first.ctypes.data
    del record, first, second
    gc.collect()
    assert view.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_a_copy_is_exported_on_request() -> None:
    record = ruda.snapshot({"w": np.arange(4, dtype=np.float64)}).result()
    shared = np.from_dlpack(record["w"])
    copied = torch.from_dlpack(record["w"].__dlpack__(copy=True))
    assert copied.data_ptr() != shared.ctypes.data
    assert copied.tolist() == shared.tolist()


def test_unconsumed_capsules_free_their_record() -> None:
    record = ruda.snapshot({"w": np.ones(16)}).result()
    for _ in range(1000):
        record["w"].__dlpack__()
    assert record["w"].__dlpack_device__() == (1, 0)


def test_records_index_by_name_and_id() -> None:
    record = ruda.snapshot({"fc1.weight": np.ones(2), "fc1.bias": np.zeros(1)}).result()
    assert sorted(record.keys()) == ["fc1.bias", "fc1.weight"]
    assert record.ids() == sorted(ruda.param_id(n) for n in ("fc1.weight", "fc1.bias"))
    weight = record[ruda.param_id("fc1.weight")]
    assert weight.name == "fc1.weight"
    assert "fc1.bias" in record and "fc2.bias" not in record
    with pytest.raises(KeyError):
        record["fc2.bias"]
    assert len(record) == 2 and record.nbytes == 24


def test_param_ids_are_the_cpp_ids_of_names() -> None:
    # XXH3-64 of "fc1.weight", as ruda::param_id::from_name gives it (tests/optim).
    assert ruda.param_id("") == 0x2D06800538D394C2


@pytest.mark.parametrize("value, code, words", [
    ([1.0, 2.0], "invalid_tensor", "a list has no __dlpack__"),
    (np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2], "invalid_tensor", "not contiguous"),
    (np.arange(12, dtype=np.float32).reshape(3, 4).T, "invalid_tensor", "not contiguous"),
    (np.ones(3, dtype=np.complex64), "invalid_dtype", "no dtype ruda has"),
    (np.ones(3, dtype=bool), "invalid_tensor", "__dlpack__ refused"),
    (torch.ones(4)[::2], "invalid_tensor", "not contiguous"),
    (torch.ones(2, dtype=torch.complex64), "invalid_dtype", "torch.complex64 is no dtype"),
    (torch.ones(2).to_sparse(), "invalid_tensor", "torch.sparse_coo, not a dense"),
    (torch.empty(2, device="meta"), "unsupported_device", "meta"),
])
def test_refusals_name_the_tensor(value: object, code: str, words: str) -> None:
    with pytest.raises(ruda.Error) as raised:
        ruda.snapshot({"layer.weight": value})
    assert raised.value.code == code
    assert "Tensor layer.weight" in str(raised.value)
    assert words in str(raised.value)


def test_torch_tensors_are_read_directly_parameters_and_bools_included() -> None:
    layer = torch.nn.Linear(3, 2)
    flags = torch.tensor([True, False, True])
    record = ruda.snapshot({**dict(layer.named_parameters()), "flags": flags}).result()
    assert torch.equal(torch.from_dlpack(record["weight"]), layer.weight.detach())
    assert record["flags"].dtype == "bool(native)"
    assert torch.from_dlpack(record["flags"]).tolist() == [1, 0, 1]  # bools go out as uint8
    # A subclass goes through DLPack like any other producer.
    class Sub(torch.Tensor):
        pass

    sub = torch.arange(3.0).as_subclass(Sub)
    assert np.from_dlpack(ruda.snapshot({"s": sub}).result()["s"]).tolist() == [0.0, 1.0, 2.0]


def test_negative_strides_are_refused() -> None:
    with pytest.raises(ruda.Error, match="Tensor rev: .*"):
        ruda.snapshot({"rev": np.arange(4.0)[::-1]})


def test_a_name_given_twice_is_refused() -> None:
    with pytest.raises(ruda.Error, match="Tensor a is given twice") as raised:
        ruda.snapshot(ruda.Gradients([("a", np.ones(1)), ("a", np.ones(1))]))
    assert raised.value.code == "duplicate_param_id"


def test_a_tensor_on_a_device_other_than_cuda_is_refused_by_device() -> None:
    class OnRocm:
        def __dlpack_device__(self) -> tuple[int, int]:
            return (10, 1)

        def __dlpack__(self, stream: object = None) -> object:
            raise AssertionError("not to be called")

    with pytest.raises(ruda.Error, match="Tensor g: it is on ROCm device 1") as raised:
        ruda.snapshot({"g": OnRocm()})
    assert raised.value.code == "unsupported_device"


def test_a_producer_that_raises_is_named() -> None:
    class Broken:
        def __dlpack__(self, stream: object = None) -> object:
            raise BufferError("cannot export")

    with pytest.raises(ruda.Error, match="Tensor b: its __dlpack__ refused: BufferError"):
        ruda.snapshot({"b": Broken()})


def test_quantized_entries_are_not_exported(golden_file: object) -> None:
    checkpoint = ruda.load_file(golden_file).result()
    with pytest.raises(ruda.Error, match="DLPack cannot describe") as raised:
        checkpoint.gradients[13].__dlpack__()
    assert raised.value.code == "invalid_dtype"
    assert checkpoint.gradients[13].tobytes() == bytes([1, 2, 3, 4, 0, 0, 128, 63])
