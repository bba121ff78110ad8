"""Each Python example runs to its end as a user would run it."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

import ruda

HERE = pathlib.Path(__file__).resolve().parent


@pytest.mark.parametrize("example, last_line", [
    ("asyncio_trainer.py", "resumed run is bit-identical: weights and optimizer state"),
    ("plain_loop.py", "gradients restored in place"),
    ("numpy_only.py", "weights restored in place: b1, w1, w2"),
])
def test_example_runs(example: str, last_line: str, tmp_path: pathlib.Path) -> None:
    if example != "numpy_only.py":
        pytest.importorskip("torch")
    package_root = str(pathlib.Path(ruda.__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, str(HERE / example), str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": package_root})
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1] == last_line


def test_the_examples_and_the_package_type_check_strictly(tmp_path: pathlib.Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The stubs (_ruda.pyi, py.typed) carry the examples through mypy --strict (torch taken as
    Any, pyproject.toml says why). Run where RUDA_TYPE_CHECK=1, as CI's packaging stage does
    against the installed package."""
    if os.environ.get("RUDA_TYPE_CHECK") != "1":
        pytest.skip("set RUDA_TYPE_CHECK=1 (CI does, against the pip-installed package)")
    try:
        import mypy.api
    except ImportError:
        pytest.skip("mypy is not installed")
    package_root = pathlib.Path(ruda.__file__).resolve().parents[1]
    if package_root.name != "site-packages":  # a build tree; mypy finds installed ones itself
        monkeypatch.setenv("MYPYPATH", str(package_root))
    examples = [str(p) for p in sorted(HERE.glob("[!t]*.py"))]
    for target in (examples, ["-p", "ruda"]):
        out, err, status = mypy.api.run(["--strict", "--config-file",
                                         str(HERE.parents[1] / "pyproject.toml"),
                                         "--cache-dir", str(tmp_path / "cache"), *target])
        assert status == 0, out + err


def test_the_readme_python_program_runs(tmp_path: pathlib.Path) -> None:
    """The README's Python quick start, as written there."""
    pytest.importorskip("torch")
    readme = (HERE.parents[1] / "README.md").read_text()
    program = readme.split("```python\n", 1)[1].split("```", 1)[0]
    package_root = str(pathlib.Path(ruda.__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env={**os.environ, "PYTHONPATH": package_root})
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "checkpoints" / "latest").exists()
