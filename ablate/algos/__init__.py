"""RL objectives for group-sampled episodes: advantage estimators, the clipped surrogate
with its aggregations, entropy / KL terms, overlong shaping and dynamic sampling. Pure
functions in registries (as verl's core_algos), plus `build_objective(cfg.algo)`, which
applies every AlgoConfig knob.

Chosen defaults, and why (all logged through `Objective.describe()`):
- std eps 1e-6 (verl) rather than TRL's 1e-4: with 0/1 rewards and G = 8 the group std is
  >= 0.35, so either is negligible; 1e-6 keeps advantages closest to the paper formula.
  All-equal or singleton groups get advantage 0 exactly, never NaN.
- Importance correction: the "old" logprobs are the SAMPLER's (vLLM / HF), never
  recomputed by the learner, so the PPO ratio π_θ / π_sampler also absorbs any
  sampler/learner numerical mismatch and is clipped like any off-policy drift. No
  separate truncated-IS weight is applied (TRL offers one for vLLM sampling; verl's
  rollout IS is off by default); ratio statistics are logged so a mismatch is visible.
- The log-ratio is clamped to ±20 before exp (as verl) for numerical safety.
- Group std is unbiased (torch.std), as both verl and TRL.
- KL to the reference uses Schulman's k3 estimator, coefficient 0 by default (no
  reference model is loaded then: `Objective.needs_reference`).
- Dr.GRPO's constant normaliser is the generation budget (TRL's max_completion_length);
  `build_objective` takes it from algo.overlong.max_len unless max_len= is given.
"""
from ablate.algos.advantages import (ADVANTAGE_ESTIMATORS, compute_advantages,
                                     dr_grpo_advantages, grpo_advantages)
from ablate.algos.dynamic_sampling import DynamicSampler, dynamic_sampling_filter
from ablate.algos.losses import (LOSS_AGGREGATIONS, aggregate, batch_counts, entropy_bonus,
                                 kl_k3, policy_loss, token_entropy)
from ablate.algos.objective import Objective, build_objective
from ablate.algos.overlong import overlong_penalty

__all__ = [
    "ADVANTAGE_ESTIMATORS", "LOSS_AGGREGATIONS", "DynamicSampler", "Objective", "aggregate",
    "batch_counts", "build_objective", "compute_advantages", "dr_grpo_advantages",
    "dynamic_sampling_filter", "entropy_bonus", "grpo_advantages", "kl_k3",
    "overlong_penalty", "policy_loss", "token_entropy",
]
