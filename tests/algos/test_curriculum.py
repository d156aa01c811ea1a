"""Curriculum over hop count and the trajectory buffer (ablate.algos.curriculum): levels by
schedule and by promotion, the pool they allow, storage / capacity / replay into
all-failed groups with the behaviour policy's log-probabilities kept, revisits, exact
state round trips, and a GRPO cell with both that resumes after SIGKILL."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import test_harness_util as U
from ablate.algos import build_algorithm
from ablate.apps.cli import compose_config, normalise_overrides
from ablate.algos.curriculum import Curriculum, Experience, TrajectoryBuffer, WithExperience
from ablate.envs.email.data import Task
from ablate.harness.episode import Episode, Segment
from test_algos_rft import cell_resumes_after_sigkill

TASKS = [Task(f"t{i}", f"q{i}", "a", ["m0"], U.INBOX, "2001-12-01", h)
         for i, h in enumerate([1, 1, 2, 3, 2, 1])]


def episode(task, correct, group=0, sample=0, lp=-0.5):
    seg = Segment(ids=[1, 2, 3, 4], mask=[0, 0, 1, 1], logprobs=[0.0, 0.0, lp, lp])
    return Episode(task=task, group=group, sample=sample, segments=[seg], correct=correct)


def test_schedule_levels_and_pool():
    c = Curriculum(mode="schedule", start_level=1, every=2)
    assert [c.level(s) for s in (1, 2, 3, 4, 5)] == [1, 1, 2, 2, 3]
    assert [t.id for t in c.pool(TASKS, 1)] == ["t0", "t1", "t5"]
    assert [t.id for t in c.pool(TASKS, 3)] == ["t0", "t1", "t2", "t4", "t5"]
    hard = [t for t in TASKS if t.hops >= 2]
    assert {t.hops for t in c.pool(hard, 1)} == {2}     # nothing that easy: the easiest
    with pytest.raises(ValueError, match="algo.curriculum.mode='steps'"):
        Curriculum(mode="steps")


def test_promotion_on_training_accuracy_and_state_round_trip():
    c = Curriculum(mode="promotion", start_level=1, promote_at=0.5, window=2)
    for acc, level in [(0.0, 1), (0.75, 1), (0.5, 2), (0.9, 2), (0.0, 2), (0.9, 2), (0.9, 3)]:
        c.observe(acc)
        assert c.level(99) == level, acc
    c.observe(0.2)
    d = Curriculum(mode="promotion", start_level=1, promote_at=0.5, window=2)
    d.load_state_dict(c.state_dict())
    for acc in (0.9, 0.9):
        c.observe(acc), d.observe(acc)
    assert c.state_dict() == d.state_dict() and d.level(1) == 4


def test_buffer_stores_successes_and_replays_them_into_failed_groups():
    b = TrajectoryBuffer(capacity=3, replay=1, revisit=0.5)
    b.store([episode(TASKS[0], True, lp=-0.1), episode(TASKS[0], False),
             episode(TASKS[1], True, lp=-0.2)], [1.0, 0.0, 1.0])
    assert [e.task.id for e, _ in b.items] == ["t0", "t1"]
    step = [episode(TASKS[0], False, 0, 0), episode(TASKS[0], False, 0, 1),
            episode(TASKS[1], True, 1, 0), episode(TASKS[1], False, 1, 1),
            episode(TASKS[2], False, 2, 0), episode(TASKS[2], False, 2, 1)]
    eps, rewards, groups, n = b.replay_into(step, [0, 0, 1, 0, 0, 0], [0, 0, 1, 1, 2, 2])
    assert n == 1 and groups == [0, 0, 1, 1, 2, 2, 0] and rewards.tolist()[-1] == 1.0
    replayed = eps[-1]
    assert (replayed.task.id, replayed.group, replayed.sample) == ("t0", 0, 2)
    assert replayed.segments[0].logprobs == [0.0, 0.0, -0.1, -0.1]   # behaviour policy's
    b.store([episode(TASKS[3], True), episode(TASKS[4], True)], [1.0, 1.0])
    assert [e.task.id for e, _ in b.items] == ["t1", "t3", "t4"]     # oldest dropped


def test_revisits_come_from_the_buffer_within_the_pool():
    exp = Experience(Curriculum(mode="schedule", start_level=2, every=100),
                     TrajectoryBuffer(capacity=8, replay=1, revisit=0.5))
    exp.buffer.store([episode(TASKS[2], True), episode(TASKS[3], True)], [1.0, 1.0])
    picked = exp.sample(TASKS, 4, 1, np.random.default_rng(0))
    again = exp.sample(TASKS, 4, 1, np.random.default_rng(0))
    assert [t.id for t in picked] == [t.id for t in again]
    assert picked[0].id == "t2" and len({t.id for t in picked}) == 4   # t3 has 3 hops
    assert all(t.hops <= 2 for t in picked) and exp.last == {"pool": 5, "revisited": 1}


def test_config_wraps_the_algorithm_and_saves_its_state(tmp_path):
    cfg = compose_config(normalise_overrides([
        "+algo=grpo", "algo.curriculum.enable=true", "algo.buffer.enable=true"]))
    alg = build_algorithm(cfg.algo, max_len=256, cfg=cfg)
    assert isinstance(alg, WithExperience) and alg.objective.adv_estimator == "grpo"
    assert set(alg.describe()) >= {"curriculum", "buffer", "adv_estimator"}
    alg.experience.buffer.store([episode(TASKS[0], True)], [1.0])
    alg.save(tmp_path, 3)
    fresh = build_algorithm(cfg.algo, max_len=256, cfg=cfg)
    fresh.load(tmp_path, 3)
    assert [e.task for e, _ in fresh.experience.buffer.items] == [TASKS[0]]
    plain = build_algorithm(compose_config(["algo.buffer.enable=false"]).algo, max_len=256)
    assert not isinstance(plain, WithExperience)


def test_grpo_with_curriculum_and_buffer_runs_a_cell_and_resumes(tmp_path):
    rows = cell_resumes_after_sigkill(
        ["+algo=grpo", "algo.curriculum.enable=true", "algo.curriculum.mode=promotion",
         "algo.curriculum.window=1", "algo.curriculum.promote_at=0.0",
         "algo.buffer.enable=true"], tmp_path)
    assert [r["curriculum/level"] for r in rows] == [1.0, 2.0]
    assert all("buffer/size" in r and "buffer/replayed" in r for r in rows)
