"""The algorithm axes' registries (ablate.core.registry.Registry): the single source of
the names an `algo.*` key accepts; docs/algorithms.md and validation read them."""
from __future__ import annotations

from ablate.core.registry import Registry, import_plugins  # noqa: F401  (re-exported)

# name -> fn(rewards[N], group_ids[N], **kw) -> advantages[N]
ADVANTAGE_ESTIMATORS = Registry("algo.adv_estimator", "advantage estimator")
# name -> fn(logprobs, old_logprobs, advantages, mask, *, agg, eps_low, eps_high, **kw)
#         -> (loss, metrics)
POLICY_LOSSES = Registry("algo.policy_loss", "policy loss")
# name -> fn(values[B, T], mask[B, T], *, max_len, num_tokens, num_seqs, row_tokens) -> scalar
LOSS_AGGREGATIONS = Registry("algo.loss_agg", "loss aggregation")
# name -> fn(learner_old_logprobs, sampler_logprobs, mask, episode_of, *, cap) -> weights
ROLLOUT_CORRECTIONS = Registry("algo.rollout_correction", "rollout correction")
# name -> fn(correct[G], rewards[G]) -> [(chosen, rejected)] positions within one group
PAIR_RULES = Registry("algo.dpo.pairs", "DPO pair rule")
# What an algorithm may declare it can do (ablate.core.registry.Declaration.capabilities):
ALGORITHM_CAPABILITIES = (
    "unequal_groups",    # trains on groups of any size (agent.lats.train_episodes=siblings)
)
# name -> Algorithm class (the protocol in ablate.algos.protocol), with its Declaration
# (memory: the models it loads beside the policy, ablate/algos/memory.py)
ALGORITHMS = Registry("algo.algorithm", "algorithm", capabilities=ALGORITHM_CAPABILITIES)

