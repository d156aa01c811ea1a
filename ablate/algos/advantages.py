"""Group-relative advantage estimators: one scalar per episode, computed within its group
(the G rollouts of one task).

A group with a single rollout or with all-equal rewards has no relative signal and gets
advantage 0 exactly (never NaN). verl instead treats a singleton group as mean 0, std 1
(advantage = raw reward); we do not, because a baseline-free reward is not what the GRPO
label promises.
"""
from __future__ import annotations

from typing import Callable, Hashable, Sequence

import torch

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


def grpo_advantages(rewards: RewardsLike, group_ids: GroupIdsLike, *, norm_std: bool = True,
                    eps: float = 1e-6) -> torch.Tensor:
    """GRPO; norm_std=False gives the Dr.GRPO advantage under the GRPO name (verl's
    `norm_adv_by_std_in_grpo=False`)."""
    return compute_advantages(rewards, group_ids, norm_std=norm_std, eps=eps)


def dr_grpo_advantages(rewards: RewardsLike, group_ids: GroupIdsLike, *, norm_std: bool = False,
                       eps: float = 1e-6) -> torch.Tensor:
    """Dr.GRPO (Liu et al., 2025 §3.2): mean-centred, never divided by the std."""
    if norm_std:
        raise ValueError("adv_estimator=dr_grpo removes the std division by definition; "
                         "set algo.norm_std=false (or use adv_estimator=grpo)")
    return compute_advantages(rewards, group_ids, norm_std=False, eps=eps)


AdvantageEstimator = Callable[..., torch.Tensor]

# name (algo.adv_estimator) -> fn(rewards, group_ids, *, norm_std, eps) -> Tensor[N]
ADVANTAGE_ESTIMATORS: dict[str, AdvantageEstimator] = {
    "grpo": grpo_advantages,
    "dr_grpo": dr_grpo_advantages,
}
