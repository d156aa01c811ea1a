"""Sampler/learner mismatch correction (`algo.rollout_correction`): per-token weights that
multiply the policy loss when the sampler's logprobs (vLLM in bf16, say) differ from the
learner's for the same weights. Yao et al., 2025, "Your efficient RL framework secretly
brings you off-policy RL training" (truncated importance sampling, TIS); the masking
variants follow verl's rollout-correction modes and ICE-POP's token masking.

Each is fn(log_ratio, mask, episode_of, *, cap) -> weights, where log_ratio[s] =
log π_learner_old - log π_sampler per token of segment s (aligned to its ids), mask[s] its
loss mask, episode_of[s] its episode; weights[s] is a float64 tensor like log_ratio[s].
The PPO ratio then uses π_learner_old (recomputed by the learner before the update).
A "sequence" is an episode (all its segments)."""
from __future__ import annotations

import math

import torch

from ablate.algos.losses import LOG_RATIO_CLAMP
from ablate.algos.registry import ROLLOUT_CORRECTIONS


def _episode_log_ratio(log_ratio, mask, episode_of) -> dict[int, float]:
    """Σ over an episode's policy tokens of log π_learner_old - log π_sampler."""
    total: dict[int, float] = {}
    for lr, m, e in zip(log_ratio, mask, episode_of):
        total[e] = total.get(e, 0.0) + float((lr * m).sum())
    return total


@ROLLOUT_CORRECTIONS.register("none")
def no_correction(log_ratio, mask, episode_of, *, cap: float) -> None:
    """No weights: the PPO ratio is taken against the sampler's logprobs directly, which
    then also absorbs the sampler/learner mismatch (and no extra forward pass is run)."""
    return None


@ROLLOUT_CORRECTIONS.register("token-tis")
def token_tis(log_ratio, mask, episode_of, *, cap: float) -> list[torch.Tensor]:
    """w_t = min(π_learner_old(y_t) / π_sampler(y_t), C) (Yao et al., 2025, §3, TIS)."""
    return [torch.exp(lr.clamp(max=LOG_RATIO_CLAMP)).clamp(max=cap) for lr in log_ratio]


@ROLLOUT_CORRECTIONS.register("decoupled-ppo")
def decoupled_ppo(log_ratio, mask, episode_of, *, cap: float) -> list[torch.Tensor]:
    """w_t = π_prox(y_t) / π_behav(y_t) if it is <= C else 0: decoupled PPO (Fu et al., 2025,
    AReaL, arXiv:2505.24298, §5 "decoupled PPO objective"), the clip taken against the proximal policy
    π_prox = π_learner_old; tokens above the cap are filtered (AReaL's behav_imp_weight_cap)."""
    return [torch.where(lr <= math.log(cap), torch.exp(lr), torch.zeros_like(lr))
            for lr in log_ratio]


@ROLLOUT_CORRECTIONS.register("seq-tis")
def seq_tis(log_ratio, mask, episode_of, *, cap: float) -> list[torch.Tensor]:
    """w = min(Π_t π_learner_old / π_sampler, C) over the episode, on each of its tokens
    (sequence-level TIS, verl rollout_is=sequence)."""
    total = _episode_log_ratio(log_ratio, mask, episode_of)
    return [torch.full_like(lr, min(math.exp(min(total[e], LOG_RATIO_CLAMP)), cap))
            for lr, e in zip(log_ratio, episode_of)]


@ROLLOUT_CORRECTIONS.register("token-mask")
def token_mask(log_ratio, mask, episode_of, *, cap: float) -> list[torch.Tensor]:
    """w_t = 1 if 1/C <= π_learner_old / π_sampler <= C else 0 (ICE-POP-style masking,
    verl rollout_rs=token)."""
    bound = math.log(cap)
    return [(lr.abs() <= bound).to(lr.dtype) for lr in log_ratio]


@ROLLOUT_CORRECTIONS.register("seq-mask")
def seq_mask(log_ratio, mask, episode_of, *, cap: float) -> list[torch.Tensor]:
    """w = 1 for every token of an episode whose per-token geometric-mean ratio
    exp(mean_t log ratio) lies in [1/C, C], else 0 (verl rollout_rs=geometric)."""
    total = _episode_log_ratio(log_ratio, mask, episode_of)
    count: dict[int, float] = {}
    for m, e in zip(mask, episode_of):
        count[e] = count.get(e, 0.0) + float(m.sum())
    bound = math.log(cap)
    keep = {e: abs(total[e] / max(count[e], 1.0)) <= bound for e in total}
    return [torch.full_like(lr, float(keep[e])) for lr, e in zip(log_ratio, episode_of)]


def correction_weights(name: str, learner_old: list, sampler: list, mask: list,
                       episode_of: list[int], *, cap: float
                       ) -> tuple[list[torch.Tensor], dict[str, float]]:
    """(weights per segment, mismatch metrics) for the registered correction `name`.
    Metrics over all policy tokens: ratio_mean / ratio_max / ratio_min of π_learner_old /
    π_sampler, kl (k3 estimate of KL(π_sampler || π_learner_old)), clipped_frac (tokens
    whose weight was truncated to C or masked to 0)."""
    if cap <= 1:
        raise ValueError(f"algo.correction_cap={cap} must be > 1")
    fn = ROLLOUT_CORRECTIONS.get_checked(name)
    log_ratio, masks = [], []
    for lo, ls, m in zip(learner_old, sampler, mask):
        m = torch.as_tensor(m, dtype=torch.float64).clone()
        m[0] = 0.0   # nothing predicts the first token (the learner's convention)
        d = torch.as_tensor(lo, dtype=torch.float64) - torch.as_tensor(ls, dtype=torch.float64)
        log_ratio.append(torch.where(m > 0, d, 0.0))
        masks.append(m)
    weights = fn(log_ratio, masks, episode_of, cap=cap)
    on = torch.cat(masks).bool()
    lr_all, w_all = torch.cat(log_ratio)[on], torch.cat(weights)[on]
    if lr_all.numel() == 0:
        return weights, {}
    ratio = torch.exp(lr_all.clamp(max=LOG_RATIO_CLAMP))
    return weights, {
        "rollout_correction/ratio_mean": float(ratio.mean()),
        "rollout_correction/ratio_max": float(ratio.max()),
        "rollout_correction/ratio_min": float(ratio.min()),
        "rollout_correction/kl": float((ratio - lr_all - 1.0).mean()),
        # truncated (a TIS weight at the cap) or masked (a weight of 0)
        "rollout_correction/clipped_frac": float(((w_all == 0) | (w_all >= cap)).double().mean()),
    }
