"""`Objective`: every loss knob of AlgoConfig applied in one place (the policy-gradient
algorithm of ablate.algos.protocol wraps it; names resolve through the registries).

    obj = build_objective(cfg.algo, max_len=cfg.harness.max_tokens_per_episode)
    rewards = obj.shape_rewards(rewards, lengths)           # + overlong penalty if enabled
    adv = obj.advantages(rewards, group_ids)                # per episode
    num_tokens, num_seqs = summed batch_counts(mask) over the micro-batches
    for each micro-batch:
        loss, metrics = obj.loss(lp, old_lp, adv_mb, mask, entropy=ent, ref_logprobs=ref,
                                 num_tokens=num_tokens, num_seqs=num_seqs)
        loss.backward()
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Optional

import torch

from ablate.algos.losses import LOG_RATIO_CLAMP, aggregate, kl_k3
from ablate.algos.overlong import overlong_penalty
from ablate.algos.registry import (ADVANTAGE_ESTIMATORS, LOSS_AGGREGATIONS, POLICY_LOSSES,
                                   ROLLOUT_CORRECTIONS)


@dataclass(frozen=True)
class Objective:
    adv_estimator: str = "grpo"
    policy_loss: str = "clip"
    rollout_correction: str = "none"
    correction_cap: float = 2.0          # C of the rollout correction (TIS cap / mask bound)
    norm_std: bool = True
    std_eps: float = 1e-6
    eps_low: float = 0.2
    eps_high: float = 0.2
    clip_c: Optional[float] = None
    loss_agg: str = "seq-mean-token-mean"
    max_len: Optional[int] = None        # Dr.GRPO constant normaliser (generation budget)
    entropy_coef: float = 0.0
    kl_coef: float = 0.0
    overlong_enable: bool = False
    overlong_max_len: int = 1024
    overlong_cache_len: int = 256
    overlong_factor: float = 1.0

    def __post_init__(self):
        ADVANTAGE_ESTIMATORS.get_checked(self.adv_estimator)
        POLICY_LOSSES.get_checked(self.policy_loss)
        ROLLOUT_CORRECTIONS.get_checked(self.rollout_correction)
        if self.rollout_correction != "none":
            if self.correction_cap <= 1:
                raise ValueError(f"algo.correction_cap={self.correction_cap} must be > 1")
        if self.adv_estimator == "dr_grpo" and self.norm_std:
            raise ValueError("algo.adv_estimator=dr_grpo needs algo.norm_std=false "
                             "(Dr.GRPO never divides by the group std)")
        LOSS_AGGREGATIONS.get_checked(self.loss_agg)
        if self.loss_agg == "seq-mean-token-sum-norm" and not (self.max_len and self.max_len > 0):
            raise ValueError("algo.loss_agg=seq-mean-token-sum-norm needs a max_len > 0")

    # --- what the cell loop needs to know before it loads anything ---------------------
    @property
    def needs_reference(self) -> bool:
        """A frozen reference model is loaded only when the KL term is on."""
        return self.kl_coef > 0

    @property
    def needs_entropy(self) -> bool:
        return self.entropy_coef > 0

    @property
    def needs_learner_old_logprobs(self) -> bool:
        """A rollout correction compares the learner's logprobs before the update with
        the sampler's: one extra forward pass of the batch."""
        return self.rollout_correction != "none"

    def describe(self) -> dict[str, Any]:
        """Every setting, including the implicit ones, for the run's metadata."""
        correction = ("ppo-ratio-vs-sampler" if self.rollout_correction == "none" else
                      f"ppo-ratio-vs-learner-old x {self.rollout_correction}")
        return {**asdict(self), "importance_correction": correction,
                "log_ratio_clamp": LOG_RATIO_CLAMP, "kl_estimator": "k3",
                "std": "unbiased"}

    # --- per step -----------------------------------------------------------------------
    def shape_rewards(self, rewards, lengths) -> torch.Tensor:
        """Rewards plus DAPO's overlong penalty when algo.overlong.enable (else unchanged)."""
        r = torch.as_tensor(rewards, dtype=torch.float32).flatten()
        if not self.overlong_enable:
            return r
        return r + overlong_penalty(lengths, self.overlong_max_len, self.overlong_cache_len,
                                    self.overlong_factor)

    def advantages(self, rewards, group_ids) -> torch.Tensor:
        estimator = ADVANTAGE_ESTIMATORS[self.adv_estimator]
        return estimator(rewards, group_ids, norm_std=self.norm_std, eps=self.std_eps)

    def loss(self, logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
             mask: torch.Tensor, entropy: Optional[torch.Tensor] = None,
             ref_logprobs: Optional[torch.Tensor] = None, num_tokens: Optional[float] = None,
             num_seqs: Optional[float] = None, row_tokens: Optional[torch.Tensor] = None,
             is_weights: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, dict[str, float]]:
        """pg_loss - entropy_coef·agg(entropy) + kl_coef·agg(k3(π_θ, π_ref)), all three
        aggregated the same way (verl's agg_loss for the entropy and KL-loss terms).
        `row_tokens` / `num_seqs` make the seq-* aggregations count episodes (see
        ablate.algos.losses); `is_weights` are the rollout-correction weights."""
        counts = dict(max_len=self.max_len, num_tokens=num_tokens, num_seqs=num_seqs,
                      row_tokens=row_tokens)
        loss, metrics = POLICY_LOSSES[self.policy_loss](
            logprobs, old_logprobs, advantages, mask, eps_low=self.eps_low,
            eps_high=self.eps_high, clip_c=self.clip_c, agg=self.loss_agg,
            is_weights=is_weights, **counts)

        if self.entropy_coef > 0 and entropy is None:
            raise ValueError("algo.entropy_coef > 0 needs the token entropy")
        if entropy is not None:
            ent = aggregate(entropy, mask, self.loss_agg, **counts)
            metrics["entropy"] = float(ent.detach())
            if self.entropy_coef > 0:
                loss = loss - self.entropy_coef * ent   # entropy bonus (DAPO/verl convention)

        if self.kl_coef > 0 and ref_logprobs is None:
            raise ValueError("algo.kl_coef > 0 needs the reference model's logprobs")
        if ref_logprobs is not None:
            m = mask.bool()   # neutralise padding (-inf / NaN logprobs) before exp
            kl_tok = kl_k3(torch.where(m, logprobs, 0.0), torch.where(m, ref_logprobs, 0.0))
            kl = aggregate(kl_tok, mask, self.loss_agg, **counts)
            metrics["kl"] = float(kl.detach())
            if self.kl_coef > 0:
                loss = loss + self.kl_coef * kl   # GRPO KL penalty (Shao et al., 2024, eq. 3-4)

        metrics["loss"] = float(loss.detach())
        return loss, metrics


def build_objective(algo_cfg: Any, *, max_len: Optional[int] = None) -> Objective:
    """Objective from an AlgoConfig (dataclass or DictConfig). `max_len` is the Dr.GRPO
    normaliser; by default algo.overlong.max_len (L_max, generated tokens per episode)."""
    o = algo_cfg.overlong
    return Objective(
        adv_estimator=algo_cfg.adv_estimator,
        policy_loss=str(getattr(algo_cfg, "policy_loss", "clip")),
        rollout_correction=str(getattr(algo_cfg, "rollout_correction", "none")),
        correction_cap=float(getattr(algo_cfg, "correction_cap", 2.0)),
        norm_std=bool(algo_cfg.norm_std),
        std_eps=float(algo_cfg.std_eps), eps_low=float(algo_cfg.eps_low),
        eps_high=float(algo_cfg.eps_high),
        clip_c=None if algo_cfg.clip_c is None else float(algo_cfg.clip_c),
        loss_agg=algo_cfg.loss_agg,
        max_len=int(max_len if max_len is not None else o.max_len),
        entropy_coef=float(algo_cfg.entropy_coef), kl_coef=float(algo_cfg.kl_coef),
        overlong_enable=bool(o.enable), overlong_max_len=int(o.max_len),
        overlong_cache_len=int(o.cache_len), overlong_factor=float(o.factor))
