"""A PyTorch run's whole state in one checkpoint, resumed bit for bit: weights, buffers,
gradients, the optimizer's state, the random generators and the step."""

from __future__ import annotations

import pathlib
import random

import numpy as np
import pytest

import ruda

torch = pytest.importorskip("torch")  # the torch cases need Debian's python3-torch


def make_model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16),
                               torch.nn.ReLU(), torch.nn.Dropout(0.1), torch.nn.Linear(16, 2))


def train(model: torch.nn.Module, optimizer: torch.optim.Optimizer, steps: int) -> list[float]:
    losses = []
    for _ in range(steps):
        x = torch.randn(32, 8)
        y = torch.randn(32, 2) + float(np.random.rand()) + random.random()
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("optimizer_type", [torch.optim.Adam, torch.optim.SGD])
def test_a_resumed_run_matches_the_uninterrupted_one_bit_for_bit(
        tmp_path: pathlib.Path, optimizer_type: type) -> None:
    def optimizer_of(model: torch.nn.Module) -> torch.optim.Optimizer:
        if optimizer_type is torch.optim.SGD:
            return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        return torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.8, 0.99))

    torch.manual_seed(1), np.random.seed(2), random.seed(3)
    model = make_model()
    optimizer = optimizer_of(model)
    train(model, optimizer, 5)
    with ruda.CheckpointManager(tmp_path) as mgr:
        mgr.save(5, ruda.training_state(model, optimizer, 5)).result()
    expected = train(model, optimizer, 5)
    expected_weights = {k: v.clone() for k, v in model.state_dict().items()}

    torch.manual_seed(99), np.random.seed(99), random.seed(99)  # other generator states
    resumed = make_model()
    resumed_optimizer = optimizer_of(resumed)
    with ruda.CheckpointManager(tmp_path) as mgr:
        step = ruda.restore_training_state(mgr.load_latest().result(), resumed, resumed_optimizer)
    assert step == 5
    assert train(resumed, resumed_optimizer, 5) == expected
    for name, value in resumed.state_dict().items():
        assert torch.equal(value, expected_weights[name]), name


def test_the_optimizer_must_match(tmp_path: pathlib.Path) -> None:
    model = make_model()
    adam = torch.optim.Adam(model.parameters())
    train(model, adam, 1)
    ruda.save_file(tmp_path / "s.ruda", ruda.training_state(model, adam)).result()
    ckpt = ruda.load_file(tmp_path / "s.ruda").result()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ruda.Error, match="state of a Adam, not of a SGD") as raised:
        ruda.restore_training_state(ckpt, make_model(), torch.optim.SGD(model.parameters(), lr=1))
    assert raised.value.code == "optimizer_mismatch"
    other = torch.nn.Sequential(torch.nn.Linear(8, 3))
    with pytest.raises(ruda.Error) as raised:
        ruda.restore_training_state(ckpt, other)
    assert raised.value.code in ("not_found", "unknown_parameter")
    for name, value in model.state_dict().items():
        assert torch.equal(value, before[name])


def test_gradients_from_a_module_and_back(tmp_path: pathlib.Path) -> None:
    model = make_model()
    model(torch.randn(4, 8)).sum().backward()
    grads = ruda.Gradients(model)
    assert len(grads) == 6
    record = ruda.snapshot(grads).result()
    assert record.keys() == sorted(record.keys(), key=ruda.param_id)
    expected = {n: p.grad.clone() for n, p in model.named_parameters()}
    fresh = make_model()
    fresh[0].weight.grad = torch.zeros_like(fresh[0].weight)
    ruda.restore_gradients(fresh, record)
    for name, p in fresh.named_parameters():
        assert p.grad is not None and torch.equal(p.grad, expected[name]), name
    wrong = torch.nn.Sequential(torch.nn.Linear(8, 17))
    with pytest.raises(ruda.Error) as raised:
        ruda.restore_gradients(wrong, record)
    assert raised.value.code == "unknown_parameter"
    shaped = {"0.weight": torch.zeros(3, 3)}
    sub = ruda.snapshot({"0.weight": expected["0.weight"]}).result()
    with pytest.raises(ruda.Error, match="shape") as raised:
        ruda.restore_gradients(shaped, sub)
    assert raised.value.code == "shape_mismatch"
    assert torch.equal(shaped["0.weight"], torch.zeros(3, 3))


def test_restore_into_numpy_arrays_in_place() -> None:
    record = ruda.snapshot({"a": np.arange(3.0), "b": np.ones(2, dtype=np.float32)}).result()
    targets = {"a": np.zeros(3), "b": np.zeros(2, dtype=np.float32)}
    ruda.restore_gradients(targets, record)
    assert targets["a"].tolist() == [0.0, 1.0, 2.0] and targets["b"].tolist() == [1.0, 1.0]
    with pytest.raises(ruda.Error, match="the target is f64, the record's f32"):
        ruda.restore_tensors({"b": np.zeros(2)}, record)
