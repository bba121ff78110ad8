"""Files cross between Python and C++ both ways: what Python writes, the C++ library loads
(ruda-inspect --verify loads every file completely); what C++ wrote, Python reads."""

from __future__ import annotations

import json
import os
import pathlib
import struct
import subprocess

import numpy as np
import pytest

import ruda

torch = pytest.importorskip("torch")  # the torch cases need Debian's python3-torch


def inspect(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    # Without a preloaded sanitizer runtime (the suite under ASan): the tool has its own.
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    return subprocess.run([tool, *args], capture_output=True, text=True, timeout=120, env=env)


def test_cpp_loads_what_python_wrote(tmp_path: pathlib.Path, ruda_inspect: str) -> None:
    with ruda.CheckpointManager(tmp_path, run_id="python-run") as mgr:
        mgr.save(7, {"gradients": {"fc1.weight": np.arange(6, dtype=np.float32).reshape(2, 3)},
                     "weights": {"fc1.weight": torch.ones(2, 3, dtype=torch.bfloat16),
                                 "steps": np.array([3], dtype=np.int64)}},
                 sections={"step": struct.pack("<Q", 7)}).result()
    verified = inspect(ruda_inspect, "--verify", str(tmp_path))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    listed = json.loads(inspect(ruda_inspect, "--json", str(tmp_path / "latest")).stdout)[0]
    assert listed["ok"] and listed["run_id"] == "python-run" and listed["step"] == 7
    entries = {(e["group"], e["name"]): e for e in listed["entries"]}
    weight = entries[("gradients", "fc1.weight")]
    assert weight["id"] == ruda.param_id("fc1.weight")  # the C++ from_name id
    assert weight["dtype"] == "f32" and weight["shape"] == [2, 3]
    assert entries[("weights", "fc1.weight")]["dtype"] == "bf16"
    assert entries[("weights", "steps")]["dtype"] == "i64"
    assert "u64 7" in listed["sections"][0]["value"]  # the C++ reading of put("step", 7)


def test_python_reads_what_cpp_wrote(golden_file: pathlib.Path) -> None:
    ckpt = ruda.load_file(golden_file).result()
    grads = ckpt.gradients
    assert grads.ids() == [7, 9, 11, 13]
    assert np.from_dlpack(grads[7]).tolist() == [0.5, -1.25, 3.0]
    half = np.from_dlpack(grads[9])
    assert half.dtype == np.float16 and half.shape == (2, 2)
    assert half.tobytes() == np.array([1.0, 2.0, -0.0, 65504.0], dtype=np.float16).tobytes()
    assert grads[11].shape == (0,)
    assert struct.unpack("<Q", ckpt.raw_sections["step"]) == (1234,)


def test_safetensors_written_by_cpp(tmp_path: pathlib.Path, ruda_inspect: str) -> None:
    weights = {"a.b": np.arange(4, dtype=np.float64)}
    ruda.save_file(tmp_path / "w.ruda", {"weights": weights}).result()
    out = inspect(ruda_inspect, "--export-safetensors", str(tmp_path / "w.safetensors"),
                  str(tmp_path / "w.ruda"))
    assert out.returncode == 0, out.stderr
    record = ruda.import_safetensors(tmp_path / "w.safetensors").result()
    assert record.keys() == ["a.b"]
    assert np.from_dlpack(record["a.b"]).tolist() == [0.0, 1.0, 2.0, 3.0]
