"""Cells on environments other than the email task: a user's own environment from its
own module and config directory (hydra.searchpath + env._target_), and code repair with
its scripted baseline and reward schemes."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ablate.loop.cell import run_cell
from ablate.apps.cli import compose_config
from ablate.loop.config import ConfigError
from ablate.apps.preflight import check_env_reward

REPO = Path(__file__).resolve().parents[2]
USER_CONF = Path(__file__).resolve().parents[1] / "envs_external" / "conf"
SEARCH = f"hydra.searchpath=[file://{USER_CONF}]"


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_user_environment_runs_a_two_step_cell(tmp_path):
    cfg = compose_config([SEARCH, "env=counter", "reward.name=outcome",
                          "trainer.max_steps=2", "trainer.tasks_per_step=2",
                          "trainer.group_size=2", "eval.num_tasks=2", "eval.every=0",
                          "harness.max_new_tokens_per_turn=16", "run.quiet=true",
                          "eval.samples=1", "eval.greedy=false"])   # one row per question
    assert cfg.env._target_ == "envs_external.counter.CounterEnv"
    run_cell(cfg, tmp_path)
    train = rows(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in train] == [1, 2] and all(r["episodes"] == 4 for r in train)
    evals = rows(tmp_path / "eval.jsonl")
    assert {r["step"] for r in evals} == {0, 2} and len(evals) == 4
    assert all("adds" in r and "reward/correct" in r for r in evals)   # its own metrics
    assert evals[0]["task_id"].startswith("test-")
    text = (tmp_path / "trajectories.txt").read_text()
    assert "You control a counter" not in text and "The counter is at" in text


def test_another_environments_reward_is_a_config_error():
    cfg = compose_config([SEARCH, "env=counter", "reward.name=shaped"])
    with pytest.raises(ConfigError, match=r"reward.name='shaped' is another environment's "
                                          r"scheme; env=counter allows \['naive', 'outcome'\]"):
        check_env_reward(cfg)


@pytest.mark.parametrize("state_change", [False, True])
def test_coderepair_scripted_cell_logs_its_reward_and_behaviour(tmp_path, state_change):
    cfg = compose_config(["env=coderepair", "model=scripted", "eval.num_tasks=6",
                          "reward.name=tool_bonus", f"reward.state_change_bonus={state_change}",
                          "run.quiet=true", "eval.samples=1", "eval.greedy=false"])
    check_env_reward(cfg)
    run_cell(cfg, tmp_path)
    evals = rows(tmp_path / "eval.jsonl")
    assert len(evals) == 6 and all(r["correct"] for r in evals)   # the honest fixer
    for r in evals:
        assert r["test_runs"] >= 1 and r["idle_test_runs"] == 0 and r["edits"] >= 1
        assert r["reward"] == pytest.approx(r["reward/correct"] + r["reward/test_bonus"])
        assert r["reward/test_bonus"] > 0


def cli(args, tmp_path: Path, timeout=600):
    env = dict(os.environ, WANDB_MODE="disabled", ABLATE_CACHE=str(tmp_path / "cache"),
               PYTHONPATH=f"{REPO}{os.pathsep}{REPO / 'tests'}")
    return subprocess.run([sys.executable, "-m", "ablate", f"hydra.run.dir={tmp_path / 'cell'}",
                           "run.quiet=true", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_coderepair_alone_runs_to_complete_with_its_default_reward(tmp_path):
    """`python -m ablate env=coderepair` (no reward override; the tiny model) completes
    with code repair's default_reward, `outcome`, not the email task's `shaped`."""
    proc = cli(["env=coderepair", "trainer.max_steps=1", "trainer.tasks_per_step=1",
                "trainer.group_size=2", "eval.num_tasks=2", "eval.samples=1",
                "eval.greedy=false", "env.train_tasks=4", "env.test_tasks=2",
                "env.max_turns=3", "harness.max_new_tokens_per_turn=24",
                "learner=torch"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cell = tmp_path / "cell"
    assert (cell / "COMPLETE").exists()
    evals = rows(cell / "eval.jsonl")
    assert len(evals) == 4 and all("reward/correct" in r and "test_runs" in r for r in evals)
    assert not any("reward/process" in r for r in evals)        # not the email scheme
    assert "name: outcome" in (cell / "config.yaml").read_text()
    described = json.loads((cell / "environment.json").read_text())
    assert described["name"] == "coderepair" and described["default_reward"] == "outcome"
    assert "idle_test_runs" in described["behaviour_labels"]


def test_user_environment_alone_runs_with_its_own_default_reward(tmp_path):
    """An environment from a module outside ablate/ (docs/environments.md's key-value
    world) declares its default reward, a scheme of its own: `env=kvlookup` alone uses it."""
    proc = cli([f"hydra.searchpath=[file://{USER_CONF}]", "env=kvlookup", "model=scripted",
                "eval.num_tasks=4", "eval.samples=1", "eval.greedy=false"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cell = tmp_path / "cell"
    assert (cell / "COMPLETE").exists()
    evals = rows(cell / "eval.jsonl")
    assert len(evals) == 4 and all(r["correct"] for r in evals)     # the scripted baseline
    assert all(r["reward"] == pytest.approx(1.1) and r["reward/looked_up"] == 0.1
               for r in evals)
    assert all(r["gets"] == 1 and r["missing_keys"] == 0 for r in evals)
    assert "name: kv_lookup" in (cell / "config.yaml").read_text()


def test_masks_let_the_tiny_model_act_in_the_user_environment(tmp_path):
    """docs/environments.md's measurement: with the key-value world's mask_candidates the
    tiny model (warm-started on email only) writes well-formed calls (without: none)."""
    cfg = compose_config([SEARCH, "env=kvlookup", "trainer.max_steps=0", "eval.num_tasks=8",
                          "eval.samples=1", "eval.greedy=false", "run.quiet=true"])
    run_cell(cfg, tmp_path)
    evals = rows(tmp_path / "eval.jsonl")
    calls = sum(r["turns"] for r in evals)
    assert sum(r["malformed_calls"] for r in evals) <= calls // 4
    assert sum(r["gets"] for r in evals) >= len(evals) // 2
