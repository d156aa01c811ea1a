"""Preflight's model files and free space (issue 64, items 3 and 4): a model directory
holding config.json alone (the memory plan's input, docs/gpu.md) is refused in one line
before the cell directory is made, as is one without a tokenizer or missing a shard its
index names; the free-space check counts what a resumed cell's directory already holds."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import pytest

from ablate.apps import preflight
from ablate.apps.cli import compose_config
from ablate.core.errors import ConfigError
from ablate.models.budget import check_model_files

Usage = namedtuple("Usage", "total used free")


def model_dir(root: Path, *files: str) -> Path:
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    for name in files:
        (root / name).write_text("{}")
    return root


def test_config_json_alone_is_one_line_before_the_cell_directory(tmp_path):
    path = model_dir(tmp_path / "m")
    proc = subprocess.run([sys.executable, "-m", "ablate", "model=qwen3_4b",
                           f"model.path={path}", f"hydra.run.dir={tmp_path / 'cell'}",
                           "run.num_threads=1"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, WANDB_MODE="disabled"))
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        f"ablate: error: model.path='{path}': {path} holds no weights (*.safetensors or "
        "pytorch_model*.bin); copy the model's weight files there beside config.json "
        "(docs/models.md)"]
    assert not (tmp_path / "cell").exists()


def test_weights_without_a_tokenizer_or_a_missing_shard(tmp_path):
    with pytest.raises(ConfigError, match=r"^model=x: .* holds no tokenizer \(tokenizer.json, "
                                          r"tokenizer.model or vocab.json with merges.txt\)"):
        check_model_files(model_dir(tmp_path / "a", "model.safetensors"), "model=x")
    sharded = model_dir(tmp_path / "b", "tokenizer.json", "model-00001-of-00002.safetensors")
    (sharded / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    with pytest.raises(ConfigError, match="holds the shard model-00002-of-00002.safetensors "
                                          "its index names;"):
        check_model_files(sharded, "model=x")
    (sharded / "model-00002-of-00002.safetensors").write_text("{}")
    check_model_files(sharded, "model=x")
    check_model_files(model_dir(tmp_path / "c", "pytorch_model.bin", "vocab.json",
                                "merges.txt"), "model=x")


def test_the_tiny_checkpoint_passes():
    from ablate.models.budget import check_weights
    assert (check_weights(compose_config([])) / "model.safetensors").is_file()


def test_a_resumed_cell_fits_on_the_disk_that_accepted_it(tmp_path, monkeypatch):
    """Accepted with F bytes free for E expected; it wrote H (its first checkpoint), so
    F - H are free: the resume needs E - H, not E."""
    cfg = compose_config(["learner=torch", "run.quiet=true"])
    expected = preflight.expected_output_bytes(cfg)
    free = expected + 2**20                         # what the fresh cell was accepted with
    cell = tmp_path / "cell"
    cell.mkdir()
    with open(cell / "checkpoint.bin", "wb") as f:  # sparse: its size, no disk
        f.truncate(expected // 2)
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda p: Usage(*real(p)[:2],
                                                              free - expected // 2))
    preflight.check_free_space("hydra.run.dir", str(cell), cfg)
    with pytest.raises(ConfigError, match=r"the cell writes about .* MiB more"):
        preflight.check_free_space("hydra.run.dir", str(tmp_path / "fresh"), cfg)
    # a sweep directory holds other cells: credited only through the job's own cell
    with pytest.raises(ConfigError):
        preflight.check_free_space("hydra.sweep.dir", str(tmp_path), cfg)
    preflight.check_free_space("hydra.sweep.dir", str(tmp_path), cfg, cell=str(cell))


def test_a_grid_cell_is_credited_with_its_own_directory(tmp_path, monkeypatch):
    """python -m ablate -m: each job's free-space check gets its own cell directory."""
    from ablate.apps import cli
    seen = []
    monkeypatch.setattr(cli, "check_free_space", lambda *a, **kw: seen.append(kw.get("cell")))
    monkeypatch.setattr(cli, "check_cfg", lambda cfg, data=True: None)   # the rest of preflight
    cli.PLANNED.clear()
    cli.PLANNED.update(jobs=1, sweep_dir=None, complete=[])
    cli.check_job(["seed=1", f"hydra.sweep.dir={tmp_path}"], True, set())
    assert seen == [str(tmp_path / "seed=1")]
