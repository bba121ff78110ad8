"""A PyTorch MLP trained in an asyncio loop that checkpoints its whole state every 10 steps
with `await mgr.save(...)`, then a second run that resumes from the checkpoint and ends
bit-identical to the first (weights, optimizer state, step).

    python3 examples/python/asyncio_trainer.py [CHECKPOINT_DIR]
"""

from __future__ import annotations

import asyncio
import random
import sys
import tempfile

import numpy as np
import torch

import ruda

STEPS = 30
EVERY = 10


def make_run(seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    return model, torch.optim.Adam(model.parameters(), lr=1e-2)


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> float:
    x = torch.randn(64, 16)
    y = x.sum(dim=1, keepdim=True) * 0.1
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    return float(loss.item())


async def train(directory: str, start: int, stop: int, model: torch.nn.Module,
                optimizer: torch.optim.Optimizer) -> float:
    loss = float("nan")
    with ruda.CheckpointManager(directory, keep=2) as mgr:
        durable: list[ruda.SaveFutures[ruda.Saved]] = []
        for step in range(start + 1, stop + 1):
            loss = train_step(model, optimizer)
            if step % EVERY == 0:
                save = mgr.save(step, ruda.training_state(model, optimizer, step))
                await save.staged  # the tensors are copied: training goes on
                durable.append(save)
        for save in durable:
            saved = await save  # on disk
            print(f"step {saved.step:3d} durable: {saved.bytes} bytes")
    return loss


async def main(directory: str) -> None:
    model, optimizer = make_run(seed=0)
    await train(directory, 0, STEPS, model, optimizer)
    final = {k: v.clone() for k, v in model.state_dict().items()}
    final_optimizer = optimizer.state_dict()

    # A second process would do this: fresh objects, the newest checkpoint, the rest of the run.
    model, optimizer = make_run(seed=1)
    with ruda.CheckpointManager(directory) as mgr:
        ckpt = await mgr.load(STEPS - EVERY)
    step = ruda.restore_training_state(ckpt, model, optimizer)
    assert step == STEPS - EVERY
    print(f"resumed at step {step}")
    await train(directory + "-resumed", STEPS - EVERY, STEPS, model, optimizer)
    for name, value in model.state_dict().items():
        assert torch.equal(value, final[name]), f"{name} differs after the resume"
    for index, state in optimizer.state_dict()["state"].items():
        for key, value in state.items():
            assert torch.equal(value, final_optimizer["state"][index][key]), key
    print("resumed run is bit-identical: weights and optimizer state")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as scratch:
        asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else scratch + "/checkpoints"))
