"""Critic-side formulas of PPO: generalised advantage estimation over a response whose
observation tokens are skipped, and the clipped value loss. [B, T] tensors, `mask` = 1 on
policy tokens (the only tokens that carry a value, a reward and an advantage)."""
from __future__ import annotations

from typing import Optional

import torch

from ablate.algos.losses import _upcast, aggregate


def check_same_device(**tensors: torch.Tensor) -> None:
    """One-line error naming the tensors on another device than the first one."""
    (first, t0), *rest = tensors.items()
    odd = [f"{k} on {t.device}" for k, t in rest if t.device != t0.device]
    if odd:
        raise ValueError(f"{', '.join(odd)} but {first} on {t0.device}: create them on "
                         "one device (the learner's, learner.device)")


@torch.no_grad()
def gae(token_rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, *,
        gamma: float, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns), both [B, T], raw (not whitened), 0 where mask is 0.

    Over the policy tokens t_1 < ... < t_n of a row (Schulman et al., 2015,
    arXiv:1506.02438 eqs. 11-16): δ_k = r_{t_k} + γ V(t_{k+1}) - V(t_k), V(t_{n+1}) = 0,
    A_k = δ_k + γλ A_{k+1}, returns R_k = A_k + V(t_k). Tokens with mask 0 (tool
    observations inside a multi-turn response) are skipped: the next value and the running
    advantage are carried over them, and a reward placed on them is ignored (put it on
    the last policy token before the observation)."""
    if not (token_rewards.shape == values.shape == mask.shape):
        raise ValueError(f"token_rewards {tuple(token_rewards.shape)}, values "
                         f"{tuple(values.shape)} and mask {tuple(mask.shape)} must match")
    if not (0 <= gamma <= 1 and 0 <= lam <= 1):
        raise ValueError(f"need gamma and lam in [0, 1], got {gamma}, {lam}")
    check_same_device(values=values, token_rewards=token_rewards, mask=mask)
    r, v, m = _upcast(token_rewards), _upcast(values), mask.bool()
    adv = torch.zeros_like(v)
    next_value = torch.zeros_like(v[:, 0])
    running = torch.zeros_like(v[:, 0])
    for t in reversed(range(v.shape[1])):
        on = m[:, t]
        delta = r[:, t] + gamma * next_value - v[:, t]
        a_t = delta + gamma * lam * running
        adv[:, t] = torch.where(on, a_t, 0.0)
        running = torch.where(on, a_t, running)
        next_value = torch.where(on, v[:, t], next_value)
    returns = torch.where(m, adv + v, 0.0)
    return adv, returns


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
               mask: torch.Tensor, *, clip_range: Optional[float], agg: str = "token-mean",
               **counts) -> torch.Tensor:
    """Clipped value loss (PPO, Schulman et al., 2017 §5 with the value clipping of the
    OpenAI baselines ppo2 implementation): V_clip = V_old + clip(V - V_old, -c, c),
    L = 0.5 · max((V - R)², (V_clip - R)²), aggregated with `agg`. clip_range None: no clip."""
    check_same_device(values=values, old_values=old_values, returns=returns, mask=mask)
    v, r = _upcast(values), _upcast(returns).detach()
    unclipped = (v - r) ** 2
    if clip_range is None:
        per_token = 0.5 * unclipped
    else:
        if clip_range <= 0:
            raise ValueError(f"clip_range={clip_range} must be > 0 (or None)")
        old = _upcast(old_values).detach()
        v_clip = old + (v - old).clamp(-clip_range, clip_range)
        per_token = 0.5 * torch.maximum(unclipped, (v_clip - r) ** 2)
    per_token = torch.where(mask.bool(), per_token, 0.0)
    return aggregate(per_token, mask, agg, **counts)
