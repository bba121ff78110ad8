"""A PyTorch trainer's whole state as one checkpoint: the model's ``state_dict`` (group
"weights"), its gradients ("gradients"), the optimizer's ``state_dict`` (its tensors in group
"optimizer", its plain values as JSON in section "torch.optimizer"), the random generators
(group "rng", section "python.rng": torch, CUDA, NumPy, Python's ``random``) and the step.
No pickle anywhere: a checkpoint is untrusted input."""

from __future__ import annotations

import json
import random
import struct
from typing import Any, Optional

from . import _ruda
from ._errors import Error, NotFound, invalid_argument
from ._inputs import Gradients, TrainingState
from ._ruda import Checkpoint

FORMAT = 1


def _encode(value: Any, where: str) -> Any:
    """A plain value as JSON: tuples marked so that they come back as tuples."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(v, where) for v in value]}
    if isinstance(value, list):
        return [_encode(v, where) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise invalid_argument(f"{where}: a dict with keys that are not str")
        return {k: _encode(v, f"{where}.{k}") for k, v in value.items()}
    raise invalid_argument(f"{where}: a {type(value).__name__} is no plain value ruda can store "
                           "without pickle")


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, dict):
        if set(value) == {"__tuple__"}:
            return tuple(_decode(v) for v in value["__tuple__"])
        return {k: _decode(v) for k, v in value.items()}
    return value


def training_state(model: Any, optimizer: Any = None, step: Optional[int] = None, *,
                   gradients: bool = True, rng: bool = True) -> TrainingState:
    """The whole state of a PyTorch run, for ``CheckpointManager.save`` or ``save_file``:
    tensors are borrowed now and copied by the save, so keep them unchanged until its
    ``staged`` future completes."""
    import torch

    groups: dict[str, Any] = {}
    sections: dict[str, bytes] = {}
    weights: dict[str, Any] = {}
    bools: list[str] = []
    for name, value in model.state_dict().items():
        tensor = value.detach()
        if tensor.dtype == torch.bool:  # DLPack 0.6 has no bool: its bytes as uint8
            tensor = tensor.view(torch.uint8)
            bools.append(name)
        weights[name] = tensor
    groups["weights"] = weights
    if gradients:
        groups["gradients"] = Gradients(model)
    if optimizer is not None:
        state = optimizer.state_dict()
        tensors: dict[str, Any] = {}
        plain: dict[str, Any] = {}
        for index, entries in state["state"].items():
            described: dict[str, Any] = {}
            for key, value in entries.items():
                if isinstance(value, torch.Tensor):
                    name = f"{index}.{key}"
                    tensors[name] = value.detach()
                    described[key] = {"__tensor__": name}
                else:
                    described[key] = _encode(value, f"optimizer state {index}.{key}")
            plain[str(index)] = described
        groups["optimizer"] = tensors
        sections["torch.optimizer"] = json.dumps({
            "type": type(optimizer).__name__, "state": plain,
            "param_groups": _encode(state["param_groups"], "param_groups")}).encode()
    if rng:
        generators: dict[str, Any] = {"torch": torch.get_rng_state()}
        initialized = torch.cuda.is_initialized()
        if torch.cuda.is_available() and initialized:
            for device, cuda_state in enumerate(torch.cuda.get_rng_state_all()):
                generators[f"cuda.{device}"] = cuda_state
        rng_json: dict[str, Any] = {"python": _encode(random.getstate(), "random")}
        try:
            import numpy

            kind, keys, pos, has_gauss, cached = numpy.random.get_state()
            generators["numpy.keys"] = keys
            rng_json["numpy"] = [kind, int(pos), int(has_gauss), float(cached)]
        except ImportError:
            pass
        groups["rng"] = generators
        sections["python.rng"] = json.dumps(rng_json).encode()
    if step is not None:
        sections["step"] = struct.pack("<Q", step)  # as the C++ put("step", std::uint64_t)
    sections["python.training"] = json.dumps({"format": FORMAT, "bool_weights": bools}).encode()
    return TrainingState(groups, sections)


def restore_training_state(checkpoint: Checkpoint, model: Any, optimizer: Any = None, *,
                           rng: bool = True) -> Optional[int]:
    """Restores what ``training_state`` saved into ``model`` (the same architecture; its
    tensors written in place, so an optimizer over them keeps them), its gradients, the
    ``optimizer`` (a fresh one of the same type over ``model``'s parameters) and, unless
    ``rng=False``, the random generators. Returns the step (None when the checkpoint records
    none). Everything is checked before anything changes."""
    import torch

    if "weights" not in checkpoint:
        raise NotFound("The checkpoint has no group weights", "not_found")
    weights = checkpoint["weights"]
    has_meta = "python.training" in checkpoint.raw_sections
    meta = checkpoint.section_json("python.training") if has_meta else {}
    bools = set(meta.get("bool_weights", []))
    state = model.state_dict()
    names = list(state.keys())
    targets = [(t.view(torch.uint8) if n in bools else t) for n, t in state.items()]
    _ruda._restore(names, targets, False, weights, True, True, True)
    named = list(model.named_parameters())
    param_names = [n for n, _ in named]
    params = [p for _, p in named]
    grads = checkpoint["gradients"] if "gradients" in checkpoint else None
    if grads is not None:
        grads.validate()
        _ruda._restore(param_names, params, False, grads, True, False, True)
    optimizer_state = _optimizer_state(checkpoint, optimizer) if optimizer is not None else None
    generators = _generators(checkpoint) if rng and "rng" in checkpoint else None

    _ruda._restore(names, targets, False, weights, True, True, False)
    if grads is not None:
        present = set(grads.keys())
        with torch.no_grad():
            for name, p in named:
                p.grad = torch.empty_like(p) if name in present else None
        kept = [i for i, name in enumerate(param_names) if name in present]
        _ruda._restore([param_names[i] for i in kept], [params[i] for i in kept], True, grads,
                       True, False, False)
    if optimizer_state is not None:
        optimizer.load_state_dict(optimizer_state)
    if generators is not None:
        generators()
    raw = checkpoint.raw_sections
    if "step" in raw and len(raw["step"]) == 8:
        return int(struct.unpack("<Q", raw["step"])[0])
    return checkpoint.step


def _optimizer_state(checkpoint: Checkpoint, optimizer: Any) -> dict[str, Any]:
    from torch.utils.dlpack import from_dlpack

    if "optimizer" not in checkpoint or "torch.optimizer" not in checkpoint.raw_sections:
        raise NotFound("The checkpoint has no optimizer state", "not_found")
    saved = checkpoint.section_json("torch.optimizer")
    if saved.get("type") != type(optimizer).__name__:
        raise Error(f"The checkpoint holds the state of a {saved.get('type')}, not of a "
                    f"{type(optimizer).__name__}", "optimizer_mismatch")
    tensors = checkpoint["optimizer"]
    groups = _decode(saved["param_groups"])
    current = optimizer.state_dict()["param_groups"]
    if [len(g["params"]) for g in groups] != [len(g["params"]) for g in current]:
        raise Error("The checkpoint's optimizer has other parameter groups than this one",
                    "optimizer_mismatch")
    state: dict[int, dict[str, Any]] = {}
    for index, entries in saved["state"].items():
        restored: dict[str, Any] = {}
        for key, value in entries.items():
            if isinstance(value, dict) and set(value) == {"__tensor__"}:
                if value["__tensor__"] not in tensors:
                    raise NotFound(f"The optimizer group lacks {value['__tensor__']}", "not_found")
                restored[key] = from_dlpack(tensors[value["__tensor__"]]).clone()
            else:
                restored[key] = _decode(value)
        state[int(index)] = restored
    return {"state": state, "param_groups": groups}


def _generators(checkpoint: Checkpoint) -> Any:
    import torch
    from torch.utils.dlpack import from_dlpack

    tensors = checkpoint["rng"]
    saved = checkpoint.section_json("python.rng") if "python.rng" in checkpoint.raw_sections else {}
    torch_state = from_dlpack(tensors["torch"]).clone() if "torch" in tensors else None
    cuda_states = [from_dlpack(tensors[k]).clone() for k in tensors.keys()
                   if k.startswith("cuda.")]
    python_state = _decode(saved["python"]) if "python" in saved else None
    numpy_state = None
    if "numpy" in saved and "numpy.keys" in tensors:
        import numpy

        kind, pos, has_gauss, cached = saved["numpy"]
        numpy_state = (kind, numpy.from_dlpack(tensors["numpy.keys"]).copy(), pos, has_gauss,
                       cached)

    def restore() -> None:
        if torch_state is not None:
            torch.set_rng_state(torch_state)
        if cuda_states and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(cuda_states)
        if python_state is not None:
            random.setstate(python_state)
        if numpy_state is not None:
            import numpy

            numpy.random.set_state(numpy_state)

    return restore
