"""A grid (-m) goes on when one cell fails, marks it FAILED and exits non-zero at the end;
`python -m ablate.progress` reports every cell of a grid, planned ones included."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

import ablate.loop.cell
from ablate.apps import cli
from ablate.loop.outputs import COMPLETE, FAILED
from ablate.apps.progress import report


def fake_run_cell(cfg, out_dir, on_eval=None):
    """Seed 1 raises as a real cell would on a broken worker; the others finish."""
    if cfg.seed == 1:
        raise RuntimeError("worker died: out of memory")
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    (Path(out_dir) / "config.yaml").write_text("trainer:\n  max_steps: 2\n")
    (Path(out_dir) / "eval.jsonl").write_text(json.dumps(
        {"step": 2, "task_id": "t", "sample": 0, "correct": True}) + "\n")
    (Path(out_dir) / COMPLETE).write_text("")
    return {"final_accuracy": 1.0}


def test_a_failing_cell_does_not_stop_the_grid(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(ablate.loop.cell, "run_cell", fake_run_cell)
    monkeypatch.setattr(cli, "FAILED_CELLS", [])
    monkeypatch.chdir(tmp_path)
    sweep = tmp_path / "sweep"
    with pytest.raises(SystemExit) as exit_:
        cli.main(["-m", "seed=0,1,2", "run.quiet=true", f"hydra.sweep.dir={sweep}"])
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert "1 of 3 cells failed, 0 busy" in err
    failed = [p.parent for p in sweep.rglob(FAILED)]
    assert len(failed) == 1 and failed[0].name == "seed=1"
    assert (failed[0] / FAILED).read_text().startswith("worker died: out of memory")
    assert "Traceback" in (failed[0] / FAILED).read_text()
    assert sorted(p.parent.name for p in sweep.rglob(COMPLETE)) == ["seed=0", "seed=2"]
    text = report(sweep)
    assert text.splitlines()[0].endswith(
        "2 complete, 0 running, 0 interrupted, 1 failed, 0 not started (of 3)")
    assert "failed       seed=1: worker died: out of memory" in text
    assert "complete     seed=0: accuracy 1.000 at step 2" in text


def test_progress_counts_running_and_planned_cells(tmp_path, hold_cell):
    sweep = tmp_path / "grid"
    sweep.mkdir()
    (sweep / "multirun.yaml").write_text(
        "hydra:\n  sweeper:\n    params:\n      +reward: naive,shaped,outcome\n"
        "      seed: 0,1\n  overrides:\n    task:\n    - +experiment=x\n    - seed=0,1,2\n")
    cell = sweep / "+reward=naive,seed=0"
    cell.mkdir()
    (cell / "config.yaml").write_text("trainer:\n  max_steps: 20\n")
    (cell / "metrics.jsonl").write_text("".join(json.dumps({"step": s}) + "\n"
                                                for s in (1, 2, 3)))
    (cell / "ablate.log").write_text("x")
    old = time.time() - 600
    os.utime(cell / "ablate.log", (old, old))
    text = report(sweep)
    # 3 rewards x 3 seeds (the command line's seed=0,1,2 replaces the preset's 0,1)
    assert text.splitlines()[0].endswith(
        "0 complete, 0 running, 1 interrupted, 0 failed, 8 not started (of 9)")
    assert "interrupted  +reward=naive,seed=0: step 3/20, log idle 10.0 min" in text
    holder = hold_cell(cell)
    text = report(sweep)
    assert "0 complete, 1 running, 0 interrupted" in text.splitlines()[0]
    assert f"running      +reward=naive,seed=0: process {holder.pid}, step 3/20" in text
    holder.kill()
    holder.wait()
    assert "1 interrupted" in report(sweep).splitlines()[0]    # its lock died with it
