"""Cells on environments other than the email task: a user's own environment from its
own module and config directory (hydra.searchpath + env._target_), and code repair with
its scripted baseline and reward schemes."""
import json
from pathlib import Path

import pytest

from ablate.loop.cell import run_cell
from ablate.apps.cli import compose_config
from ablate.loop.config import ConfigError
from ablate.apps.preflight import check_env_reward

USER_CONF = Path(__file__).resolve().parent / "envs_external" / "conf"
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
    cfg = compose_config([SEARCH, "env=counter"])       # the default reward is `shaped`
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
