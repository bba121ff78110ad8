#!/usr/bin/env python3
"""bench/cuda_torch_peer.py: what PyTorch does with the same gradients on the same GPU, for
bench/cuda's table: `.cpu()` of every large tensor, a non-blocking `copy_` into reused pinned
tensors, and `.cpu()` of every small one.

  cuda_torch_peer.py [--tensors 64] [--mib-per-tensor 64] [--small 20000] [--small-bytes 1024]
                     [--reps 3] --json PATH

Writes {"available": 0} when torch has no CUDA device.
"""
import argparse
import json
import statistics
import time


def timed(reps, run):
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tensors", type=int, default=64)
    parser.add_argument("--mib-per-tensor", type=int, default=64)
    parser.add_argument("--small", type=int, default=20000)
    parser.add_argument("--small-bytes", type=int, default=1024)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json", required=True)
    args = parser.parse_args()
    out = {"available": 0}
    try:
        import torch
        available = torch.cuda.is_available()
    except ImportError:
        available = False
    if available:
        out["available"] = 1
        elements = (args.mib_per_tensor << 20) // 4
        large = [torch.full((elements,), float(i), device="cuda") for i in range(args.tensors)]
        torch.cuda.synchronize()

        def cpu_all():
            return [t.cpu() for t in large]
        out["cpu_s"] = timed(args.reps, cpu_all)

        pinned = [torch.empty(elements, pin_memory=True) for _ in range(args.tensors)]

        def copy_pinned():
            for target, source in zip(pinned, large):
                target.copy_(source, non_blocking=True)
            torch.cuda.synchronize()
        copy_pinned()
        out["pinned_copy_s"] = timed(args.reps, copy_pinned)
        del large, pinned

        small = [torch.full((args.small_bytes // 4,), 1.0, device="cuda") for _ in range(args.small)]
        torch.cuda.synchronize()
        out["small_cpu_us"] = timed(args.reps, lambda: [t.cpu() for t in small]) / args.small * 1e6
    with open(args.json, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
