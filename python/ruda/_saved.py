"""What saves and ``load_newest_valid`` report."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from ._errors import Error
    from ._ruda import Checkpoint


@dataclass(frozen=True)
class Saved:
    """A checkpoint that is durable on disk."""

    step: int
    path: str
    bytes: int
    #: Old checkpoints or stale temporary files that could not be removed (the save itself
    #: succeeded), else None.
    cleanup_failure: Optional["Error"] = None


@dataclass(frozen=True)
class Skipped:
    """A checkpoint ``load_newest_valid`` passed over, and why."""

    step: int
    why: "Error"
    run_id: Optional[str] = None


@dataclass(frozen=True)
class NewestValid:
    """The newest checkpoint that loads (of the run "latest" names, where one of it loads)."""

    step: int
    checkpoint: "Checkpoint"
    skipped: list[Skipped] = field(default_factory=list)
    run_id: str = ""
    latest_run_id: Optional[str] = None
    #: Whether it is of another run than the one "latest" names (none of that run loads).
    other_run: bool = False
