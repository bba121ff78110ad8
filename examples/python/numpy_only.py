"""NumPy alone: a model kept as arrays, its parameters and gradients saved as two groups of one
checkpoint file, loaded back without a copy (views of ruda's memory), and restored in place.

    python3 examples/python/numpy_only.py [FILE]
"""

from __future__ import annotations

import sys
import tempfile

import numpy as np

import ruda


def main(path: str) -> None:
    rng = np.random.default_rng(0)
    weights = {"w1": rng.standard_normal((4, 8)), "b1": np.zeros(8),
               "w2": rng.standard_normal((8, 1))}
    grads = {name: rng.standard_normal(w.shape).astype(np.float32) for name, w in weights.items()}
    saved = ruda.save_file(path, {"weights": weights, "gradients": grads},
                           sections={"note": b"numpy only"}).result()
    print(f"wrote {saved.path}: {saved.bytes} bytes")

    ckpt = ruda.load_file(path).result()
    w1 = np.from_dlpack(ckpt["weights"]["w1"])  # a read-only view, no copy
    assert np.array_equal(w1, weights["w1"])
    print("sections:", ckpt.sections)

    restored = {name: np.empty_like(w) for name, w in weights.items()}
    ruda.restore_tensors(restored, ckpt["weights"])
    for name, w in weights.items():
        assert np.array_equal(restored[name], w), name
    print("weights restored in place:", ", ".join(sorted(restored)))


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as scratch:
        main(sys.argv[1] if len(sys.argv) > 1 else scratch + "/model.ruda")
