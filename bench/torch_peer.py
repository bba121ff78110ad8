#!/usr/bin/python3
"""bench/torch_peer.py: what a Python trainer does without ruda, with Debian's python3-torch,
on the same tensors as bench/checkpoint (tensor i holds i + k * 0.001 at index k, made in f32):
  snapshot: clone() of every tensor;
  save: torch.save of a dict of the tensors keyed by name (as a state dict is saved), alone
  and followed by an fsync of the file (torch.save does not sync);
  load: torch.load of that file.
Each save starts on a quiet disk, as in bench/checkpoint. Figures are medians; --json writes
them for bench/run.

  torch_peer.py [--tensors N] [--elements N] [--dtype f32|bf16] [--reps N] [--dir DIR]
                [--json PATH]
"""
import argparse
import ctypes
import json
import os
import statistics
import time

import torch


LIBC = ctypes.CDLL("libc.so.6")


def timed(f):
    """Times f, after the allocator returns the memory it holds free to the system, as
    bench_util.hpp's seconds() does for the C++ programs."""
    LIBC.malloc_trim(0)
    start = time.perf_counter()
    result = f()
    return time.perf_counter() - start, result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tensors", type=int, default=64)
    parser.add_argument("--elements", type=int, default=1 << 20)
    parser.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--dir", default=".")
    parser.add_argument("--json")
    args = parser.parse_args()
    dtype = torch.float32 if args.dtype == "f32" else torch.bfloat16

    k = torch.arange(args.elements, dtype=torch.float32) * 1e-3
    grads = {f"p{i + 1}": (k + float(i)).to(dtype) for i in range(args.tensors)}
    path = os.path.join(args.dir, "torch-py.pt")

    clone, save, durable, load = [], [], [], []
    for _ in range(args.reps):
        seconds, copies = timed(lambda: {name: g.clone() for name, g in grads.items()})
        clone.append(seconds)
        del copies
        if os.path.exists(path):
            os.remove(path)
        os.sync()
        with open(path, "wb") as f:
            seconds, _ = timed(lambda: torch.save(grads, f))
            save.append(seconds)
            seconds, _ = timed(lambda: (f.flush(), os.fsync(f.fileno())))
            durable.append(save[-1] + seconds)
        seconds, loaded = timed(lambda: torch.load(path))
        load.append(seconds)
        last = f"p{args.tensors}"
        if len(loaded) != len(grads) or not torch.equal(loaded[last], grads[last]):
            raise SystemExit("torch.load gave back other tensors")
        del loaded
    file_bytes = os.path.getsize(path)
    os.remove(path)

    figures = {
        "clone_s": statistics.median(clone),
        "save_s": statistics.median(save),
        "save_fsync_s": statistics.median(durable),
        "load_s": statistics.median(load),
        "file_bytes": file_bytes,
    }
    print(f"torch_peer.py (torch {torch.__version__}): "
          + ", ".join(f"{name} {value:.6g}" for name, value in figures.items())
          + f", median of {args.reps}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)


if __name__ == "__main__":
    main()
