"""Group-relative advantage estimators: one scalar per episode, computed within its group
(the G rollouts of one task), registered in ADVANTAGE_ESTIMATORS (`algo.adv_estimator`).
Every estimator is `fn(rewards[N], group_ids[N], **kw) -> advantages[N]` (float32) and
ignores keyword arguments it does not use (the caller passes norm_std and eps to all).

A group with a single rollout or with all-equal rewards has no relative signal and gets
advantage 0 exactly (never NaN). verl instead treats a singleton group as mean 0, std 1
(advantage = raw reward); we do not, because a baseline-free reward is not what the GRPO
label promises.
"""
from __future__ import annotations

from typing import Hashable, Sequence

import torch

from ablate.algos.registry import ADVANTAGE_ESTIMATORS

RewardsLike = Sequence[float] | torch.Tensor
GroupIdsLike = Sequence[Hashable] | torch.Tensor


def group_index(group_ids: GroupIdsLike) -> tuple[torch.Tensor, list[Hashable]]:
    """Dense indices 0..k-1 (in order of first appearance) and the original ids."""
    ids = group_ids.tolist() if isinstance(group_ids, torch.Tensor) else list(group_ids)
    order: dict[Hashable, int] = {}
    dense = [order.setdefault(g, len(order)) for g in ids]
    return torch.tensor(dense, dtype=torch.long), list(order)


def _rewards_tensor(rewards: RewardsLike) -> torch.Tensor:
    r = torch.as_tensor(rewards, dtype=torch.float64).detach().flatten()
    if not torch.isfinite(r).all():
        raise ValueError("rewards must be finite")
    return r


def compute_advantages(rewards: RewardsLike, group_ids: GroupIdsLike, *, norm_std: bool = True,
                       eps: float = 1e-6) -> torch.Tensor:
    """Per-episode advantage, float32 tensor of shape [N].

    norm_std=True : GRPO, A_i = (r_i - mean_g) / (std_g + eps), std unbiased as torch.std
                    (Shao et al., 2024, DeepSeekMath §4.1.2, outcome supervision).
    norm_std=False: Dr.GRPO, A_i = r_i - mean_g (Liu et al., 2025, arXiv:2503.20783 §3.2).
    """
    if eps <= 0:
        raise ValueError(f"eps={eps} must be > 0")
    r = _rewards_tensor(rewards)
    dense, _ = group_index(group_ids)
    if dense.numel() != r.numel():
        raise ValueError(f"{r.numel()} rewards but {dense.numel()} group ids")
    adv = torch.zeros_like(r)
    for g in range(int(dense.max()) + 1 if dense.numel() else 0):
        members = dense == g
        x = r[members]
        # equality test rather than std == 0: a float mean of equal values can be off by
        # one ulp, and (ulp / (ulp-sized std + eps)) would leak a spurious signal
        if x.numel() < 2 or bool(x.max() == x.min()):
            continue
        centered = x - x.mean()
        adv[members] = centered / (x.std(unbiased=True) + eps) if norm_std else centered
    return adv.to(torch.float32)


@ADVANTAGE_ESTIMATORS.register("grpo")
def grpo_advantages(rewards: RewardsLike, group_ids: GroupIdsLike, *, norm_std: bool = True,
                    eps: float = 1e-6, **_) -> torch.Tensor:
    """GRPO; norm_std=False gives the Dr.GRPO advantage under the GRPO name (verl's
    `norm_adv_by_std_in_grpo=False`)."""
    return compute_advantages(rewards, group_ids, norm_std=norm_std, eps=eps)


@ADVANTAGE_ESTIMATORS.register("dr_grpo")
def dr_grpo_advantages(rewards: RewardsLike, group_ids: GroupIdsLike, *, norm_std: bool = False,
                       eps: float = 1e-6, **_) -> torch.Tensor:
    """Dr.GRPO (Liu et al., 2025 §3.2): mean-centred, never divided by the std."""
    if norm_std:
        raise ValueError("adv_estimator=dr_grpo removes the std division by definition; "
                         "set algo.norm_std=false (or use adv_estimator=grpo)")
    return compute_advantages(rewards, group_ids, norm_std=False, eps=eps)


def _checked(rewards: RewardsLike, group_ids: GroupIdsLike) -> tuple[torch.Tensor, torch.Tensor]:
    r = _rewards_tensor(rewards)
    dense, _ = group_index(group_ids)
    if dense.numel() != r.numel():
        raise ValueError(f"{r.numel()} rewards but {dense.numel()} group ids")
    return r, dense


@ADVANTAGE_ESTIMATORS.register("rloo")
def rloo_advantages(rewards: RewardsLike, group_ids: GroupIdsLike, **_) -> torch.Tensor:
    """REINFORCE leave-one-out (Ahmadian et al., 2024, arXiv:2402.14740 §3.2, eq. 6):
    A_i = r_i - 1/(G-1) Σ_{j≠i} r_j = G/(G-1) (r_i - mean_g). A group of one has no
    baseline: advantage 0."""
    r, dense = _checked(rewards, group_ids)
    adv = torch.zeros_like(r)
    for g in range(int(dense.max()) + 1 if dense.numel() else 0):
        members = dense == g
        x = r[members]
        if x.numel() < 2 or bool(x.max() == x.min()):   # no baseline / no signal: exact 0
            continue
        adv[members] = x - (x.sum() - x) / (x.numel() - 1)
    return adv.to(torch.float32)


@ADVANTAGE_ESTIMATORS.register("reinforce_pp_baseline")
def reinforce_pp_baseline_advantages(rewards: RewardsLike, group_ids: GroupIdsLike, *,
                                     eps: float = 1e-6, **_) -> torch.Tensor:
    """REINFORCE++-baseline (Hu et al., 2025, arXiv:2501.03262 §3.2, "REINFORCE++ w/
    baseline"): the group mean is subtracted, then the batch of centred rewards is divided
    by its (unbiased) std over all N episodes: A_i = a_i / (std_batch(a) + eps),
    a_i = r_i - mean_g. (verl whitens over tokens, weighting long responses more; we
    whiten over episodes. The batch mean of a is 0 by construction, so it is not
    subtracted again.) All-zero a gives exactly 0."""
    r, dense = _checked(rewards, group_ids)
    a = torch.zeros_like(r)
    for g in range(int(dense.max()) + 1 if dense.numel() else 0):
        members = dense == g
        x = r[members]
        if x.numel() >= 2 and bool(x.max() != x.min()):
            a[members] = x - x.mean()
    if a.numel() < 2 or not bool(a.abs().max() > 0):
        return torch.zeros_like(a, dtype=torch.float32)
    return (a / (a.std(unbiased=True) + eps)).to(torch.float32)
