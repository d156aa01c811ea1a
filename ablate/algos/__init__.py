"""RL algorithms for group-sampled episodes: advantage estimators, policy losses, loss
aggregations and rollout corrections in registries (ablate.algos.registry: the single
source of the names `algo.*` accepts; register your own with a decorator), the critic's
GAE and value loss, overlong shaping, dynamic sampling, and the Algorithm protocol the
cell loop calls (ablate.algos.protocol). docs/algorithms.md lists every formula with its
paper.

Chosen defaults, and why (all logged through `Objective.describe()`):
- std eps 1e-6 (verl) rather than TRL's 1e-4: with 0/1 rewards and G = 8 the group std is
  >= 0.35, so either is negligible; 1e-6 keeps advantages closest to the paper formula.
  All-equal or singleton groups get advantage 0 exactly, never NaN.
- Importance correction (algo.rollout_correction, default none): the "old" logprobs are
  the SAMPLER's (vLLM / HF), not recomputed by the learner, so the PPO ratio
  π_θ / π_sampler also absorbs any sampler/learner numerical mismatch and is clipped like
  any off-policy drift (verl's rollout IS is off by default too); ratio statistics are
  logged so a mismatch is visible. token-tis / seq-tis / token-mask / seq-mask /
  decoupled-ppo (AReaL; required with trainer.max_async_level > 0) recompute
  π_old with the learner and weight each token (ablate.algos.correction).
- "Sequence" in the seq-* aggregations and the Dr.GRPO normaliser means an episode, in
  every mode (ablate.algos.losses).
- The log-ratio is clamped to ±20 before exp (as verl) for numerical safety.
- Group std is unbiased (torch.std), as both verl and TRL.
- KL to the reference uses Schulman's k3 estimator, coefficient 0 by default (no
  reference model is loaded then: `Objective.needs_reference`).
- Dr.GRPO's constant normaliser is the generation budget (TRL's max_completion_length);
  `build_objective` takes it from algo.overlong.max_len unless max_len= is given.
"""
from ablate.algos.registry import (ADVANTAGE_ESTIMATORS, ALGORITHMS, LOSS_AGGREGATIONS,
                                   PAIR_RULES, POLICY_LOSSES, ROLLOUT_CORRECTIONS, Registry,
                                   import_plugins)
from ablate.algos.advantages import (compute_advantages, dr_grpo_advantages, grpo_advantages,
                                     reinforce_pp_baseline_advantages, rloo_advantages)
from ablate.algos.losses import (aggregate, batch_counts, entropy_bonus, kl_k3, policy_loss,
                                 token_entropy)
from ablate.algos.policy_losses import cispo_loss, gspo_loss
from ablate.algos.critic import gae, value_loss
from ablate.algos.correction import correction_weights
from ablate.algos.dynamic_sampling import (DynamicSampler, Refilled, dynamic_sampling_filter,
                                          refill)
from ablate.algos.objective import Objective, build_objective
from ablate.algos.overlong import overlong_penalty
from ablate.algos.protocol import (Algorithm, AlgorithmBase, PolicyGradient, TrainingBatch,
                                   build_algorithm, check_algorithm)
from ablate.algos.gigpo import GiGPO, state_keys
from ablate.algos.ppo import PPO
from ablate.algos.rft import RFT, STaR
from ablate.algos.dpo import DPO

__all__ = [
    "ADVANTAGE_ESTIMATORS", "ALGORITHMS", "LOSS_AGGREGATIONS", "PAIR_RULES", "POLICY_LOSSES",
    "ROLLOUT_CORRECTIONS", "Algorithm", "AlgorithmBase", "DynamicSampler", "GiGPO",
    "Objective", "DPO", "PPO", "RFT", "STaR",
    "PolicyGradient", "Refilled", "Registry", "TrainingBatch", "aggregate", "batch_counts",
    "build_algorithm", "build_objective", "check_algorithm", "cispo_loss",
    "compute_advantages", "correction_weights", "dr_grpo_advantages",
    "dynamic_sampling_filter", "entropy_bonus",
    "gae", "grpo_advantages", "gspo_loss", "import_plugins", "kl_k3", "overlong_penalty",
    "policy_loss", "refill", "reinforce_pp_baseline_advantages", "rloo_advantages",
    "state_keys", "token_entropy", "value_loss",
]
