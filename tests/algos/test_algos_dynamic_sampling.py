"""ablate.algos.dynamic_sampling.refill, the cell's DAPO refill loop (Yu et al. 2025,
arXiv:2503.14476 §3.3), against a plain re-implementation of the paper's rule: drop the
groups whose rewards are all equal, generate the missing groups again, at most
max_batches more rounds, truncate to the target."""
from __future__ import annotations

import numpy as np
import pytest

from ablate.algos import refill


def make_rounds(seed: int, group_size: int):
    """rollout_round(r, need) -> (items, rewards, group ids): `need` groups of 0/1 rewards,
    random but a function of (seed, round); items name (round, group, sample)."""
    calls = []

    def rollout_round(r: int, need: int):
        calls.append((r, need))
        rng = np.random.default_rng([seed, r])
        p = rng.choice([0.0, 0.5, 1.0], size=need)        # all-wrong, mixed, all-right
        items, rewards, groups = [], [], []
        for g in range(need):
            for s in range(group_size):
                items.append((r, g, s))
                rewards.append(float(rng.random() < p[g]))
                groups.append(g)
        return items, rewards, groups
    return rollout_round, calls


def plain_dapo(target: int, max_batches: int, rollout_round):
    """The rule as written: per round, keep the groups with 0 < #correct < G."""
    kept, seen, r = [], [], 0
    while True:
        items, rewards, groups = rollout_round(r, target if r == 0 else target - len(kept))
        seen.append(list(rewards))
        for g in dict.fromkeys(groups):
            members = [i for i, h in enumerate(groups) if h == g]
            rs = [rewards[i] for i in members]
            if 0 < sum(rs) < len(rs):
                kept.append(([items[i] for i in members], rs))
        r += 1
        if len(kept) >= target or r > max_batches:
            return kept[:target], seen, r


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("target,max_batches,group_size", [(2, 3, 4), (4, 0, 2), (3, 5, 3)])
def test_refill_keeps_and_refills_groups_as_dapo(seed, target, max_batches, group_size):
    got_round, got_calls = make_rounds(seed, group_size)
    want_round, want_calls = make_rounds(seed, group_size)
    got = refill(target, max_batches, True, got_round)
    kept, seen, rounds = plain_dapo(target, max_batches, want_round)
    assert got_calls == want_calls                    # the same rounds asked for the same need
    assert got.items == [i for its, _ in kept for i in its]
    assert got.rewards.tolist() == [x for _, rs in kept for x in rs]
    assert got.groups == [g for g, (its, _) in enumerate(kept) for _ in its]   # renumbered
    assert got.seen == seen                           # every round's rewards
    n_seen = sum(len(s) // group_size for s in seen)
    n_mixed = sum(1 for s in seen for g in range(0, len(s), group_size)
                  if 0 < sum(s[g:g + group_size]) < group_size)
    assert got.metrics == {"dynamic_sampling/kept_fraction": n_mixed / n_seen,
                           "dynamic_sampling/rounds": float(rounds),
                           "dynamic_sampling/kept_groups": float(len(kept)),
                           "kept_fraction": n_mixed / n_seen}


def test_refill_without_dynamic_sampling_is_one_round_keeping_everything():
    rollout_round, calls = make_rounds(0, 4)
    got = refill(3, 5, False, rollout_round)
    items, rewards, groups = make_rounds(0, 4)[0](0, 3)
    assert calls == [(0, 3)]
    assert (got.items, got.rewards, got.groups) == (items, rewards, groups)
    assert got.seen == [rewards] and got.metrics == {"kept_fraction": 1.0}


def test_refill_stops_after_max_batches_with_a_smaller_batch():
    def all_equal(r, need):
        return [(r, g) for g in range(need) for _ in range(2)], [1.0] * 2 * need, \
            [g for g in range(need) for _ in range(2)]
    got = refill(2, 2, True, all_equal)
    assert got.items == [] and got.rewards.numel() == 0 and got.groups == []
    assert got.metrics["dynamic_sampling/rounds"] == 3.0 and got.metrics["kept_fraction"] == 0
