#!/usr/bin/env python3
"""Reads the safetensors file ruda-inspect exports with numpy alone (no safetensors package)
and checks every value bit for bit, the header, the tensor names (parameter names where the
checkpoint has them, as a state dict has) and the metadata that keeps original dtypes and ids.

    safetensors_numpy.py FIXTURE RUDA_INSPECT

FIXTURE writes the checkpoint (see safetensors_fixture.cpp, whose value rule is repeated in
`expected`); RUDA_INSPECT exports it. Exits non-zero, saying what differs, on any mismatch.
"""
import json
import math
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

QUIET_NAN_BITS = {"F64": 0x7FF8000000000000, "F32": 0x7FC00000, "F16": 0x7E00, "BF16": 0x7FC0}
BITS_TYPE = {"F64": np.uint64, "F32": np.uint32, "F16": np.uint16, "BF16": np.uint16}
TENSORS = {  # tensor name: (stored dtype, shape, original dtype when it differs, parameter id)
    "fc1.weight": ("F64", [4, 6], None, 11),
    "12": ("F32", [24], None, 12),
    "13": ("F16", [2, 3, 4], None, 13),
    "14": ("BF16", [24], None, 14),
    "fc2.weight": ("F32", [3, 8], "flex32", 15),
    "fc2.bias": ("F16", [24], "f32", 16),
    "17": ("F32", [0], None, 17),
    "18": ("F32", [], None, 18),
}


def value(i, k):
    if i == 0:
        return -0.0
    if i == 1:
        return math.inf
    if i == 2:
        return math.nan
    return (i - 7) * 0.375 + k / 4


def expected_bits(dtype, k, count):
    """The bit patterns ruda must have written for parameter k."""
    values = np.array([value(i, k) for i in range(count)], dtype=np.float64)
    if dtype == "F64":
        bits = values.view(np.uint64).copy()
    elif dtype == "F32":
        bits = values.astype(np.float32).view(np.uint32).copy()
    elif dtype == "F16":
        bits = values.astype(np.float16).view(np.uint16).copy()
    else:  # BF16: the upper half of the f32, exact for these values
        bits = (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    if count > 2:
        bits[2] = QUIET_NAN_BITS[dtype]
    return bits


def main():
    fixture, inspect = sys.argv[1], sys.argv[2]
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = Path(tmp) / "grads.ruda"
        exported = Path(tmp) / "grads.safetensors"
        subprocess.run([fixture, str(checkpoint)], check=True)
        run = subprocess.run([inspect, "--export-safetensors", str(exported), str(checkpoint)],
                             check=True, capture_output=True, text=True)
        print(run.stdout.strip())
        raw = exported.read_bytes()

    (header_size,) = struct.unpack_from("<Q", raw, 0)
    if (8 + header_size) % 8 != 0:
        failures.append(f"data starts at {8 + header_size}, not 8-byte aligned")
    header = json.loads(raw[8:8 + header_size].decode("utf-8"))
    data = raw[8 + header_size:]
    metadata = header.pop("__metadata__", {})
    if metadata.get("producer") != "ruda":
        failures.append(f"producer is {metadata.get('producer')!r}")
    if sorted(header) != sorted(TENSORS):
        failures.append(f"tensors {sorted(header)}, expected {sorted(TENSORS)}")

    covered = 0
    for name, info in sorted(header.items(), key=lambda item: item[1]["data_offsets"]):
        dtype, shape, original, param = TENSORS.get(name, (None, None, None, None))
        begin, end = info["data_offsets"]
        if begin != covered:
            failures.append(f"{name}: starts at {begin}, expected {covered}")
        covered = end
        if info["dtype"] != dtype or info["shape"] != shape:
            failures.append(f"{name}: {info['dtype']} {info['shape']}, expected {dtype} {shape}")
            continue
        if metadata.get(f"ruda.original_dtype.{name}") != original:
            failures.append(f"{name}: original dtype {metadata.get(f'ruda.original_dtype.{name}')!r}, "
                            f"expected {original!r}")
        # A named tensor's id is in the metadata (these ids are not the names' hashes).
        named_id = metadata.get(f"ruda.id.{name}")
        if name.isdigit() == (named_id is not None) or int(named_id or name) != param:
            failures.append(f"{name}: id {named_id or name}, expected {param}")
        count = int(np.prod(shape, dtype=np.int64))
        got = np.frombuffer(data[begin:end], dtype=BITS_TYPE[dtype])
        want = expected_bits(dtype, param, count)
        if got.shape != want.shape or not np.array_equal(got, want):
            bad = [i for i in range(min(len(got), len(want))) if got[i] != want[i]][:5]
            failures.append(f"{name}: {len(got)} values, expected {len(want)}; first differences at {bad}")
        elif dtype != "BF16":  # numpy reads the other three as numbers too
            numbers = np.frombuffer(data[begin:end], dtype={"F64": "<f8", "F32": "<f4", "F16": "<f2"}[dtype])
            if count > 3 and numbers.reshape(shape).flat[3] != value(3, param):
                failures.append(f"{name}: element 3 is {numbers.flat[3]}")
    if covered != len(data):
        failures.append(f"the tensors cover {covered} of {len(data)} data bytes")

    for failure in failures:
        print("FAIL:", failure)
    print(f"{len(header)} tensors, {len(data)} data bytes checked: "
          f"{'ok' if not failures else f'{len(failures)} failures'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
