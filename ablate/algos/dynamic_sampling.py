"""DAPO dynamic sampling (Yu et al., 2025, arXiv:2503.14476 §3.3, the constraint
0 < |{correct}| < G): groups whose rewards are all equal give zero advantage, hence no
gradient, so they are dropped and the batch is refilled by generating more groups.

`dynamic_sampling_filter` is the pure test; `DynamicSampler` is the refill loop's state:

    sampler = DynamicSampler(target_groups=cfg.trainer.tasks_per_step,
                             max_batches=cfg.algo.dynamic_sampling.max_batches)
    while not sampler.done:
        episodes = rollout(next_tasks())
        sampler.add([e.reward for e in episodes], [e.group for e in episodes], episodes)
    episodes, rewards, group_ids = sampler.batch()
    log(sampler.metrics())
"""
from __future__ import annotations

from typing import Any, Hashable, Optional, Sequence

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
