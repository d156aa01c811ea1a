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

from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from omegaconf import OmegaConf

from ablate.algos.config import AlgoConfig, check_objective
from ablate.algos.losses import LOG_RATIO_CLAMP, aggregate, kl_k3
from ablate.algos.overlong import overlong_penalty
from ablate.algos.registry import ADVANTAGE_ESTIMATORS, POLICY_LOSSES

# the algo.* knobs objective.json records, in its order (max_len after loss_agg)
DESCRIBED = ("adv_estimator", "policy_loss", "rollout_correction", "correction_cap",
             "norm_std", "std_eps", "eps_low", "eps_high", "clip_c", "loss_agg",
             "entropy_coef", "kl_coef")


@dataclass(frozen=True)
class Objective:
    """The loss of the typed `algo` config (AlgoConfig: its fields and defaults are the
    only ones); `max_len` is Dr.GRPO's constant normaliser (default algo.overlong.max_len)."""
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    max_len: Optional[int] = None

    def __post_init__(self):
        if self.max_len is None:
            object.__setattr__(self, "max_len", int(self.algo.overlong.max_len))
        check_objective(self.algo, self.max_len)

    def __getattr__(self, name: str):
        """algo's own knobs read through (obj.eps_high is obj.algo.eps_high)."""
        if name.startswith("_") or name == "algo":
            raise AttributeError(name)
        return getattr(self.algo, name)

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
        a, o = self.algo, self.algo.overlong
        correction = ("ppo-ratio-vs-sampler" if a.rollout_correction == "none" else
                      f"ppo-ratio-vs-learner-old x {a.rollout_correction}")
        knobs = {k: getattr(a, k) for k in DESCRIBED}
        knobs = {**dict(list(knobs.items())[:10]), "max_len": self.max_len,
                 **dict(list(knobs.items())[10:])}
        return {**knobs, "overlong_enable": o.enable, "overlong_max_len": o.max_len,
                "overlong_cache_len": o.cache_len, "overlong_factor": o.factor,
                "importance_correction": correction,
                "log_ratio_clamp": LOG_RATIO_CLAMP, "kl_estimator": "k3",
                "std": "unbiased"}

    # --- per step -----------------------------------------------------------------------
    def shape_rewards(self, rewards, lengths) -> torch.Tensor:
        """Rewards plus DAPO's overlong penalty when algo.overlong.enable (else unchanged)."""
        r = torch.as_tensor(rewards, dtype=torch.float32).flatten()
        o = self.algo.overlong
        if not o.enable:
            return r
        return r + overlong_penalty(lengths, o.max_len, o.cache_len, o.factor)

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
    """Objective from an AlgoConfig (the dataclass, or the cell's typed DictConfig node).
    `max_len` is the Dr.GRPO normaliser; by default algo.overlong.max_len (L_max)."""
    algo = algo_cfg if isinstance(algo_cfg, AlgoConfig) else OmegaConf.to_object(
        OmegaConf.merge(OmegaConf.structured(AlgoConfig), algo_cfg))
    return Objective(algo, max_len=None if max_len is None else int(max_len))
