"""A plain training loop (no asyncio) that snapshots its gradients and saves checkpoints with
`.result()`, restores gradients from the latest one, and shows the progress bar.

    python3 examples/python/plain_loop.py [CHECKPOINT_DIR]
"""

from __future__ import annotations

import sys
import tempfile

import torch
from torch.utils.dlpack import from_dlpack

import ruda


def main(directory: str) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    gradients = ruda.Gradients(model)  # each parameter's .grad, read at each save
    with ruda.CheckpointManager(directory, keep=3, progress=True) as mgr:
        pending = []
        for step in range(1, 21):
            optimizer.zero_grad()
            model(torch.randn(16, 8)).pow(2).mean().backward()
            if step % 5 == 0:
                save = mgr.save(step, gradients)
                save.staged.result()  # copied: optimizer.step() may change them now
                pending.append(save)
            optimizer.step()
        for save in pending:
            print("saved", save.result().path)
        latest = mgr.load_latest().result()
        print(f"latest step {latest.step}: {len(latest.gradients)} gradients, steps kept "
              f"{mgr.steps()}")
        ruda.restore_gradients(model, latest.gradients)
        for name, p in model.named_parameters():
            assert p.grad is not None
            assert torch.equal(p.grad, from_dlpack(latest.gradients[name])), name
    print("gradients restored in place")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as scratch:
        main(sys.argv[1] if len(sys.argv) > 1 else scratch + "/checkpoints")
