#!/usr/bin/env python3
"""bench/python.py: ruda through `import ruda` on a torch model's gradients, against torch.save
and torch.load in the same run on the same tensors (bench/run puts its figures next to
`bench/torch_gradients --count`'s, the same work through the C++ API):

  save:    ruda.save_file(path, ruda.Gradients(model)) (snapshot + save + fsync)
           against torch.save of the .grad tensors + fsync;
  load:    ruda.load_file + ruda.restore_gradients(model, ...) (in place)
           against torch.load + p.grad.copy_ for each parameter;
  --loop:  an asyncio training loop that checkpoints every 10 steps: how long each
           checkpoint blocks the event loop (ruda: the save() call; the copy and the write
           run on ruda's threads while the loop's tasks go on), against torch.save inline;
  --gil:   a pure-Python counting loop on another thread, its rate while saves run in the
           background (on one writer thread, and on the default one per core) against its
           rate with none.

  python.py --count N --elements N [--reps N] [--loop] [--gil] [--dir DIR] --json PATH
"""
from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import os
import shutil
import statistics
import tempfile
import threading
import time

import torch

import ruda


class Grads(torch.nn.Module):
    """`count` parameters of `elements` f32, each with a gradient."""

    def __init__(self, count: int, elements: int) -> None:
        super().__init__()
        self.params = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.zeros(elements)) for _ in range(count)])
        for p in self.params:
            p.grad = torch.randn(elements)


def fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


LIBC = ctypes.CDLL("libc.so.6")


def timed(f) -> float:
    """Times f, after the allocator returns the memory it holds free to the system, as
    bench_util.hpp's seconds() does for the C++ program this is compared with."""
    LIBC.malloc_trim(0)
    start = time.perf_counter()
    f()
    return time.perf_counter() - start


def save_load(model: Grads, scratch: str, reps: int) -> dict[str, float]:
    ruda_path = os.path.join(scratch, "python-bench.ruda")
    torch_path = os.path.join(scratch, "python-bench.pt")
    grads = ruda.Gradients(model)
    params = dict(model.named_parameters())
    figures: dict[str, list[float]] = {k: [] for k in ("save_s", "torch_save_fsync_s", "load_s",
                                                       "torch_load_s", "snapshot_s")}
    for _ in range(reps):
        for path in (ruda_path, torch_path):
            if os.path.exists(path):
                os.remove(path)
        os.sync()
        # The save first after the sync, as the C++ program it is compared with does.
        figures["save_s"].append(timed(lambda: ruda.save_file(ruda_path, grads).result()))

        def torch_save() -> None:
            torch.save({n: p.grad for n, p in params.items()}, torch_path)
            fsync(torch_path)

        figures["torch_save_fsync_s"].append(timed(torch_save))

        def ruda_load() -> None:
            ruda.restore_gradients(model, ruda.load_file(ruda_path).result().gradients)

        figures["load_s"].append(timed(ruda_load))

        def torch_load() -> None:
            loaded = torch.load(torch_path)
            with torch.no_grad():
                for n, p in params.items():
                    p.grad.copy_(loaded[n])

        figures["torch_load_s"].append(timed(torch_load))
        figures["snapshot_s"].append(timed(lambda: ruda.snapshot(grads).result()))
    for path in (ruda_path, torch_path):
        os.remove(path)
    return {k: statistics.median(v) for k, v in figures.items()}


def training_loop(model: Grads, scratch: str, steps: int, work_size: int) -> dict[str, float]:
    """An asyncio training loop checkpointing its gradients every 10 steps: how long each
    checkpoint blocks the loop (ruda: the save() call, the copy and the write then running on
    ruda's threads, the save not awaited until the end; torch.save inline: the whole save),
    against the step's own time."""
    work = torch.randn(work_size, work_size)

    def step_compute() -> None:
        for _ in range(4):
            work.matmul(work)

    async def run(mode: str) -> list[float]:
        path = tempfile.mkdtemp(prefix=f"loop-{mode}-", dir=scratch)
        mgr = ruda.CheckpointManager(path, keep=2) if mode == "ruda" else None
        grads = ruda.Gradients(model)
        pending = []
        blocked = []
        for step in range(1, steps + 1):
            step_compute()
            await asyncio.sleep(0)  # the loop's other tasks
            if step % 10 == 0:
                began = time.perf_counter()
                if mgr is not None:
                    pending.append(mgr.save(step, grads))
                else:
                    torch.save({n: p.grad for n, p in model.named_parameters()}, path + "/t.pt")
                blocked.append(time.perf_counter() - began)
                if mgr is not None:
                    await pending[-1].staged  # before the next backward would write the grads
        for save in pending:
            await save
        if mgr is not None:
            mgr.close()
        shutil.rmtree(path)
        return blocked

    step_compute()
    step_s = statistics.median([timed(step_compute) for _ in range(5)])
    return {"step_s": step_s, "held_s": statistics.median(asyncio.run(run("ruda"))),
            "torch_held_s": statistics.median(asyncio.run(run("torch")))}


def gil(model: Grads, scratch: str, seconds: float) -> dict[str, float]:
    """Counts per second of a pure-Python loop on another thread, with and without saves run
    back to back. Judged with the saves on one writer thread: what is asked is whether a save
    holds the GIL, and on a machine of two cores a save on every core (the default, also
    measured) takes the loop's core whether it holds the GIL or not. The three take turns."""

    def count_for(duration: float, writers: int | None) -> float:
        counter = [0]
        stop = threading.Event()

        def spin() -> None:
            n = 0
            while not stop.is_set():
                n += 1
            counter[0] = n

        thread = threading.Thread(target=spin)
        thread.start()
        start = time.perf_counter()
        if writers is not None:
            grads = ruda.Gradients(model)
            while time.perf_counter() - start < duration:
                ruda.save_file(os.path.join(scratch, "gil.ruda"), grads,
                               writers=writers).result()
        else:
            time.sleep(duration)
        stop.set()
        thread.join()
        return counter[0] / (time.perf_counter() - start)

    count_for(0.2, None)
    runs: dict[str, list[float]] = {"counts_alone_per_s": [], "counts_during_save_per_s": [],
                                    "counts_during_save_all_writers_per_s": []}
    for _ in range(3):
        runs["counts_alone_per_s"].append(count_for(seconds, None))
        runs["counts_during_save_per_s"].append(count_for(seconds, 1))
        runs["counts_during_save_all_writers_per_s"].append(count_for(seconds, 0))
    os.remove(os.path.join(scratch, "gil.ruda"))
    return {k: statistics.median(v) for k, v in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--elements", type=int, required=True)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--loop", action="store_true")
    parser.add_argument("--loop-steps", type=int, default=30)
    parser.add_argument("--loop-work", type=int, default=768,
                        help="a step's compute: 4 products of square matrices of this size")
    parser.add_argument("--gil", action="store_true")
    parser.add_argument("--gil-seconds", type=float, default=2.0)
    parser.add_argument("--dir", default=".")
    parser.add_argument("--json", required=True)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = Grads(args.count, args.elements)
    figures = save_load(model, args.dir, args.reps)
    if args.loop:
        figures.update(training_loop(model, args.dir, args.loop_steps, args.loop_work))
    if args.gil:
        figures.update(gil(model, args.dir, args.gil_seconds))
    print("python.py:", json.dumps({k: round(v, 6) for k, v in figures.items()}))
    with open(args.json, "w") as f:
        json.dump(figures, f)


if __name__ == "__main__":
    main()
