"""The algorithms' terms of the memory plan (ablate/apps/memory_plan.py composes them):
models an algorithm loads beside the policy, unpartitioned."""
from __future__ import annotations

from ablate.core.plan import (ACT_BYTES_PER_TOKEN_LAYER, PlanContext, Shape, Term,
                              model_bytes, sel)


def objective_terms(cfg, shape: Shape, ctx: PlanContext) -> tuple[list[Term], list[str]]:
    """The frozen KL reference, loaded for any algorithm when algo.kl_coef > 0."""
    if float(sel(cfg, "algo.kl_coef", 0.0)) <= 0:
        return [], []
    return [Term("kl reference", shape.params * model_bytes(cfg), "resident", "frozen")], []


def dpo_terms(cfg, shape: Shape, ctx: PlanContext) -> tuple[list[Term], list[str]]:
    """DPO's frozen reference policy (Rafailov et al. 2023, eq. 7)."""
    return [Term("dpo reference", shape.params * model_bytes(cfg), "resident", "frozen")], []


def ppo_terms(cfg, shape: Shape, ctx: PlanContext) -> tuple[list[Term], list[str]]:
    """PPO's critic (algos/ppo.py): fp32 copy + grads + AdamW moments, trained in
    `prepare` while the sampler still holds its memory."""
    n = int(cfg.learner.micro_batch_tokens)   # fp32: twice the 16-bit constant
    return [Term("ppo critic", shape.params * 16, "resident", "fp32 weights, grads, 2 moments"),
            Term("critic activations", n * shape.hidden * shape.layers
                 * ACT_BYTES_PER_TOKEN_LAYER * 2 + n * shape.vocab * 4, "rollout",
                 "fp32 pass + its LM logits")], []
