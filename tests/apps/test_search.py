"""Optuna search machinery: ask/tell over an SQLite study, resume, pruning, best overrides.

The cell is replaced by a recording double that reports given intermediate values, so
these tests exercise the search logic exactly; a real-cell search is in test_cell.py."""
from __future__ import annotations

import optuna
import pytest
import yaml
from optuna.trial import TrialState

from ablate.apps.cli import compose_config
from ablate.loop.config import validate
from ablate.apps.search import SearchSpaceError, load_space, params_key, run_search

SPACE = {
    "study_name": "t",
    "direction": "maximize",
    "metric": "eval/accuracy",
    "base_overrides": ["+algo=dapo", "trainer.max_steps=2", "eval.every=1"],
    "params": {"algo.eps_high": {"type": "float", "low": 0.2, "high": 0.35},
               "algo.entropy_coef": {"type": "categorical", "choices": [0.0, 0.01]}},
    "sampler": {"type": "random", "seed": 0},
    "pruner": {"type": "median", "n_startup_trials": 2, "n_warmup_steps": 0},
}


@pytest.fixture
def space(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(SPACE))
    return load_space(path)


class FakeCell:
    """Records calls; reports accuracy = eps_high (so the optimum is known)."""

    def __init__(self, values=None, crash_on=None):
        self.calls, self.values, self.crash_on = [], values, crash_on

    def __call__(self, cfg, cell_dir, on_eval=None):
        validate(cfg)
        self.calls.append((cell_dir.name, cfg.algo.eps_high))
        if self.crash_on is not None and len(self.calls) == self.crash_on:
            raise KeyboardInterrupt  # the process dies mid-trial
        values = self.values.pop(0) if self.values else [cfg.algo.eps_high] * 2
        summary = None
        for step, v in enumerate(values, 1):
            summary = {"step": step, "eval/accuracy": v}
            on_eval(step, summary)
        return {"final_eval": summary}


def storage(tmp_path):
    return f"sqlite:///{tmp_path / 'study.db'}"


def test_search_runs_to_n_trials_and_writes_best(space, tmp_path):
    space["pruner"] = {"type": "none"}
    cell = FakeCell()
    study = run_search(space, n_trials=4, storage=storage(tmp_path), out_dir=tmp_path / "o",
                       run_fn=cell)
    done = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(done) == 4 and len(cell.calls) == 4
    assert study.best_value == pytest.approx(max(eps for _, eps in cell.calls))
    best = (tmp_path / "o" / "best_overrides.txt").read_text().split()
    assert "+algo=dapo" in best and any(o.startswith("algo.eps_high=") for o in best)
    cfg = compose_config(best)  # the written overrides compose to a valid config
    validate(cfg)
    assert cfg.algo.eps_high == pytest.approx(study.best_params["algo.eps_high"])


def test_search_resumes_without_rerunning_finished_trials(space, tmp_path):
    space["pruner"] = {"type": "none"}
    first = FakeCell()
    run_search(space, n_trials=2, storage=storage(tmp_path), out_dir=tmp_path / "o", run_fn=first)
    second = FakeCell()
    study = run_search(space, n_trials=4, storage=storage(tmp_path), out_dir=tmp_path / "o",
                       run_fn=second)
    assert len(first.calls) == 2 and len(second.calls) == 2
    assert len(study.get_trials(states=(TrialState.COMPLETE,))) == 4


def test_interrupted_trial_is_reasked_with_same_params_and_cell_dir(space, tmp_path):
    space["pruner"] = {"type": "none"}
    crashing = FakeCell(crash_on=2)
    with pytest.raises(KeyboardInterrupt):
        run_search(space, n_trials=3, storage=storage(tmp_path), out_dir=tmp_path / "o",
                   run_fn=crashing)
    interrupted_dir = crashing.calls[-1][0]
    again = FakeCell()
    study = run_search(space, n_trials=3, storage=storage(tmp_path), out_dir=tmp_path / "o",
                       run_fn=again)
    assert again.calls[0][0] == interrupted_dir  # same params => same (resumable) cell dir
    states = [t.state for t in study.get_trials()]
    assert states.count(TrialState.FAIL) == 1 and states.count(TrialState.COMPLETE) == 3


def test_trial_with_bad_intermediate_value_is_pruned(space, tmp_path):
    cell = FakeCell(values=[[0.8, 0.8], [0.8, 0.8], [0.0, 0.0]])
    study = run_search(space, n_trials=3, storage=storage(tmp_path), out_dir=tmp_path / "o",
                       run_fn=cell)
    states = [t.state for t in study.get_trials()]
    assert states == [TrialState.COMPLETE, TrialState.COMPLETE, TrialState.PRUNED]
    pruned = study.get_trials(states=(TrialState.PRUNED,))[0]
    assert pruned.intermediate_values == {1: 0.0}  # stopped at the first bad report


def test_params_key_is_stable_and_order_free():
    assert params_key({"a": 1, "b": 2}) == params_key({"b": 2, "a": 1})
    assert params_key({"a": 1}) != params_key({"a": 2})


@pytest.mark.parametrize("patch,needle", [
    ({"params": {"x": {"type": "gaussian"}}}, "params.x.type"),
    ({"pruner": {"type": "asha"}}, "pruner.type"),
    ({"direction": "up"}, "direction"),
])
def test_bad_search_space_is_rejected(tmp_path, patch, needle):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**SPACE, **patch}))
    with pytest.raises(SearchSpaceError, match=needle.replace(".", r"\.")):
        load_space(path)


def test_committed_search_spaces_load_and_compose():
    from pathlib import Path
    root = Path(__file__).resolve().parents[2] / "sweeps"
    files = sorted(root.glob("*.yaml"))
    assert files
    for f in files:
        sp = load_space(f)
        params = {k: (d.low if hasattr(d, "low") else d.choices[0])
                  for k, d in sp["distributions"].items()}
        from ablate.apps.search import trial_overrides
        validate(compose_config(trial_overrides(sp, params, [])))
    assert optuna.__version__.split(".")[0] >= "4"


@pytest.mark.heavy
def test_search_over_real_two_step_cells(tmp_path, monkeypatch):
    """4 trials of real 2-step cells (tiny model, small mailbox), then a resumed study."""
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_MODE", "disabled")
    space_file = tmp_path / "s.yaml"
    space_file.write_text(yaml.safe_dump({
        **SPACE, "pruner": {"type": "none"},
        "base_overrides": ["+algo=grpo", "trainer.max_steps=2", "eval.every=1",
                           "env.num_inboxes=6", "env.emails_per_inbox=40",
                           "env.train_tasks=40", "env.test_tasks=16",
                           "trainer.tasks_per_step=2", "trainer.group_size=2",
                           "eval.num_tasks=4", "env.max_turns=4", "learner=torch",
                           "run.wandb_mode=disabled", "run.quiet=true"]}))
    space = load_space(space_file)
    study = run_search(space, n_trials=2, storage=storage(tmp_path), out_dir=tmp_path / "o")
    study = run_search(space, n_trials=4, storage=storage(tmp_path), out_dir=tmp_path / "o")
    done = study.get_trials(states=(TrialState.COMPLETE,))
    assert len(done) == 4
    for t in done:
        cell = tmp_path / "o" / f"trial_{params_key(t.params)}"
        assert (cell / "COMPLETE").exists()
        assert t.intermediate_values.keys() == {1, 2}   # fed by the periodic evaluations
        assert 0.0 <= t.value <= 1.0
    assert (tmp_path / "o" / "best_overrides.txt").exists()


def test_testbed_space_loads_and_one_real_trial_runs(tmp_path, monkeypatch):
    """sweeps/testbed.yaml (issue 17): its objective is the sampled accuracy of a real cell,
    here shrunk to one step on a small mailbox by extra overrides (last one wins)."""
    from pathlib import Path
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_MODE", "disabled")
    space = load_space(Path(__file__).resolve().parents[2] / "sweeps" / "testbed.yaml")
    assert space["metric"] == "eval/accuracy"
    small = ["trainer.max_steps=1", "eval.every=1", "env.num_inboxes=6",
             "env.emails_per_inbox=40", "env.train_tasks=40", "env.test_tasks=16",
             "eval.num_tasks=3", "env.max_turns=3", "harness.max_tokens_per_episode=192",
             "learner=torch"]
    study = run_search(space, n_trials=1, storage=storage(tmp_path), out_dir=tmp_path / "o",
                       extra_overrides=small)
    (t,) = study.get_trials(states=(TrialState.COMPLETE,))
    rows = (tmp_path / "o" / f"trial_{params_key(t.params)}" / "eval.jsonl").read_text()
    import json
    evals = [json.loads(x) for x in rows.splitlines()]
    assert len(evals) == 3 * 2 and {e["decoding"] for e in evals} == {"sampled"}
    assert t.value == pytest.approx(sum(e["correct"] for e in evals) / 6)
