"""A refused command leaves an existing cell's files untouched (issue 64 item 10): the
resume refusal (a changed config) and the busy refusal (another live process runs the
cell) are answered before Hydra writes the command's .hydra/config.yaml, hydra.yaml and
overrides.yaml into the cell."""
from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from ablate.apps import cli

BASE = ["run.num_threads=1", "run.quiet=true", "run.wandb_mode=disabled",
        "trainer.max_steps=2", "trainer.tasks_per_step=1", "trainer.group_size=2",
        "eval.num_tasks=2", "eval.samples=1", "eval.greedy=false", "learner=torch"]
HYDRA_FILES = ("config.yaml", "hydra.yaml", "overrides.yaml")


@pytest.fixture
def started(tmp_path, monkeypatch):
    """A cell interrupted after step 1 (its stored config, one metrics row, the .hydra
    files its command wrote), as run_cell and Hydra leave one."""
    monkeypatch.chdir(tmp_path)
    cell = tmp_path / "cell"
    (cell / ".hydra").mkdir(parents=True)
    cfg = cli.compose_config([*BASE, f"env.cache_dir={tmp_path / 'cache'}"])
    (cell / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    (cell / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 0.5}) + "\n")
    for name in HYDRA_FILES:
        (cell / ".hydra" / name).write_text(f"# the first command's {name}\n")
    return cell


def _files(cell) -> dict:
    return {p.relative_to(cell).as_posix(): p.read_bytes()
            for p in sorted(cell.rglob("*")) if p.is_file()}


def _refused(capsys, cell, *extra) -> str:
    with pytest.raises(SystemExit) as exit_:
        cli.main([*BASE, f"env.cache_dir={cell.parent / 'cache'}",
                  f"hydra.run.dir={cell}", *extra])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ablate: error: "), err
    return err[0]


@pytest.mark.parametrize("change,says", [
    ("trainer.lr=0.01", "trainer.lr 0.0001 -> 0.01"),                     # resume refusal
    ("trainer.lr=-1", "trainer.lr=-1.0 is not allowed")])                 # preflight's
def test_a_refused_command_leaves_the_cells_files_untouched(started, capsys, change, says):
    before = _files(started)
    err = _refused(capsys, started, change)
    assert says in err
    assert _files(started) == before          # .hydra/ and every other file as they were


def test_a_busy_cell_is_refused_before_hydra_writes_into_it(started, capsys, hold_cell):
    holder = hold_cell(started)
    before = _files(started)
    err = _refused(capsys, started)
    assert f"is being run by process {holder.pid}" in err and "wait for it" in err
    assert _files(started) == before
