"""Grids report: every launcher (joblib included) exits non-zero with "N of M cells
failed, K busy"; a worker killed as by the OOM killer fails its cell, not the grid; a
swept value holding "/" makes one directory, and `ablate.progress` finds every cell and
survives a bad one."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import ablate.loop.cell
from ablate.apps import cli
from ablate.apps.progress import report
from ablate.loop.config import cell_dirname
from ablate.loop.outputs import COMPLETE, FAILED, CellDir

HERE = Path(__file__).resolve().parents[1]
ROOT = HERE.parent


def test_a_joblib_grid_with_a_failing_and_a_killed_cell_exits_non_zero(tmp_path):
    """seed=1 raises, seed=2 SIGKILLs its joblib worker: both FAILED, the others finish."""
    sweep = tmp_path / "sweep"
    env = dict(os.environ, WANDB_MODE="disabled", ABLATE_FAKE_CELL="1", FAKE_KILL="1",
               PYTHONPATH=f"{HERE / 'helpers' / 'fakecell'}:{ROOT}")
    proc = subprocess.run([sys.executable, "-m", "ablate", "-m", "seed=0,1,2,3",
                           "run.quiet=true", "hydra/launcher=joblib",
                           "hydra.launcher.n_jobs=2", f"hydra.sweep.dir={sweep}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "ablate: 2 of 4 cells failed, 0 busy" in proc.stderr
    assert sorted(p.parent.name for p in sweep.rglob(COMPLETE)) == ["seed=0", "seed=3"]
    assert (sweep / "seed=1" / FAILED).read_text().startswith("worker died: out of memory")
    assert "its worker process died" in (sweep / "seed=2" / FAILED).read_text()
    assert not list(sweep.glob(".grid-*"))


def test_a_busy_cell_makes_the_grid_exit_non_zero_naming_it(tmp_path, monkeypatch, capsys,
                                                            hold_cell):
    monkeypatch.setattr(ablate.loop.cell, "run_cell", locking_cell)
    monkeypatch.setattr(cli, "FAILED_CELLS", [])
    monkeypatch.chdir(tmp_path)
    sweep = tmp_path / "sweep"
    (sweep / "seed=1").mkdir(parents=True)
    hold_cell(sweep / "seed=1")
    with pytest.raises(SystemExit) as exit_:
        cli.main(["-m", "seed=0,1,2", "run.quiet=true", f"hydra.sweep.dir={sweep}"])
    assert exit_.value.code == 1
    assert "ablate: 0 of 3 cells failed, 1 busy" in capsys.readouterr().err


def locking_cell(cfg, out_dir, on_eval=None):
    cell = CellDir(out_dir)
    cell.lock()                       # CellBusy where a live process holds it
    try:
        Path(out_dir, COMPLETE).write_text("")
        return {"final_accuracy": 1.0}
    finally:
        cell.unlock()


def test_swept_paths_and_urls_make_one_directory_each():
    name = cell_dirname("judge.base_url=http://h:8000/v1,model.path=/data/m")
    assert "/" not in name and name == "judge.base_url=http:%2F%2Fh:8000%2Fv1,model.path=%2Fdata%2Fm"
    assert cell_dirname("seed=1,trainer.lr=0.01") == "seed=1,trainer.lr=0.01"   # unchanged
    assert cell_dirname("a=x/y") != cell_dirname("a=x%2Fy")                   # unambiguous
    long = cell_dirname("model.path=" + "/x" * 200)
    assert "/" not in long and len(long.encode()) <= 200


def test_a_grid_sweeping_paths_leaves_flat_cells_progress_reports(tmp_path, monkeypatch):
    def finish(cfg, out_dir, on_eval=None):
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        Path(out_dir, "config.yaml").write_text("trainer:\n  max_steps: 2\n")
        Path(out_dir, "eval.jsonl").write_text(json.dumps(
            {"step": 2, "task_id": "t", "correct": True}) + "\n")
        Path(out_dir, COMPLETE).write_text("")
        return {"final_accuracy": 1.0}
    monkeypatch.setattr(ablate.loop.cell, "run_cell", finish)
    monkeypatch.setattr(cli, "FAILED_CELLS", [])
    monkeypatch.chdir(tmp_path)
    sweep = tmp_path / "sweep"
    cli.main(["-m", "env.judge.cache_dir=a/j1,b/j2", "run.quiet=true",
              f"hydra.sweep.dir={sweep}"])
    cells = sorted(p.name for p in sweep.iterdir() if p.is_dir() and not p.name.startswith("."))
    assert cells == ["env.judge.cache_dir=a%2Fj1", "env.judge.cache_dir=b%2Fj2"]
    assert report(sweep).splitlines()[0].endswith("2 complete, 0 running, 0 interrupted, "
                                                  "0 failed, 0 not started (of 2)")


def cell(root: Path, name: str, config="trainer:\n  max_steps: 2\n", eval_rows=None,
         metrics=None, complete=False):
    d = root / name
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(config)
    if eval_rows is not None:
        (d / "eval.jsonl").write_text(eval_rows)
    if metrics is not None:
        (d / "metrics.jsonl").write_text(metrics)
    if complete:
        (d / COMPLETE).write_text("")
    return d


def test_progress_finds_nested_cells_and_survives_bad_ones(tmp_path):
    sweep = tmp_path / "sweep"
    good = json.dumps({"step": 2, "task_id": "t", "correct": True}) + "\n"
    cell(sweep, "seed=0", eval_rows=good, complete=True)
    cell(sweep, "model.path=/data/m", eval_rows=good, complete=True)      # nested (old)
    cell(sweep, "seed=1", eval_rows=json.dumps({"task_id": "t", "correct": True}) + "\n",
         complete=True)                                                   # no "step"
    cell(sweep, "seed=2", metrics='{"step": 1}\nnot json\n{"step": 3}\n')  # bad line
    cell(sweep, "seed=3", config="trainer: [unclosed\n")                  # bad yaml
    (sweep / "seed=0" / ".hydra").mkdir()
    (sweep / "seed=0" / ".hydra" / "config.yaml").write_text("x: 1\n")
    text = report(sweep)
    head, *lines = text.splitlines()
    assert head.endswith("2 complete, 0 running, 0 interrupted, 0 failed, 3 unreadable")
    assert "complete     model.path=/data/m: accuracy 1.000 at step 2" in text
    assert any(l.startswith("unreadable   seed=1: ") and "'step'" in l for l in lines)
    assert any(l.startswith("unreadable   seed=2: ") and "metrics.jsonl:2" in l for l in lines)
    assert any(l.startswith("unreadable   seed=3: ") and "config.yaml" in l for l in lines)
    assert len(lines) == 5


def test_a_cell_whose_own_error_was_written_before_its_pool_died_keeps_it(tmp_path, monkeypatch):
    """A dying joblib pool stops every worker: one stopped between writing its FAILED and
    reporting it keeps its own error; a FAILED left by an earlier grid does not count."""
    report = tmp_path / "report.tsv"
    monkeypatch.setenv(cli.GRID_REPORT, str(report))
    own, silent, stale = (tmp_path / n for n in ("own", "silent", "stale"))
    for cell in (own, silent, stale):
        cell.mkdir()
    report.write_text("".join(f"start\t{c}\n" for c in (own, silent, stale)))
    (stale / FAILED).write_text("an earlier grid's error\n\n")
    os.utime(stale / FAILED, (1.0, 1.0))
    since = time.time() - 1.0
    (own / FAILED).write_text("worker died: out of memory\n\n")
    assert cli._mark_dead(report, since)
    assert (own / FAILED).read_text().startswith("worker died: out of memory")
    for cell in (silent, stale):
        assert (cell / FAILED).read_text().startswith("its worker process died")
    states = cli.grid_report()
    assert states == {"failed": {str(own)}, "dead": {str(silent), str(stale)}}
