"""Policy losses beyond the clipped token surrogate (`clip`, in ablate.algos.losses): GSPO's
sequence-level ratio and CISPO's clipped importance weight. Same signature as `clip`:
fn(logprobs, old_logprobs, advantages, mask, *, agg, eps_low, eps_high, **kw) -> (loss,
metrics), registered in POLICY_LOSSES (`algo.policy_loss`)."""
from __future__ import annotations

from typing import Optional

import torch

from ablate.algos.losses import (aggregate, check_loss_inputs, masked_log_ratio,
                                 ratio_metrics, token_advantages, weighted)
from ablate.algos.registry import POLICY_LOSSES


@POLICY_LOSSES.register("gspo")
def gspo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
              mask: torch.Tensor, *, eps_low: float, eps_high: float,
              agg: str = "seq-mean-token-mean", is_weights: Optional[torch.Tensor] = None,
              **counts) -> tuple[torch.Tensor, dict[str, float]]:
    """GSPO-token (Zheng et al., 2025, arXiv:2507.18071 §4.3, eqs. 13-14): per row (a
    sequence) s = exp(mean_t (lp - old_lp)) = (π_θ/π_old)^(1/|y|), and per token
    s_t = sg(s) · π_θ(y_t) / sg(π_θ(y_t)) (value s, gradient s·∇log π_θ(y_t));
    L_t = max(-A_t s_t, -A_t clip(s_t, 1-eps_low, 1+eps_high)), aggregated with `agg`.
    With A constant over a sequence this is GSPO's sequence objective (eq. 5). A row is a
    segment: in thinking mode each turn is its own sequence here."""
    check_loss_inputs(logprobs, old_logprobs, mask, eps_low, eps_high)
    m = mask.to(torch.promote_types(mask.dtype, torch.float32))
    adv = token_advantages(advantages, logprobs)
    log_ratio = masked_log_ratio(logprobs, old_logprobs, mask)
    seq_log_ratio = (log_ratio * m).sum(-1) / m.sum(-1).clamp(min=1)        # [B]
    lp = torch.where(mask.bool(), logprobs, 0.0).to(log_ratio.dtype)
    log_s_t = seq_log_ratio.detach().unsqueeze(-1) + lp - lp.detach()
    s_t = torch.exp(log_s_t)
    per_token = torch.maximum(-adv * s_t, -adv * s_t.clamp(1.0 - eps_low, 1.0 + eps_high))
    per_token = torch.where(mask.bool(), per_token, 0.0)
    loss = aggregate(weighted(per_token, is_weights), mask, agg, **_counts(counts))
    return loss, ratio_metrics(loss, s_t, adv, mask, logprobs, old_logprobs,
                               low=1.0 - eps_low, high=1.0 + eps_high)


@POLICY_LOSSES.register("cispo")
def cispo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
               mask: torch.Tensor, *, eps_low: float, eps_high: float,
               agg: str = "token-mean", is_weights: Optional[torch.Tensor] = None,
               **counts) -> tuple[torch.Tensor, dict[str, float]]:
    """CISPO (MiniMax-M1, arXiv:2506.13585 §3.1, eq. 4): L_t = -sg(clip(r_t, 1-eps_low,
    1+eps_high)) · A_t · log π_θ(y_t), r_t = π_θ/π_old. Every token keeps a gradient; the
    clip only bounds its coefficient. clip_frac_* count tokens whose weight was clipped."""
    check_loss_inputs(logprobs, old_logprobs, mask, eps_low, eps_high)
    adv = token_advantages(advantages, logprobs)
    ratio = torch.exp(masked_log_ratio(logprobs, old_logprobs, mask))
    weight = ratio.clamp(1.0 - eps_low, 1.0 + eps_high).detach()
    lp = torch.where(mask.bool(), logprobs, 0.0).to(weight.dtype)
    per_token = -weight * adv * lp
    loss = aggregate(weighted(per_token, is_weights), mask, agg, **_counts(counts))
    metrics = ratio_metrics(loss, ratio, adv, mask, logprobs, old_logprobs,
                            low=1.0 - eps_low, high=1.0 + eps_high)
    with torch.no_grad():   # CISPO clips the weight whatever the sign of A
        m, n = mask.bool(), max(int(mask.bool().sum()), 1)
        metrics["clip_frac_low"] = float(((ratio < 1.0 - eps_low) & m).sum()) / n
        metrics["clip_frac_high"] = float(((ratio > 1.0 + eps_high) & m).sum()) / n
    return loss, metrics


def _counts(kw: dict) -> dict:
    """The aggregation's keyword arguments out of a loss's **kw (others are ignored)."""
    return {k: kw.get(k) for k in ("max_len", "num_tokens", "num_seqs", "row_tokens")}
