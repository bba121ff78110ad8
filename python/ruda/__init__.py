"""ruda: snapshot, checkpoint and restore a trainer's tensors, from PyTorch, NumPy or any
DLPack tensor, with the C++ core doing the work off the GIL.

    import ruda
    with ruda.CheckpointManager("checkpoints", keep=3) as mgr:
        mgr.save(step, ruda.training_state(model, optimizer, step)).result()   # or await
        ckpt = mgr.load_latest().result()
        step = ruda.restore_training_state(ckpt, model, optimizer)

Every operation returns a ``ruda.Future`` (``SaveFutures`` for saves: ``.staged`` and
``.durable``): await it in asyncio, call ``.result()`` in a plain loop, ``.cancel()`` it, or
add a done-callback. Failures are ``ruda.Error`` with a ``.code``.
"""

from . import _ruda
from ._errors import (Closed, Error, InvalidArgument, NotFound, TimedOut, UnsafeSection,
                      error_codes)
from ._futures import SaveFutures
from ._ruda import Checkpoint, CudaDevice, Future, Record, Tensor, __version__, param_id
from ._saved import NewestValid, Saved, Skipped
from ._inputs import Gradients, TrainingState
from ._api import (CheckpointManager, export_safetensors, import_safetensors, load_file,
                   restore_gradients, restore_tensors, save_file, snapshot)
from ._training import restore_training_state, training_state
from ._cuda import cuda_device, open_cuda_device

__all__ = [
    "Checkpoint", "CheckpointManager", "Closed", "CudaDevice", "Error", "Future", "Gradients",
    "InvalidArgument", "NewestValid", "NotFound", "Record", "SaveFutures", "Saved", "Skipped",
    "Tensor", "TimedOut", "TrainingState", "UnsafeSection", "__version__", "error_codes",
    "cuda_device", "export_safetensors", "import_safetensors", "load_file",
    "open_cuda_device", "param_id",
    "restore_gradients", "restore_tensors", "restore_training_state", "save_file",
    "snapshot", "training_state",
]

del _ruda
