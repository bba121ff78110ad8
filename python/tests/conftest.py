"""Fixtures of the Python suite: the build's tools, and small tensor sets."""

from __future__ import annotations

import os
import pathlib
import shutil
from typing import Optional

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def inspect_tool() -> Optional[str]:
    """The build's ruda-inspect (RUDA_TOOLS_DIR, set by the build's test), else one on PATH."""
    tools = os.environ.get("RUDA_TOOLS_DIR")
    if tools and os.access(os.path.join(tools, "ruda-inspect"), os.X_OK):
        return os.path.join(tools, "ruda-inspect")
    return shutil.which("ruda-inspect")


@pytest.fixture
def ruda_inspect() -> str:
    tool = inspect_tool()
    if tool is None:
        pytest.skip("ruda-inspect is not built (tools off)")
    return tool


@pytest.fixture
def golden_file() -> pathlib.Path:
    """A checkpoint the C++ library wrote (the format's golden file)."""
    return REPO / "tests" / "record" / "data" / "golden.ruda"
