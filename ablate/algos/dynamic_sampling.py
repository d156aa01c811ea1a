"""DAPO dynamic sampling (Yu et al., 2025, arXiv:2503.14476 §3.2, the constraint
0 < |{correct}| < G): groups whose rewards are all equal give zero advantage, hence no
gradient, so they are dropped and the batch is refilled by generating more groups.

`dynamic_sampling_filter` is the pure test; `DynamicSampler` is the refill loop's state;
`refill` is the loop itself, over a callable that rolls out one round (the cell's):

    kept = refill(cfg.trainer.tasks_per_step, cfg.algo.dynamic_sampling.max_batches,
                  cfg.algo.dynamic_sampling.enable, rollout_round)
    # rollout_round(round, need) -> (episodes, rewards, group ids) of `need` new groups
    train_on(kept.items, kept.rewards, kept.groups); log(kept.metrics)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Hashable, Optional, Sequence

import torch

from ablate.algos.advantages import GroupIdsLike, RewardsLike, _rewards_tensor, group_index


def dynamic_sampling_filter(rewards: RewardsLike,
                            group_ids: GroupIdsLike) -> tuple[list[Hashable], torch.Tensor]:
    """(ids of the groups to keep, in order of first appearance; bool mask [N] over episodes).
    A group is kept when its reward std is > 0, i.e. it has >= 2 members that differ."""
    r = _rewards_tensor(rewards)
    dense, ids = group_index(group_ids)
    if dense.numel() != r.numel():
        raise ValueError(f"{r.numel()} rewards but {dense.numel()} group ids")
    keep_group = []
    for g in range(len(ids)):
        x = r[dense == g]
        keep_group.append(x.numel() >= 2 and bool(x.max() != x.min()))
    keep = torch.tensor(keep_group, dtype=torch.bool)
    mask = keep[dense] if dense.numel() else torch.zeros(0, dtype=torch.bool)
    return [g for g, k in zip(ids, keep_group) if k], mask


class DynamicSampler:
    """Accumulates kept groups over at most 1 + max_batches generation rounds (the first
    batch plus `max_batches` refills) until `target_groups` are kept. Surplus groups of
    the last round are dropped (as DAPO/verl truncate to the train batch size); if the
    rounds run out first the batch is simply smaller, possibly empty."""

    def __init__(self, target_groups: int, max_batches: int):
        if target_groups < 1 or max_batches < 0:
            raise ValueError(f"need target_groups >= 1 and max_batches >= 0, got "
                             f"{target_groups}, {max_batches}")
        self.target_groups = target_groups
        self.max_batches = max_batches
        self.rounds = 0
        self.seen_groups = 0
        self._kept: list[tuple[list[Any], list[float]]] = []   # (items, rewards) per group

    @property
    def kept_groups(self) -> int:
        return len(self._kept)

    @property
    def done(self) -> bool:
        return self.kept_groups >= self.target_groups or self.rounds > self.max_batches

    def add(self, rewards: RewardsLike, group_ids: GroupIdsLike,
            items: Optional[Sequence[Any]] = None) -> int:
        """Offer one generated batch; returns how many of its groups were kept. `items`
        (e.g. the Episodes) travel with their rewards; default: (round, index) pairs."""
        if self.done:
            raise RuntimeError("DynamicSampler is done; call batch()")
        r = _rewards_tensor(rewards).tolist()
        items = list(items) if items is not None else [(self.rounds, i) for i in range(len(r))]
        if len(items) != len(r):
            raise ValueError(f"{len(r)} rewards but {len(items)} items")
        dense, ids = group_index(group_ids)
        kept_ids, _ = dynamic_sampling_filter(r, group_ids)
        kept = set(kept_ids)
        for g, gid in enumerate(ids):
            if gid in kept:
                members = [i for i in range(len(r)) if int(dense[i]) == g]
                self._kept.append(([items[i] for i in members], [r[i] for i in members]))
        self.rounds += 1
        self.seen_groups += len(ids)
        return len(kept_ids)

    def batch(self) -> tuple[list[Any], torch.Tensor, list[int]]:
        """(items, rewards float32 [N], group ids renumbered 0..k-1), at most target groups."""
        items, rewards, groups = [], [], []
        for g, (its, rs) in enumerate(self._kept[: self.target_groups]):
            items += its
            rewards += rs
            groups += [g] * len(its)
        return items, torch.tensor(rewards, dtype=torch.float32), groups

    def metrics(self) -> dict[str, float]:
        return {
            "dynamic_sampling/kept_fraction":
                self.kept_groups / self.seen_groups if self.seen_groups else 0.0,
            "dynamic_sampling/rounds": float(self.rounds),
            "dynamic_sampling/kept_groups": float(min(self.kept_groups, self.target_groups)),
        }


@dataclass
class Refilled:
    """The step's training batch after dynamic sampling, and what was generated for it."""
    items: list             # the kept episodes (every one without dynamic sampling)
    rewards: torch.Tensor   # their rewards
    groups: list            # their group ids (renumbered 0..k-1 with dynamic sampling)
    seen: list              # the rewards of every round, kept or not
    metrics: dict           # kept_fraction (+ dynamic_sampling/* when enabled)


def refill(target_groups: int, max_batches: int, enable: bool,
           rollout_round: Callable[[int, int], tuple]) -> Refilled:
    """Round 0 generates `target_groups` groups; with `enable`, groups of equal rewards
    are dropped and each refill round r = 1..max_batches asks for the groups still
    missing, until `target_groups` are kept. `rollout_round(r, need)` -> (items, rewards,
    group ids). Without `enable`: one round, every group kept."""
    # keep 0 < |{correct}| < G, refill: DAPO (Yu et al. 2025, arXiv:2503.14476 §3.2)
    if not enable:
        items, rewards, groups = rollout_round(0, target_groups)
        return Refilled(items, rewards, groups, [rewards], {"kept_fraction": 1.0})
    sampler, seen = DynamicSampler(target_groups, max_batches), []
    while not sampler.done:
        need = target_groups - sampler.kept_groups   # round 0: all of them
        items, rewards, groups = rollout_round(sampler.rounds, need)
        seen.append(rewards)
        sampler.add(rewards, groups, items)
    metrics = sampler.metrics()
    metrics["kept_fraction"] = metrics["dynamic_sampling/kept_fraction"]
    return Refilled(*sampler.batch(), seen, metrics)
