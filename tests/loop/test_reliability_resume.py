"""Resume checks what it resumes: a changed result-changing key is refused (naming the
keys) unless run.allow_config_change=true (then recorded); a complete cell re-run with
another config is skipped with a WARNING naming the keys; a resume past the last
checkpoint rebuilds summary.json from the rows; a torn metrics row of a checkpointed step
comes back from its checkpoint."""
from __future__ import annotations

import json
import logging
import shutil

import pytest

import ablate.loop.cell as cell_mod
from ablate.apps.cli import compose_config
from ablate.core.errors import ConfigError
from ablate.loop.cell import run_cell

TINY = ["env.num_inboxes=4", "env.emails_per_inbox=30", "env.train_tasks=20",
        "env.test_tasks=8", "trainer.tasks_per_step=1", "trainer.group_size=2",
        "eval.num_tasks=2", "eval.samples=1", "eval.greedy=false", "eval.every=1",
        "harness.max_tokens_per_episode=96", "env.max_turns=2", "run.num_trajectories=1",
        "trainer.max_steps=2", "learner=torch", "learner.checkpoint_every=1",
        "run.quiet=true", "run.wandb_mode=disabled"]


class Killed(BaseException):
    """Stands in for SIGKILL: nothing after it runs, no handler catches it."""


def cfg_of(tmp, *extra):
    return compose_config([*TINY, f"env.cache_dir={tmp / 'cache'}", *extra])


@pytest.fixture(scope="module")
def cells(tmp_path_factory):
    """(interrupted after step 1's checkpoint, complete), each run once per module."""
    root = tmp_path_factory.mktemp("cells")
    done = root / "complete"
    run_cell(cfg_of(root), done)
    step = cell_mod.train_step

    def dies_at_2(s):
        if s.step == 2:
            raise Killed()
        return step(s)
    cell_mod.train_step = dies_at_2
    try:
        with pytest.raises(Killed):
            run_cell(cfg_of(root), root / "interrupted")
    finally:
        cell_mod.train_step = step
    return root


def copy(cells, name, tmp_path):
    shutil.copytree(cells / name, tmp_path / name)
    return tmp_path / name


def steps(cell):
    return [json.loads(x)["step"] for x in (cell / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("change,key", [(["+reward=outcome"], "reward.name"),
                                        (["trainer.lr=0.01"], "trainer.lr")])
def test_resume_with_a_changed_reward_or_lr_is_refused(change, key, cells, tmp_path):
    cell = copy(cells, "interrupted", tmp_path)
    before = (cell / "config.yaml").read_text()
    with pytest.raises(ConfigError) as err:
        run_cell(cfg_of(cells, *change), cell)
    text = str(err.value)
    assert key in text and "run.allow_config_change=true" in text and "\n" not in text
    assert (cell / "config.yaml").read_text() == before      # nothing rewritten
    assert steps(cell) == [1]


def test_allowed_config_change_resumes_and_is_recorded(cells, tmp_path):
    cell = copy(cells, "interrupted", tmp_path)
    summary = run_cell(cfg_of(cells, "trainer.lr=0.01", "run.allow_config_change=true"), cell)
    assert summary["final_accuracy"] is not None
    rows = [json.loads(x) for x in (cell / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert "trainer.lr 0.0001 -> 0.01" in rows[1]["resume/config_changes"]
    change = json.loads((cell / "config_changes.jsonl").read_text())
    assert change["step"] == 1 and change["changes"]["trainer.lr"] == [0.0001, 0.01]


def test_a_logging_only_change_resumes_silently(cells, tmp_path):
    cell = copy(cells, "interrupted", tmp_path)
    run_cell(cfg_of(cells, "run.quiet=false", "run.num_threads=2"), cell)
    assert steps(cell) == [1, 2] and not (cell / "config_changes.jsonl").exists()


def test_a_complete_cell_rerun_with_another_config_warns_naming_the_keys(cells, tmp_path,
                                                                         caplog):
    cell = copy(cells, "complete", tmp_path)
    with caplog.at_level(logging.INFO, logger="ablate.loop.cell"):
        summary = run_cell(cfg_of(cells, "trainer.lr=0.01"), cell)
    assert summary == json.loads((cell / "summary.json").read_text())
    warn = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warn and "trainer.lr 0.0001 -> 0.01" in warn[0].getMessage()


def test_resume_after_the_last_checkpoint_rebuilds_the_summary(cells, tmp_path):
    cell = copy(cells, "complete", tmp_path)
    expected = json.loads((cell / "summary.json").read_text())
    (cell / "COMPLETE").unlink()
    (cell / "summary.json").unlink()          # killed between the checkpoint and COMPLETE
    summary = run_cell(cfg_of(cells), cell)
    assert summary["final_accuracy"] == expected["final_accuracy"] is not None
    final = {k: v for k, v in summary["final_eval"].items() if k != "eval/seconds"}
    assert final == {k: v for k, v in expected["final_eval"].items() if k != "eval/seconds"}
    assert (cell / "COMPLETE").exists() and steps(cell) == [1, 2]


def test_a_torn_row_of_a_checkpointed_step_is_restored(cells, tmp_path):
    cell = copy(cells, "interrupted", tmp_path)
    text = (cell / "metrics.jsonl").read_text()
    (cell / "metrics.jsonl").write_text(text[: len(text) // 2])   # step 1's row torn
    run_cell(cfg_of(cells), cell)
    assert steps(cell) == [1, 2]
    reference = [json.loads(x) for x in (cells / "complete" / "metrics.jsonl").read_text()
                 .splitlines()]
    got = [json.loads(x) for x in (cell / "metrics.jsonl").read_text().splitlines()]
    assert got[0]["reward/mean"] == reference[0]["reward/mean"]


def flip_middle(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_flipped_byte_in_the_newest_checkpoint_resumes_from_the_previous(cells, tmp_path,
                                                                          caplog):
    cell = copy(cells, "complete", tmp_path)
    for name in ("COMPLETE", "summary.json"):
        (cell / name).unlink()
    flip_middle(cell / "ckpt" / "step_00000002" / "learner.pt")
    with caplog.at_level(logging.WARNING):
        run_cell(cfg_of(cells), cell)
    assert "step_00000002" in caplog.text and "corrupt" in caplog.text
    timing = ("_s", "seconds", "tokens_per_s")
    strip = lambda rows: [{k: v for k, v in r.items() if not k.endswith(timing)}  # noqa: E731
                          for r in rows]
    load = lambda c: [json.loads(x) for x in (c / "metrics.jsonl").read_text().splitlines()]  # noqa: E731
    assert strip(load(cell)) == strip(load(cells / "complete"))   # step 2 redone identically


def test_no_valid_checkpoint_is_a_one_line_cli_error(cells, tmp_path, capsys, monkeypatch):
    from ablate.apps import cli
    cell = copy(cells, "interrupted", tmp_path)
    flip_middle(cell / "ckpt" / "step_00000001" / "learner.pt")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        cli.main([*TINY, f"env.cache_dir={cells / 'cache'}", f"hydra.run.dir={cell}"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("ablate: error: no usable checkpoint in ") and "step_00000001" in err
