"""What saves and snapshots accept, put into the shape the C++ core takes: groups of
``(name, tensor)`` pairs (or records) and sections of bytes."""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterable, Mapping
from typing import Any, Union

from ._errors import invalid_argument
from ._ruda import Record

#: The section that lists the pickled sections, which loads refuse unless allowed.
PICKLED_SECTIONS = "python.pickled"


def _is_module(value: object) -> bool:
    return hasattr(value, "named_parameters") and hasattr(value, "state_dict")


class Gradients:
    """A model's gradients by parameter name: from a mapping ``{name: tensor}``, pairs, or a
    ``torch.nn.Module`` (its parameters as they are now, each one's ``.grad`` as it is at each
    snapshot, those that are None left out). Any tensor with ``__dlpack__`` on the host: torch,
    NumPy, JAX, CuPy. Ids are ``ruda.param_id(name)``, as the C++ ``from_module`` derives
    them, so checkpoints cross between the two."""

    def __init__(self, tensors: Union[Mapping[str, Any], Iterable[tuple[str, Any]], Any]) -> None:
        self._module: Any = tensors if _is_module(tensors) else None
        if self._module is not None:
            # Listed once: named_parameters() costs microseconds per parameter.
            self.parameters: list[tuple[str, Any]] = list(self._module.named_parameters())
            self._names = [name for name, _ in self.parameters]
            self._tensors = [p for _, p in self.parameters]
        else:
            items = tensors.items() if isinstance(tensors, Mapping) else tensors
            try:
                pairs = [(str(name), tensor) for name, tensor in items]
                self._names = [name for name, _ in pairs]
                self._tensors = [tensor for _, tensor in pairs]
            except (TypeError, ValueError):
                raise invalid_argument(
                    "Gradients takes a mapping {name: tensor}, (name, tensor) pairs or a "
                    f"torch.nn.Module, not a {type(tensors).__name__}") from None

    @classmethod
    def from_module(cls, module: Any) -> "Gradients":
        """The gradients of a ``torch.nn.Module``'s parameters, read at each snapshot."""
        if not _is_module(module):
            raise invalid_argument("from_module takes a torch.nn.Module, not a "
                                   f"{type(module).__name__}")
        return cls(module)

    def items(self) -> list[tuple[str, Any]]:
        """The ``(name, tensor)`` pairs a snapshot takes now."""
        if self._module is not None:
            return [(name, grad) for name, p in self.parameters if (grad := p.grad) is not None]
        return list(zip(self._names, self._tensors))

    def lists(self) -> "TensorLists":
        """What the C++ core borrows: names, tensors (parameters: their .grad is read there)."""
        return (self._names, self._tensors, self._module is not None)

    def __len__(self) -> int:
        return len(self.items())


class TrainingState:
    """Groups of tensors and sections for one checkpoint, as ``ruda.training_state`` makes:
    what ``CheckpointManager.save`` takes in place of gradients."""

    def __init__(self, groups: Mapping[str, Any], sections: Mapping[str, bytes]) -> None:
        self.groups = dict(groups)
        self.sections = dict(sections)


#: Names, tensors, and whether the tensors are parameters whose ``.grad`` is to be read.
TensorLists = tuple[list[str], list[Any], bool]


def tensor_pairs(value: Any, what: str) -> Union[Record, TensorLists]:
    """A group's tensors: a record as it is, anything else as lists (``TensorLists``)."""
    if isinstance(value, Record):
        return value
    if isinstance(value, Gradients):
        return value.lists()
    if _is_module(value):
        state = value.state_dict()
        return ([str(name) for name in state], list(state.values()), False)
    if isinstance(value, Mapping):
        return ([str(name) for name in value.keys()], list(value.values()), False)
    raise invalid_argument(
        f"{what} must be a ruda.Gradients, a ruda.Record, a mapping {{name: tensor}} or a "
        f"torch.nn.Module, not a {type(value).__name__}")


def _is_group_mapping(value: Any) -> bool:
    return (isinstance(value, Mapping) and len(value) > 0 and all(
        isinstance(v, (Mapping, Gradients, Record)) or _is_module(v) for v in value.values()))


def groups_of(tensors: Any) -> list[tuple[str, Any]]:
    """``(group name, tensors)`` pairs: a mapping of groups as it is, anything else the
    "gradients" group (a module: its gradients)."""
    if isinstance(tensors, TrainingState):
        return [(name, tensor_pairs(v, f"Group {name}")) for name, v in tensors.groups.items()]
    if _is_module(tensors):
        return [("gradients", Gradients(tensors).items())]
    if _is_group_mapping(tensors):
        return [(str(name), tensor_pairs(v, f"Group {name}")) for name, v in tensors.items()]
    return [("gradients", tensor_pairs(tensors, "The tensors"))]


def sections_of(sections: Union[Mapping[str, Any], None], tensors: Any,
                allow_pickle: bool) -> list[tuple[str, bytes]]:
    """``(name, bytes)`` pairs: bytes as they are; other values pickled only when allowed,
    listed in the ``python.pickled`` section that loads check."""
    given: dict[str, Any] = {}
    if isinstance(tensors, TrainingState):
        given.update(tensors.sections)
    if sections is not None:
        if not isinstance(sections, Mapping):
            raise invalid_argument("sections must be a mapping {name: bytes}, not a "
                                   f"{type(sections).__name__}")
        given.update(sections)
    out: list[tuple[str, bytes]] = []
    pickled: list[str] = []
    for name, value in given.items():
        if name == PICKLED_SECTIONS:
            raise invalid_argument(f"The section name {PICKLED_SECTIONS} is ruda's own")
        if isinstance(value, (bytes, bytearray, memoryview)):
            out.append((str(name), bytes(value)))
        elif allow_pickle:
            out.append((str(name), pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)))
            pickled.append(str(name))
        else:
            raise invalid_argument(
                f"Section {name} is a {type(value).__name__}, not bytes: pass bytes (for "
                "instance json.dumps(value).encode()), or allow_pickle=True to pickle it "
                "(a load then needs allow_pickle=True too)")
    if pickled:
        out.append((PICKLED_SECTIONS, json.dumps(pickled).encode()))
    return out


def check_step(step: Any) -> int:
    if isinstance(step, bool) or not isinstance(step, int):
        raise invalid_argument(f"step must be an int, not a {type(step).__name__}")
    if step < 0 or step >= 2**64:
        raise invalid_argument(f"step must be between 0 and 2**64 - 1, not {step}")
    return step
