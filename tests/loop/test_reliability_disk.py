"""Disk full / read-only: a one-line error naming the path and the free space, before
any work where preflight can tell (free space vs the cell's expected output), and the
rows already written intact after a failed write."""
from __future__ import annotations

import errno
import os
import shutil
from collections import namedtuple

import pytest
import torch

import ablate.loop.cell
from ablate.apps import cli
from ablate.core.errors import OutputWriteError, write_error
from ablate.loop.outputs import CellDir

Usage = namedtuple("Usage", "total used free")


def failing(err):
    def fsync(fd):
        raise OSError(err, os.strerror(err))
    return fsync


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EROFS])
def test_a_failed_append_leaves_the_rows_intact_and_names_path_and_space(err, tmp_path,
                                                                         monkeypatch):
    cell = CellDir(tmp_path / "cell")
    cell.append("metrics.jsonl", [{"step": 1}, {"step": 2}])
    before = (cell.path / "metrics.jsonl").read_bytes()
    monkeypatch.setattr(os, "fsync", failing(err))
    with pytest.raises(OutputWriteError) as exc:
        cell.append("metrics.jsonl", {"step": 3, "pad": "x" * 5000})
    text = str(exc.value)
    assert "\n" not in text and str(cell.path / "metrics.jsonl") in text
    assert os.strerror(err) in text and "MiB free there" in text
    assert (cell.path / "metrics.jsonl").read_bytes() == before
    with pytest.raises(OutputWriteError, match="summary.json"):
        cell.mark_complete({"final_accuracy": 1.0})
    assert not (cell.path / "summary.json").exists() and not list(cell.path.glob(".*tmp*"))


def test_a_checkpoint_on_a_full_disk_is_one_line_and_leaves_no_half_checkpoint(
        tmp_path, monkeypatch):
    from test_reliability_checkpoints import learner
    import transformers
    cfg = transformers.Qwen3Config(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                                   vocab_size=64, tie_word_embeddings=True)
    transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(tmp_path / "w")
    lrn = learner(tmp_path / "w", tmp_path / "ckpt")
    lrn.save(1, {"step": 1})

    def full(*a, **kw):
        raise RuntimeError("[enforce fail at inline_container.cc:595] . unexpected pos "
                           "64 vs 0; basic_ios::clear: iostream error")
    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(OutputWriteError) as exc:
        lrn.save(2, {"step": 2})
    assert "\n" not in str(exc.value) and ".tmp-step_00000002" in str(exc.value)
    assert "MiB free there" in str(exc.value)
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["step_00000001"]


def test_a_write_error_in_a_single_run_is_one_line(tmp_path, monkeypatch, capsys):
    def full(cfg, out_dir, on_eval=None):
        raise write_error(os.path.join(out_dir, "eval.jsonl"),
                          OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    monkeypatch.setattr(ablate.loop.cell, "run_cell", full)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["run.quiet=true", f"hydra.run.dir={tmp_path / 'cell'}"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("ablate: error: cannot write ") and "No space left" in err


def test_preflight_refuses_an_output_dir_without_room(tmp_path, monkeypatch, capsys):
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda p: Usage(*real(p)[:2], 3 * 2**20))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["run.quiet=true", "learner=torch", f"hydra.run.dir={tmp_path / 'cell'}"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "hydra.run.dir=" in err and "3.0 MiB free" in err and "the cell writes about" in err
    assert not (tmp_path / "cell").exists()


def test_a_read_only_cell_directory_is_one_line(tmp_path, monkeypatch):
    real_open = type(tmp_path).open

    def read_only(self, *a, **kw):
        if self.name == ".lock":
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))
        return real_open(self, *a, **kw)
    monkeypatch.setattr(type(tmp_path), "open", read_only)
    with pytest.raises(OutputWriteError, match=r"cannot write .*\.lock: Read-only file system"):
        CellDir(tmp_path / "cell").lock()
