"""Token-level policy-gradient loss (`clip`), the loss aggregations, and the entropy / KL
terms; aggregations and losses are registered in LOSS_AGGREGATIONS / POLICY_LOSSES.

All tensors are [B, T] (one row per training sequence, `mask` = 1 on tokens the policy
generated); advantages may be [B] (one per sequence) or [B, T]. Everything is computed in
at least float32 (bf16 inputs are upcast; float64 inputs stay float64).

"Sequence" in the seq-* aggregations and the Dr.GRPO normaliser means an EPISODE. A row is
a segment; in thinking mode an episode has one segment per turn. The caller then passes
`row_tokens` (masked tokens of the episode each row belongs to, [B]) and `num_seqs` (the
number of episodes): seq-mean-token-mean becomes 1/E Σ_e 1/|e| Σ_{t∈e} l_t whatever the
number of turns (docs/algorithms.md, "What a sequence is"). Without them each row is its own
episode, which is exact in instruct mode.

Micro-batching: pass the WHOLE batch's counts (see `batch_counts`) as `num_tokens` /
`num_seqs`; each micro-batch then returns its share, and the shares sum exactly to the
full-batch value for every aggregation, so gradient accumulation needs no rescaling.
"""
from __future__ import annotations

from typing import Optional

import torch

from ablate.algos.registry import LOSS_AGGREGATIONS, POLICY_LOSSES

# verl clamps the log-ratio before exp for numerical safety; |log r| = 20 is far outside
# any clip range, so the clamp only changes tokens whose gradient clipping zeroes anyway
# (or, without dual-clip, tokens with A < 0 and an astronomically large ratio).
LOG_RATIO_CLAMP = 20.0


def batch_counts(mask: torch.Tensor) -> tuple[int, int]:
    """(masked tokens, sequences with at least one masked token) of a [B, T] mask.
    Sum these over all micro-batches to get `num_tokens` / `num_seqs` of the batch. A fully
    masked row is padding, not a sequence: it is never counted."""
    m = mask.bool()
    return int(m.sum()), int(m.any(dim=-1).sum())


def _upcast(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.promote_types(x.dtype, torch.float32))


def _denominator(own: torch.Tensor, given: Optional[float], name: str) -> float:
    """The micro-batch's own count (at least 1, so an empty one gives 0, not NaN), or the
    whole batch's count when the caller passes it."""
    if given is None:
        return float(max(int(own), 1))
    given = float(given)
    if given <= 0:
        raise ValueError(f"{name}={given} must be > 0")
    return given


@LOSS_AGGREGATIONS.register("token-mean")
def token_mean(values, mask, *, max_len=None, num_tokens=None, num_seqs=None,
               row_tokens=None) -> torch.Tensor:
    """Sum of masked values / number of masked tokens (DAPO, Yu et al., 2025, §3.3)."""
    m = mask.bool()
    return values.masked_fill(~m, 0.0).sum() / _denominator(m.sum(), num_tokens, "num_tokens")


@LOSS_AGGREGATIONS.register("seq-mean-token-mean")
def seq_mean_token_mean(values, mask, *, max_len=None, num_tokens=None, num_seqs=None,
                        row_tokens=None) -> torch.Tensor:
    """Mean over episodes of each episode's token mean (GRPO, Shao et al., 2024, eq. 3:
    1/G Σ_i 1/|o_i| Σ_t). Fully masked rows are left out of the mean. With `row_tokens`
    (the token count of each row's episode) a row contributes its share of its episode."""
    m = mask.bool()
    tokens = m.sum(dim=-1)
    per_row = tokens if row_tokens is None else torch.as_tensor(row_tokens, device=tokens.device)
    seq_means = values.masked_fill(~m, 0.0).sum(dim=-1) / per_row.clamp(min=1)
    nonempty = tokens > 0
    return seq_means[nonempty].sum() / _denominator(nonempty.sum(), num_seqs, "num_seqs")


@LOSS_AGGREGATIONS.register("seq-mean-token-sum-norm")
def seq_mean_token_sum_norm(values, mask, *, max_len=None, num_tokens=None, num_seqs=None,
                            row_tokens=None) -> torch.Tensor:
    """Sum of masked values / (number of episodes × max_len): a constant normaliser
    (Dr.GRPO, Liu et al., 2025 §3.2; TRL loss_type="dr_grpo"). max_len is the generation
    budget of an episode; pass num_seqs = episodes when an episode spans several rows."""
    if max_len is None or max_len <= 0:
        raise ValueError("loss_agg=seq-mean-token-sum-norm needs max_len > 0 (the constant "
                         "Dr.GRPO normaliser, the generation budget)")
    m = mask.bool()
    seqs = _denominator(m.any(dim=-1).sum(), num_seqs, "num_seqs")
    return values.masked_fill(~m, 0.0).sum() / (seqs * max_len)


def aggregate(values: torch.Tensor, mask: torch.Tensor, agg: str = "token-mean", *,
              max_len: Optional[int] = None, num_tokens: Optional[float] = None,
              num_seqs: Optional[float] = None, row_tokens=None) -> torch.Tensor:
    """Reduce per-token values [B, T] to a scalar with one of LOSS_AGGREGATIONS."""
    fn = LOSS_AGGREGATIONS.get_checked(agg)
    if values.shape != mask.shape:
        raise ValueError(f"values {tuple(values.shape)} and mask {tuple(mask.shape)} differ")
    return fn(_upcast(values), mask, max_len=max_len, num_tokens=num_tokens,
              num_seqs=num_seqs, row_tokens=row_tokens)


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(π || π_ref) for tokens sampled from π:
    exp(ref - lp) - (ref - lp) - 1 >= 0 (Schulman, 2020, "Approximating KL Divergence")."""
    d = _upcast(ref_logprobs) - _upcast(logprobs)
    return torch.exp(d) - d - 1.0


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the softmax over the last dim: logsumexp(z) - Σ softmax(z)·z."""
    logits = _upcast(logits)
    return torch.logsumexp(logits, dim=-1) - (torch.softmax(logits, dim=-1) * logits).sum(-1)


def entropy_bonus(entropy: torch.Tensor, mask: torch.Tensor, coef: float,
                  agg: str = "token-mean", **counts) -> torch.Tensor:
    """coef × aggregated token entropy: the amount SUBTRACTED from the loss."""
    return coef * aggregate(entropy, mask, agg, **counts)


def check_loss_inputs(logprobs, old_logprobs, mask, eps_low: float, eps_high: float) -> None:
    if not 0 <= eps_low < 1 or eps_high < 0:
        raise ValueError(f"need 0 <= eps_low < 1 and eps_high >= 0, got {eps_low}, {eps_high}")
    if logprobs.shape != old_logprobs.shape or logprobs.shape != mask.shape:
        raise ValueError(f"logprobs {tuple(logprobs.shape)}, old_logprobs "
                         f"{tuple(old_logprobs.shape)} and mask {tuple(mask.shape)} must match")


def token_advantages(advantages: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """[B] (one per row) or [B, T] advantages as [B, T], at least float32."""
    adv = _upcast(torch.as_tensor(advantages))
    if adv.dim() == 1:
        adv = adv.unsqueeze(-1)
    return adv.expand_as(like)


def masked_log_ratio(logprobs, old_logprobs, mask) -> torch.Tensor:
    """log π_θ - log π_old, 0 off the mask (padding may hold -inf / NaN logprobs, and a
    NaN there would reach the gradient through exp's backward even when masked out later),
    clamped to ±LOG_RATIO_CLAMP."""
    log_ratio = torch.where(mask.bool(), _upcast(logprobs) - _upcast(old_logprobs), 0.0)
    return log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


def weighted(per_token: torch.Tensor, is_weights: Optional[torch.Tensor]) -> torch.Tensor:
    """Per-token loss times the (detached) rollout-correction weights, when given."""
    return per_token if is_weights is None else per_token * is_weights.detach()


def ratio_metrics(loss, ratio, adv, mask, logprobs, old_logprobs, *, low: float, high: float,
                  clip_c: Optional[float] = None) -> dict[str, float]:
    """Diagnostics over the micro-batch's masked tokens: clip_frac_low (A<0, r<low),
    clip_frac_high (A>0, r>high), clip_frac_dual (A<0, r>clip_c), approx_kl (k3 estimate of
    KL(π_old || π_θ)), tokens, and ratio_mean/max/min (absent when no token is masked in,
    so a max/min over micro-batches stays true). pg_loss is this micro-batch's share."""
    with torch.no_grad():
        m = mask.bool()
        n = int(m.sum())
        r = ratio.detach()

        def frac(cond: torch.Tensor) -> float:
            return float((cond & m).sum()) / n if n else 0.0

        kl = kl_k3(old_logprobs.detach(), logprobs.detach())   # samples come from π_old
        metrics = {
            "pg_loss": float(loss.detach()),
            "clip_frac_low": frac((adv < 0) & (r < low)),
            "clip_frac_high": frac((adv > 0) & (r > high)),
            "clip_frac_dual": frac((adv < 0) & (r > clip_c)) if clip_c is not None else 0.0,
            "approx_kl": float(kl[m].mean()) if n else 0.0,
            "tokens": float(n),
        }
        if n:
            metrics.update(ratio_mean=float(r[m].mean()), ratio_max=float(r[m].max()),
                           ratio_min=float(r[m].min()))
    return metrics


@POLICY_LOSSES.register("clip")
def policy_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                mask: torch.Tensor, *, eps_low: float, eps_high: float,
                clip_c: Optional[float] = None, agg: str = "token-mean",
                max_len: Optional[int] = None, num_tokens: Optional[float] = None,
                num_seqs: Optional[float] = None, row_tokens=None,
                is_weights: Optional[torch.Tensor] = None,
                **_) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped surrogate loss (to minimise) and its diagnostics (see `ratio_metrics`).

    Per token, r = exp(lp - old_lp):
      L = max(-A·r, -A·clip(r, 1-eps_low, 1+eps_high))     PPO (Schulman et al., 2017, eq. 7)
                                                          with DAPO clip-higher (§3.1)
      if A < 0 and clip_c: L = min(L, -A·clip_c)           dual-clip PPO (Ye et al., 2020,
                                                          arXiv:1912.09729)
    then times the rollout-correction weight (if any) and aggregated with `agg`.
    """
    check_loss_inputs(logprobs, old_logprobs, mask, eps_low, eps_high)
    if clip_c is not None and clip_c <= 1:
        raise ValueError(f"clip_c={clip_c} must be > 1 (or None to disable dual-clip)")
    adv = token_advantages(advantages, logprobs)
    ratio = torch.exp(masked_log_ratio(logprobs, old_logprobs, mask))
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    per_token = torch.maximum(unclipped, clipped)
    if clip_c is not None:
        per_token = torch.where(adv < 0, torch.minimum(per_token, -adv * clip_c), per_token)

    loss = aggregate(weighted(per_token, is_weights), mask, agg, max_len=max_len,
                     num_tokens=num_tokens, num_seqs=num_seqs, row_tokens=row_tokens)
    return loss, ratio_metrics(loss, ratio, adv, mask, logprobs, old_logprobs,
                               low=1.0 - eps_low, high=1.0 + eps_high, clip_c=clip_c)
