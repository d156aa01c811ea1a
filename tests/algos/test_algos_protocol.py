"""The algorithm protocol: registries as the single source of names, episode-level
weights in thinking mode (through the learner's own packing), a user's estimator and loss
registered from outside the package running a real cell, rollout correction in a cell."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ablate.algos import (ADVANTAGE_ESTIMATORS, ALGORITHMS, LOSS_AGGREGATIONS, POLICY_LOSSES,
                          ROLLOUT_CORRECTIONS, build_algorithm)
from ablate.algos.config import AlgoConfig
from ablate.loop.cell import run_cell
from ablate.apps.cli import compose_config, normalise_overrides
from ablate.loop.config import ALLOWED, ConfigError, validate
from ablate.harness.episode import Segment
from ablate.learners.base import LossInputs
from ablate.learners.batching import collate, pack

TESTS = Path(__file__).parents[1]
SMALL = ["env.num_inboxes=6", "env.emails_per_inbox=40", "env.train_tasks=40",
         "env.test_tasks=16", "trainer.tasks_per_step=2", "trainer.group_size=2",
         "eval.num_tasks=2", "eval.every=0", "eval.at_start=false",
         "harness.max_tokens_per_episode=256", "env.max_turns=4", "run.num_trajectories=0",
         "run.quiet=true", "trainer.max_steps=2", "learner=torch"]


# --- registries -----------------------------------------------------------------------------

def test_config_names_come_from_the_registries():
    for key, reg in [("algo.adv_estimator", ADVANTAGE_ESTIMATORS),
                     ("algo.policy_loss", POLICY_LOSSES), ("algo.loss_agg", LOSS_AGGREGATIONS),
                     ("algo.rollout_correction", ROLLOUT_CORRECTIONS),
                     ("algo.algorithm", ALGORITHMS)]:
        assert ALLOWED[key] is reg, key
    assert {"grpo", "dr_grpo", "rloo", "reinforce_pp_baseline"} <= set(ADVANTAGE_ESTIMATORS)
    assert {"clip", "gspo", "cispo"} <= set(POLICY_LOSSES)
    cfg = compose_config(["algo.adv_estimator=loo"])
    with pytest.raises(ConfigError, match=r"algo.adv_estimator='loo'.*'rloo'"):
        validate(cfg)
    with pytest.raises(ValueError, match="registered twice"):
        POLICY_LOSSES.register("clip")(lambda *a, **k: None)


def test_a_bad_plugin_module_is_a_one_line_config_error():
    cfg = compose_config(["algo.plugins=[no_such_module_xyz]"])
    with pytest.raises(ConfigError, match="algo.plugins: cannot import 'no_such_module_xyz'"):
        validate(cfg)


# --- episode-level aggregation (thinking mode: one segment per turn) -------------------------

def segment(n_tokens: int, seed: int) -> Segment:
    g = torch.Generator().manual_seed(seed)
    lp = (-torch.rand(n_tokens + 2, generator=g)).tolist()
    return Segment(ids=list(range(1, n_tokens + 3)), mask=[0, 0] + [1] * n_tokens, logprobs=lp)


def token_weights(agg: str, turns=(8, 2), micro_batch_tokens=24):
    """Per-episode sums of d loss / d(-A·logprob) through the learner's own pack/collate:
    the weight each episode carries in the loss."""
    episodes = [SimpleNamespace(segments=[segment(3 + (k + i) % 4, 10 * k + i)
                                          for i in range(n)], turns=[])
                for k, n in enumerate(turns)]
    cfg = AlgoConfig(loss_agg=agg)
    algo = build_algorithm(cfg, max_len=64)
    batch = algo.prepare(episodes, [0.0, 1.0], [0, 0], learner=None)
    loss_fn = algo.loss_fn(batch)
    segs, adv = batch.segments, batch.advantages
    groups = pack(segs, micro_batch_tokens)
    assert len(groups) > 2          # the episodes are split across micro-batches
    mbs = [collate(segs, g) for g in groups]
    num_tokens = int(sum(m.mask.sum() for m in mbs))
    num_seqs = int(sum((m.mask.sum(1) > 0).sum() for m in mbs))
    per_episode = [0.0] * len(turns)
    for mb in mbs:
        lp = mb.old_logprobs.clone().double().requires_grad_()
        x = LossInputs(lp, mb.old_logprobs.double(), adv[mb.index].double(), mb.mask,
                       torch.zeros_like(lp), None, num_tokens, num_seqs, index=mb.index)
        loss, _ = loss_fn(x)
        g, = torch.autograd.grad(loss, lp)
        for r, i in enumerate(mb.index):   # ratio 1, unclipped: grad = -A · weight
            per_episode[batch.episode_of[i]] += float(-g[r].sum() / adv[i])
    return per_episode


def test_thinking_mode_episodes_weigh_the_same_whatever_their_turns():
    w8, w2 = token_weights("seq-mean-token-mean", turns=(8, 2))
    assert w8 == pytest.approx(0.5, abs=1e-9) and w2 == pytest.approx(0.5, abs=1e-9)
    # Dr.GRPO: a constant normaliser of (episodes x max_len): a token weighs 1/(2·64)
    tokens = [sum(3 + (k + i) % 4 for i in range(n)) for k, n in enumerate((8, 2))]
    got = token_weights("seq-mean-token-sum-norm", turns=(8, 2))
    assert got == pytest.approx([t / (2 * 64) for t in tokens], abs=1e-9)


def test_the_loss_refuses_to_guess_rows_without_an_index():
    episodes = [SimpleNamespace(segments=[segment(3, 1), segment(4, 2)], turns=[]),
                SimpleNamespace(segments=[segment(3, 3)], turns=[])]
    algo = build_algorithm(AlgoConfig(), max_len=64)
    batch = algo.prepare(episodes, [0.0, 1.0], [0, 0], learner=None)
    mb = collate(batch.segments, [0, 1, 2])
    x = LossInputs(mb.old_logprobs, mb.old_logprobs, batch.advantages, mb.mask,
                   torch.zeros_like(mb.mask), None, 10, 3)
    with pytest.raises(RuntimeError, match="LossInputs.index"):
        algo.loss_fn(batch)(x)


# --- real cells ---------------------------------------------------------------------------------

def cell_rows(tmp_path, monkeypatch, overrides):
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    cfg = compose_config(normalise_overrides([*SMALL, *overrides]))
    run_cell(cfg, tmp_path / "cell")
    return [json.loads(x) for x in (tmp_path / "cell" / "metrics.jsonl").read_text().splitlines()]


def test_user_registered_estimator_and_loss_run_a_thinking_cell(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))
    rows = cell_rows(tmp_path, monkeypatch, [
        "+mode=thinking", "algo.plugins=[algos_user_plugin]",
        "algo.adv_estimator=median_baseline", "algo.policy_loss=vanilla_pg"])
    assert [r["step"] for r in rows] == [1, 2]
    from algos_user_plugin import median_baseline, vanilla_pg
    assert ADVANTAGE_ESTIMATORS["median_baseline"] is median_baseline
    assert POLICY_LOSSES["vanilla_pg"] is vanilla_pg
    for r in rows:
        if r.get("update/skipped"):
            continue
        assert "update/clip_frac_low" not in r            # the user's loss ran, not clip
        assert r["update/train_tokens"] > 0
        assert (r["update/grad_norm"] > 0) == (r["adv/abs_mean"] > 0)
    described = json.loads((tmp_path / "cell" / "objective.json").read_text())
    assert described["adv_estimator"] == "median_baseline"


def test_rollout_correction_logs_mismatch_every_step(tmp_path, monkeypatch):
    rows = cell_rows(tmp_path, monkeypatch, ["+algo=cispo", "algo.rollout_correction=token-tis",
                                             "algo.correction_cap=1.01"])
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        if r.get("update/skipped"):
            continue
        lo, mean, hi = (r[f"rollout_correction/ratio_{k}"] for k in ("min", "mean", "max"))
        assert 0 < lo <= mean <= hi and r["rollout_correction/kl"] >= 0
        assert 0 <= r["rollout_correction/clipped_frac"] <= 1
        # the learner recomputed old logprobs: the PPO ratio at the first pass is exactly 1
        assert r["update/ratio_mean"] == pytest.approx(1.0, abs=1e-6)


def test_docs_list_every_registered_name_and_preset():
    text = (TESTS.parent / "docs" / "algorithms.md").read_text()
    for reg in (ADVANTAGE_ESTIMATORS, POLICY_LOSSES, LOSS_AGGREGATIONS, ROLLOUT_CORRECTIONS):
        for name in reg:
            if reg[name].__module__.startswith("ablate."):
                assert f"`{name}`" in text, name
    for preset in (TESTS.parent / "conf" / "algo").glob("*.yaml"):
        assert f"`{preset.stem}`" in text, preset.stem


@pytest.mark.parametrize("preset,expect", [
    ("rloo", dict(adv_estimator="rloo", policy_loss="clip", loss_agg="seq-mean-token-sum-norm")),
    ("reinforce_pp", dict(adv_estimator="reinforce_pp_baseline", loss_agg="token-mean")),
    ("gspo", dict(policy_loss="gspo", eps_low=3e-4, eps_high=4e-4,
                  loss_agg="seq-mean-token-mean")),
    ("cispo", dict(policy_loss="cispo", loss_agg="token-mean", eps_high=4.0)),
])
def test_new_presets_compose_with_any_mode_and_reward(preset, expect):
    cfg = compose_config(normalise_overrides([f"+algo={preset}", "+mode=thinking",
                                              "+reward=naive"]))
    validate(cfg)
    assert cfg.algo.name == preset
    objective = build_algorithm(cfg.algo, max_len=256).objective
    for key, value in expect.items():
        assert getattr(objective, key) == value, key


# --- the protocol's hooks: explicit, never looked up by name in the loop -------------------

def test_every_registered_algorithm_has_the_protocol_hooks():
    from ablate.algos import AlgorithmBase
    for name in ALGORITHMS.names():
        cls = ALGORITHMS[name]
        assert issubclass(cls, AlgorithmBase), name
        assert cls.experience is None and callable(cls.augment), name


def test_default_augment_returns_its_input_and_with_experience_delegates():
    from ablate.algos import Algorithm
    from ablate.algos.curriculum import Experience, TrajectoryBuffer, WithExperience
    algo = build_algorithm(AlgoConfig(), max_len=64)
    eps, rewards, groups = ["a", "b"], torch.tensor([1.0, 0.0]), [0, 0]
    assert algo.augment(eps, rewards, groups, None) == (eps, rewards, groups, {})
    assert algo.experience is None and isinstance(algo, Algorithm)
    wrapped = WithExperience(algo, Experience(None, TrajectoryBuffer()))
    assert isinstance(wrapped, Algorithm) and wrapped.experience is not None
    assert wrapped.augment(eps, rewards, groups, None) == (eps, rewards, groups, {})


def test_an_algorithm_without_the_hooks_is_rejected_at_build(monkeypatch):
    class Bare:   # the old duck-typed shape: no `experience`, no `augment`
        def __init__(self, objective):
            pass
        describe = shape_rewards = prepare = loss_fn = save = load = lambda *a, **k: None
    monkeypatch.setitem(ALGORITHMS, "bare", Bare)
    with pytest.raises(ConfigError, match=r"algo.algorithm=bare: Bare lacks \['experience', "
                                          r"'augment'\].*AlgorithmBase"):
        build_algorithm(AlgoConfig(algorithm="bare"), max_len=64)


def test_the_loop_looks_up_no_hook_of_the_algorithm_by_name():
    import ast
    import inspect

    import ablate.loop.cell as cell
    calls = [n for n in ast.walk(ast.parse(inspect.getsource(cell)))
             if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
             and n.func.id in ("hasattr", "getattr")]
    assert calls, "the walk finds getattr(policy, ...)"
    on_algorithm = [ast.unparse(n) for n in calls
                    if isinstance(n.args[0], ast.Name) and n.args[0].id == "algorithm"]
    assert not on_algorithm, on_algorithm
