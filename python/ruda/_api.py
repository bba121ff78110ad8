"""The functions and the checkpoint manager, over the C++ core."""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Iterable, Mapping
from typing import Any, Optional, Union

from . import _ruda
from ._errors import invalid_argument
from ._futures import SaveFutures
from ._inputs import (PICKLED_SECTIONS, Gradients, check_step, groups_of, sections_of,
                      tensor_pairs, _is_module)
from ._progress import Progress, progress_callback
from ._ruda import Checkpoint, Future, Record
from ._saved import NewestValid, Saved

PathLike = Union[str, "os.PathLike[str]"]


def snapshot(gradients: Union[Gradients, Mapping[str, Any], Any]) -> "Future[Record]":
    """Copies the tensors into a host-owned ``ruda.Record`` on ruda's threads, with the GIL
    released. The snapshot is the tensors' state when the future completes: do not change
    them before (``await`` it, or ``.result()``)."""
    pairs = tensor_pairs(Gradients(gradients) if _is_module(gradients) else gradients,
                         "snapshot's argument")
    if isinstance(pairs, Record):
        raise invalid_argument("A ruda.Record is a snapshot already")
    return _ruda._snapshot(*pairs)


def _load_options(groups: Optional[Iterable[str]], ids: Optional[Iterable[int]],
                  names: Optional[Iterable[str]], verify: bool, mmap: bool,
                  run_id: Optional[str], readers: int, max_header_bytes: Optional[int],
                  allow_pickle: bool) -> dict[str, Any]:
    def listed(value: Any, what: str) -> Optional[list[Any]]:
        if value is None:
            return None
        if isinstance(value, (str, bytes)):
            raise invalid_argument(f"{what} is a list, not one {type(value).__name__}")
        return list(value)

    return {"groups": listed(groups, "groups"), "ids": listed(ids, "ids"),
            "names": listed(names, "names"), "verify": bool(verify), "mmap": bool(mmap),
            "run_id": run_id, "readers": int(readers), "max_header_bytes": max_header_bytes,
            "allow_pickle": bool(allow_pickle)}


class CheckpointManager:
    """A directory of step-numbered checkpoints of one run (``step-<20 digits>.ruda``): durable
    saves, a ``latest`` pointer moved only once the new one is on disk, the newest ``keep``
    kept, steps that only go up (``on_newer="discard"`` for a deliberate rollback), and a lock
    that keeps a second manager (in this process or another) from saving there.

    ``save`` returns ``SaveFutures`` (``.staged``, ``.durable``); the loads return futures.
    Await them in asyncio or call ``.result()`` in a plain loop::

        with ruda.CheckpointManager("checkpoints", keep=3) as mgr:
            await mgr.save(step, ruda.Gradients(model))
            ckpt = await mgr.load_latest()
    """

    def __init__(self, directory: PathLike, keep: int = 3, *, writers: int = 0,
                 run_id: Optional[str] = None, on_newer: str = "refuse",
                 max_queued_saves: int = 2, progress: Progress = None) -> None:
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise invalid_argument(f"keep is an int of at least 1, not {keep!r}")
        self._core = _ruda._CheckpointManager(
            os.fspath(directory), keep, writers, run_id or "", on_newer,
            max(1, int(max_queued_saves)), progress_callback(progress, "ruda save"))

    def save(self, step: int, tensors: Any, sections: Optional[Mapping[str, Any]] = None, *,
             allow_pickle: bool = False) -> "SaveFutures[Saved]":
        """Saves ``tensors`` as ``step``: a ``ruda.Gradients``, a mapping ``{name: tensor}``, a
        ``ruda.Record`` or a module (its gradients) go in the "gradients" group; a mapping of
        such by group name (``{"weights": ..., "gradients": ...}``) or a
        ``ruda.training_state(...)`` gives several groups. ``sections`` map names to bytes
        (other values only with ``allow_pickle=True``). Host tensors are copied on ruda's
        threads with the GIL released; ``staged`` completes once they are, ``durable`` once
        the file is on disk and ``latest`` names it. A failure leaves the directory as it was."""
        check_step(step)
        groups = groups_of(tensors)
        sections_given = sections_of(sections, tensors, allow_pickle)
        staged, durable = self._core.save(step, groups, sections_given)
        return SaveFutures(staged, durable)

    def load(self, step: int, *, groups: Optional[Iterable[str]] = None,
             ids: Optional[Iterable[int]] = None, names: Optional[Iterable[str]] = None,
             verify: bool = True, mmap: bool = True, run_id: Optional[str] = None,
             readers: int = 0, max_header_bytes: Optional[int] = None,
             progress: Progress = None, allow_pickle: bool = False) -> "Future[Checkpoint]":
        """The checkpoint of ``step``, every check and checksum verified. ``groups``, ``ids``
        and ``names`` (a name or its dotted prefix: "fc1" takes "fc1.weight") load a part;
        ``run_id`` refuses a file of another run; a file with pickled sections is refused
        unless ``allow_pickle``."""
        check_step(step)
        return self._core.load(step, _load_options(groups, ids, names, verify, mmap, run_id,
                                                    readers, max_header_bytes, allow_pickle),
                               progress_callback(progress, "ruda load"))

    def load_latest(self, *, groups: Optional[Iterable[str]] = None,
                    ids: Optional[Iterable[int]] = None, names: Optional[Iterable[str]] = None,
                    verify: bool = True, mmap: bool = True, run_id: Optional[str] = None,
                    readers: int = 0, max_header_bytes: Optional[int] = None,
                    progress: Progress = None,
                    allow_pickle: bool = False) -> "Future[Checkpoint]":
        """The checkpoint ``latest`` names (``ruda.NotFound`` when there is none), like
        ``load``."""
        return self._core.load(None, _load_options(groups, ids, names, verify, mmap, run_id,
                                                    readers, max_header_bytes, allow_pickle),
                               progress_callback(progress, "ruda load"))

    def load_newest_valid(self, *, groups: Optional[Iterable[str]] = None,
                          ids: Optional[Iterable[int]] = None,
                          names: Optional[Iterable[str]] = None, verify: bool = True,
                          mmap: bool = True, run_id: Optional[str] = None, readers: int = 0,
                          max_header_bytes: Optional[int] = None, progress: Progress = None,
                          allow_pickle: bool = False) -> "Future[NewestValid]":
        """The newest checkpoint that loads completely, whatever ``latest`` says, with the ones
        passed over and why (``ruda.NewestValid``)."""
        return self._core.load_newest_valid(
            _load_options(groups, ids, names, verify, mmap, run_id, readers, max_header_bytes,
                          allow_pickle), progress_callback(progress, "ruda load"))

    def steps(self) -> list[int]:
        """The steps of the checkpoint files present, ascending."""
        return list(self._core.steps())

    def latest_step(self) -> Optional[int]:
        """The step ``latest`` names, None before the first save."""
        step = self._core.latest_step()
        return None if step is None else int(step)

    def latest_run_id(self) -> Optional[str]:
        """The run of the checkpoint ``latest`` names, when it says."""
        run = self._core.latest_run_id()
        return None if run is None else str(run)

    def path_of(self, step: int) -> str:
        """The file ``step`` is saved to."""
        return str(self._core.path_of(check_step(step)))

    @property
    def directory(self) -> str:
        return str(self._core.directory)

    @property
    def run_id(self) -> str:
        """The run id every checkpoint of this manager records."""
        return str(self._core.run_id)

    @property
    def resumed_run_id(self) -> str:
        """The run this manager resumed (its saves' parent), "" until it loads another run's."""
        return str(self._core.resumed_run_id)

    @property
    def closed(self) -> bool:
        return bool(self._core.closed)

    def close(self) -> None:
        """Waits (GIL released) for the saves still queued, then releases the directory.
        Every call after is ``ruda.Closed``."""
        self._core.close()

    def __enter__(self) -> "CheckpointManager":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def save_file(path: PathLike, tensors: Any, sections: Optional[Mapping[str, Any]] = None, *,
              writers: int = 0, allow_pickle: bool = False,
              progress: Progress = None) -> "SaveFutures[Saved]":
    """Saves one checkpoint file (temporary file, fsync, rename, directory fsync): the same
    tensors and sections ``CheckpointManager.save`` takes, the same two futures."""
    staged, durable = _ruda._save_file(os.fspath(path), groups_of(tensors),
                                       sections_of(sections, tensors, allow_pickle),
                                       int(writers), progress_callback(progress, "ruda save"))
    return SaveFutures(staged, durable)


def load_file(path: PathLike, *, groups: Optional[Iterable[str]] = None,
              ids: Optional[Iterable[int]] = None, names: Optional[Iterable[str]] = None,
              verify: bool = True, mmap: bool = True, run_id: Optional[str] = None,
              readers: int = 0, max_header_bytes: Optional[int] = None,
              progress: Progress = None, allow_pickle: bool = False) -> "Future[Checkpoint]":
    """Loads one checkpoint file, every check and checksum verified; the options of
    ``CheckpointManager.load``."""
    return _ruda._load_file(os.fspath(path),
                            _load_options(groups, ids, names, verify, mmap, run_id, readers,
                                          max_header_bytes, allow_pickle),
                            progress_callback(progress, "ruda load"))


def export_safetensors(path: PathLike, record: Record) -> "Future[int]":
    """Writes ``record`` as a safetensors file, atomically and durably; gives its size."""
    if not isinstance(record, Record):
        raise invalid_argument("export_safetensors takes a ruda.Record, not a "
                               f"{type(record).__name__}")
    return _ruda._export_safetensors(os.fspath(path), record)


def import_safetensors(path: PathLike) -> "Future[Record]":
    """Reads a safetensors file into a record, every header field and byte range checked."""
    return _ruda._import_safetensors(os.fspath(path))


def restore_tensors(targets: Mapping[str, Any], record: Record) -> None:
    """Copies the record's tensor of each target's name into it, in place: every target checked
    first (a name the record lacks is ``ruda.NotFound``; then dtype and shape), then every
    copy, GIL released. Tensors of the record that no target names are left out."""
    if not isinstance(record, Record):
        raise invalid_argument(f"restore takes a ruda.Record, not a {type(record).__name__}")
    _ruda._restore(list(targets.keys()), list(targets.values()), False, record, False, True,
                   False)


def restore_gradients(target: Any, record: Record) -> None:
    """Writes the record's gradients into ``target`` in place, with every check ``from_record``
    makes (``record.validate()``) and, before anything changes, that each of its tensors is a
    parameter's (``unknown_parameter``) of the same dtype and shape. ``target``: a
    ``torch.nn.Module`` or a ``ruda.Gradients`` of one (each parameter's ``.grad``: made where
    it is None, cleared where the record has none) or a mapping ``{name: tensor}`` (each
    written in place)."""
    if not isinstance(record, Record):
        raise invalid_argument(f"restore takes a ruda.Record, not a {type(record).__name__}")
    record.validate()
    if isinstance(target, Gradients) and target._module is not None:
        names, params, _ = target.lists()
    elif _is_module(target):
        names, params, _ = Gradients(target).lists()
    elif isinstance(target, Mapping):
        _ruda._restore(list(target.keys()), list(target.values()), False, record, True, False,
                       False)
        return
    else:
        raise invalid_argument("restore_gradients takes a torch.nn.Module, a ruda.Gradients "
                               "of one, or a mapping {name: tensor}")
    present = set(record.keys())
    changes = [(p, name in present) for name, p in zip(names, params)
               if (p.grad is None) == (name in present)]
    if changes:
        # Checked against the parameters themselves (the dtype and shape their gradients
        # have) before any .grad is made or cleared.
        _ruda._restore(names, params, False, record, True, False, True)
        import torch

        with torch.no_grad():
            for p, wanted in changes:
                p.grad = torch.empty_like(p) if wanted else None
    in_record = [i for i, name in enumerate(names) if name in present]
    if len(in_record) == len(names):
        _ruda._restore(names, params, True, record, True, False, False)
    else:
        _ruda._restore([names[i] for i in in_record], [params[i] for i in in_record], True,
                       record, True, False, False)


def _sections(self: Checkpoint) -> dict[str, Any]:
    """Each section by name: its bytes, or the object for a pickled one (only in a checkpoint
    loaded with ``allow_pickle=True``)."""
    raw = self.raw_sections
    pickled = set(json.loads(raw.pop(PICKLED_SECTIONS, b"[]")))
    out: dict[str, Any] = {}
    for name, value in raw.items():
        if name in pickled:
            if not getattr(self, "_allow_pickle", False):
                from ._errors import UnsafeSection

                raise UnsafeSection(f"Section {name} is pickled; load with allow_pickle=True",
                                    "unsafe_section")
            out[name] = pickle.loads(value)
        else:
            out[name] = value
    return out


def _section_json(self: Checkpoint, name: str) -> Any:
    """Section ``name`` decoded as JSON."""
    raw = self.raw_sections
    if name not in raw:
        from ._errors import NotFound

        raise NotFound(f"The checkpoint has no section {name}", "not_found")
    return json.loads(raw[name])


setattr(Checkpoint, "sections", property(_sections))
setattr(Checkpoint, "section_json", _section_json)
