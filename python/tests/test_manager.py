"""CheckpointManager and one-file saves: groups, sections, loads with their options, the
refusals, and failures that lose nothing."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ruda

torch = pytest.importorskip("torch")  # the torch cases need Debian's python3-torch


def grads(scale: float = 1.0) -> dict[str, np.ndarray]:
    return {"fc1.weight": np.full((4, 3), scale, dtype=np.float32),
            "fc1.bias": np.arange(4, dtype=np.float64) * scale}


def test_save_then_load_latest(tmp_path: pathlib.Path) -> None:
    with ruda.CheckpointManager(tmp_path, keep=2) as mgr:
        futures = mgr.save(10, grads(), sections={"note": b"hello"})
        assert futures.staged.result() is None
        saved = futures.result()
        assert saved.step == 10 and saved.path == mgr.path_of(10) and saved.bytes > 0
        mgr.save(20, grads(2.0)).result()
        mgr.save(30, grads(3.0)).result()
        assert mgr.steps() == [20, 30] and mgr.latest_step() == 30
        ckpt = mgr.load_latest().result()
        assert ckpt.step == 30 and ckpt.run_id == mgr.run_id
        weight = np.from_dlpack(ckpt.gradients["fc1.weight"])
        assert np.array_equal(weight, grads(3.0)["fc1.weight"])
        assert ckpt.sections == {}
        assert mgr.load(20).result().step == 20


def test_groups_and_sections(tmp_path: pathlib.Path) -> None:
    with ruda.CheckpointManager(tmp_path) as mgr:
        mgr.save(1, {"gradients": grads(), "weights": {"w": torch.arange(6).reshape(2, 3)},
                     "optimizer": ruda.Gradients({"m": np.zeros(2, dtype=np.float16)})},
                 sections={"config": json.dumps({"lr": 0.1}).encode()}).result()
        ckpt = mgr.load(1).result()
        assert list(ckpt.groups) == ["gradients", "weights", "optimizer"]
        assert torch.equal(torch.from_dlpack(ckpt["weights"]["w"]), torch.arange(6).reshape(2, 3))
        assert ckpt.section_json("config") == {"lr": 0.1}
        only = mgr.load(1, groups=["weights"]).result()
        assert list(only.groups) == ["gradients", "weights"] and len(only.gradients) == 0
        by_name = mgr.load(1, names=["fc1"]).result()
        assert sorted(by_name.gradients.keys()) == ["fc1.bias", "fc1.weight"]
        by_id = mgr.load(1, ids=[ruda.param_id("fc1.bias")], groups=["gradients"]).result()
        assert by_id.gradients.keys() == ["fc1.bias"]


def test_a_record_saves_as_it_is(tmp_path: pathlib.Path) -> None:
    record = ruda.snapshot(grads()).result()
    with ruda.CheckpointManager(tmp_path) as mgr:
        mgr.save(5, record).result()
        assert mgr.load(5).result().gradients == record


def test_pickled_sections_are_refused_by_default(tmp_path: pathlib.Path) -> None:
    with ruda.CheckpointManager(tmp_path) as mgr:
        with pytest.raises(ruda.InvalidArgument, match="Section meta is a dict, not bytes"):
            mgr.save(1, grads(), sections={"meta": {"a": 1}})
        mgr.save(1, grads(), sections={"meta": {"a": (1, 2)}}, allow_pickle=True).result()
        with pytest.raises(ruda.UnsafeSection, match="pickled sections") as raised:
            mgr.load(1).result()
        assert raised.value.code == "unsafe_section"
        with pytest.raises(ruda.UnsafeSection):
            mgr.load_newest_valid().result()
        ckpt = mgr.load(1, allow_pickle=True).result()
        assert ckpt.sections == {"meta": {"a": (1, 2)}}


def test_bad_arguments(tmp_path: pathlib.Path) -> None:
    with ruda.CheckpointManager(tmp_path) as mgr:
        for step in ("3", 2.0, True, -1):
            with pytest.raises(ruda.InvalidArgument, match="step must be"):
                mgr.save(step, grads())  # type: ignore[arg-type]
        with pytest.raises(ruda.InvalidArgument, match="a str"):
            mgr.save(1, "weights")
        with pytest.raises(ruda.Error, match="A group name must have 1 to 255 bytes, not 0"):
            mgr.save(1, {"": grads()})
        with pytest.raises(ruda.InvalidArgument):
            ruda.CheckpointManager(tmp_path / "x", keep=0)
        with pytest.raises(ruda.InvalidArgument, match="on_newer"):
            ruda.CheckpointManager(tmp_path / "x", on_newer="sometimes")
        assert mgr.steps() == []


def test_a_closed_manager_refuses(tmp_path: pathlib.Path) -> None:
    mgr = ruda.CheckpointManager(tmp_path)
    mgr.save(1, grads())
    mgr.close()  # waits for the queued save
    assert mgr.closed
    assert ruda.load_file(pathlib.Path(tmp_path) / "step-00000000000000000001.ruda").result()
    with pytest.raises(ruda.Closed, match="closed") as raised:
        mgr.save(2, grads())
    assert raised.value.code == "closed"
    with pytest.raises(ruda.Closed):
        mgr.load_latest()


def test_steps_only_go_up_unless_discarding(tmp_path: pathlib.Path) -> None:
    with ruda.CheckpointManager(tmp_path) as mgr:
        mgr.save(5, grads()).result()
        with pytest.raises(ruda.Error) as raised:
            mgr.save(3, grads()).result()
        assert raised.value.code == "step_not_newer"
        assert 'on_newer="discard"' in str(raised.value)
    with ruda.CheckpointManager(tmp_path, on_newer="discard") as mgr:
        mgr.save(3, grads()).result()
        assert mgr.steps() == [3]


def test_nothing_to_load(tmp_path: pathlib.Path) -> None:
    with ruda.CheckpointManager(tmp_path) as mgr:
        with pytest.raises(ruda.NotFound) as raised:
            mgr.load_latest().result()
        assert isinstance(raised.value, FileNotFoundError) and raised.value.code == "not_found"
        assert mgr.latest_step() is None


def test_not_a_checkpoint(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "junk.ruda"
    path.write_bytes(b"not a checkpoint at all" * 10)
    with pytest.raises(ruda.Error, match="junk.ruda") as raised:
        ruda.load_file(path).result()
    assert raised.value.code in ("malformed_record", "unsupported_version", "checksum_mismatch")


def test_newest_valid_passes_over_a_damaged_file(tmp_path: pathlib.Path) -> None:
    with ruda.CheckpointManager(tmp_path, keep=3) as mgr:
        mgr.save(1, grads()).result()
        mgr.save(2, grads(2.0)).result()
        path = pathlib.Path(mgr.path_of(2))
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
        with pytest.raises(ruda.Error):
            mgr.load_latest().result()
        found = mgr.load_newest_valid().result()
        assert found.step == 1 and [s.step for s in found.skipped] == [2]
        assert isinstance(found.skipped[0].why, ruda.Error)
        assert found.checkpoint.step == 1


def test_another_process_holding_the_directory(tmp_path: pathlib.Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, numpy as np, ruda
        mgr = ruda.CheckpointManager({str(tmp_path)!r})
        mgr.save(1, {{"w": np.ones(2)}}).result()
        print("held", flush=True)
        sys.stdin.readline()
        """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ})
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with ruda.CheckpointManager(tmp_path) as mgr:
            with pytest.raises(ruda.Error, match="pid") as raised:
                mgr.save(2, grads()).result()
            assert raised.value.code == "directory_in_use"
            assert mgr.steps() == [1]
    finally:
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.close()
        holder.wait(60)


def test_an_unwritable_directory_loses_nothing(tmp_path: pathlib.Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere; the file-size limit test covers failed writes")
    with ruda.CheckpointManager(tmp_path) as mgr:
        mgr.save(1, grads()).result()
    os.chmod(tmp_path, 0o500)
    try:
        with ruda.CheckpointManager(tmp_path) as mgr:
            with pytest.raises(ruda.Error):
                mgr.save(2, grads()).result()
            assert mgr.load_latest().result().step == 1
    finally:
        os.chmod(tmp_path, 0o700)


def test_a_full_disk_loses_nothing(tmp_path: pathlib.Path) -> None:
    # A file-size limit makes the write of a large checkpoint fail as a full disk does (EFBIG
    # instead of ENOSPC), without a mount; the earlier checkpoint and "latest" stay.
    script = textwrap.dedent(f"""
        import resource, signal, numpy as np, ruda
        mgr = ruda.CheckpointManager({str(tmp_path)!r})
        mgr.save(1, {{"w": np.ones(16)}}).result()
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
        try:
            mgr.save(2, {{"w": np.ones(1 << 20)}}).result()
            print("saved")
        except ruda.Error as e:
            print(e.code, e)
        print(mgr.steps(), mgr.latest_step(), mgr.load_latest().result().step)
        """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300, check=True).stdout.splitlines()
    assert out[0].startswith("io_error"), out
    assert out[1] == "[1] 1 1"
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_progress_callbacks(tmp_path: pathlib.Path) -> None:
    saves: list[tuple[int, int]] = []
    with ruda.CheckpointManager(tmp_path, progress=lambda d, t: saves.append((d, t))) as mgr:
        mgr.save(1, {"w": np.ones(1 << 20)}).result()
        assert saves and saves[-1][0] == saves[-1][1] == 8 << 20
        loads: list[tuple[int, int]] = []
        mgr.load(1, progress=lambda d, t: loads.append((d, t))).result()
        assert loads[-1] == (8 << 20, 8 << 20)
        with pytest.raises(ruda.Error, match="progress callback raised ZeroDivisionError"):
            mgr.load(1, progress=lambda d, t: 1 / 0).result()
        assert mgr.load(1, progress=True).result().step == 1  # a tqdm bar


def test_a_raising_save_progress_fails_the_save_and_keeps_the_last(tmp_path: pathlib.Path) -> None:
    with ruda.CheckpointManager(tmp_path) as mgr:
        mgr.save(1, grads()).result()
    with ruda.CheckpointManager(tmp_path, progress=lambda d, t: 1 / 0) as mgr:
        with pytest.raises(ruda.Error, match="ZeroDivisionError") as raised:
            mgr.save(2, grads()).result()
        assert raised.value.code == "cancelled"
        assert mgr.steps() == [1] and mgr.latest_step() == 1


def test_a_save_cancelled_before_it_is_staged_writes_nothing(tmp_path: pathlib.Path) -> None:
    with ruda.CheckpointManager(tmp_path) as mgr:
        cancelled = 0
        for step in range(1, 6):
            futures = mgr.save(step, {"weights": {"big": np.ones(64 << 20, dtype=np.uint8)}})
            if futures.cancel():
                cancelled += 1
                with pytest.raises(ruda.Error) as raised:
                    futures.result()
                assert raised.value.code == "cancelled"
                assert futures.cancelled()
            else:
                futures.result()
        assert cancelled > 0
        assert len(mgr.steps()) == min(3, 5 - cancelled)


def test_one_file_save_and_load(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "one.ruda"
    saved = ruda.save_file(path, {"weights": {"w": np.arange(5, dtype=np.int32)}},
                           sections={"s": b"x"}).result()
    assert saved.path == str(path) and saved.bytes == path.stat().st_size
    ckpt = ruda.load_file(path).result()
    assert ckpt.step is None
    assert np.from_dlpack(ckpt["weights"]["w"]).tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(ruda.NotFound):
        ruda.load_file(tmp_path / "missing.ruda").result()


def test_integer_gradients_are_refused_before_writing(tmp_path: pathlib.Path) -> None:
    with pytest.raises(ruda.Error) as raised:
        ruda.save_file(tmp_path / "i.ruda", {"g": np.ones(3, dtype=np.int32)}).result()
    assert raised.value.code == "invalid_dtype"
    assert not (tmp_path / "i.ruda").exists()


def test_safetensors_out_and_in(tmp_path: pathlib.Path) -> None:
    record = ruda.snapshot({"a.w": np.arange(4, dtype=np.float32),
                            "a.b": torch.ones(2, dtype=torch.bfloat16)}).result()
    size = ruda.export_safetensors(tmp_path / "m.safetensors", record).result()
    assert size == (tmp_path / "m.safetensors").stat().st_size
    back = ruda.import_safetensors(tmp_path / "m.safetensors").result()
    assert back == record
    with pytest.raises(ruda.InvalidArgument):
        ruda.export_safetensors(tmp_path / "x", {"a": 1})  # type: ignore[arg-type]
