"""The sampler backends' terms of the memory plan (ablate/apps/memory_plan.py composes
them): the sampler's share of the learner's device during the rollout, and why it cannot
start there."""
from __future__ import annotations

import math

from ablate.core.plan import GB, PlanContext, Shape, Term, model_bytes, sel


def step_tokens(cfg, world: int) -> tuple[int, int]:
    """(episodes, tokens) one rank rolls out per step: its share of the groups, each
    episode up to harness.max_tokens_per_episode."""
    episodes = math.ceil(cfg.trainer.tasks_per_step * cfg.trainer.group_size / world)
    return episodes, episodes * int(cfg.harness.max_tokens_per_episode)


def hf_terms(cfg, shape: Shape, ctx: PlanContext) -> tuple[list[Term], list[str]]:
    """HF generate: its own copy of the weights and the step's KV cache."""
    episodes, tokens = step_tokens(cfg, ctx.world)
    kv = tokens * shape.kv_bytes_per_token(model_bytes(cfg))
    return [Term("sampler weights", shape.params * model_bytes(cfg), "resident", "HF copy"),
            Term("kv cache", kv, "rollout",
                 f"{episodes} episodes x {cfg.harness.max_tokens_per_episode} tok")], []


def vllm_terms(cfg, shape: Shape, ctx: PlanContext) -> tuple[list[Term], list[str]]:
    """The in-process engine: sampler.gpu_memory_utilization of the device, asleep during
    the update when sampler.sleep_during_update."""
    sc = cfg.sampler
    _, tokens = step_tokens(cfg, ctx.world)
    kv = tokens * shape.kv_bytes_per_token(model_bytes(cfg))
    share = float(sc.gpu_memory_utilization) * ctx.device_bytes
    weights = shape.params * model_bytes(cfg) / max(int(sc.tensor_parallel_size), 1)
    note = (f"{sc.gpu_memory_utilization} x device; KV room {max(share - weights, 0) / kv:.0%}"
            f" of the step's {tokens} tokens" if kv else "")
    sleeping = bool(sel(cfg, "sampler.sleep_during_update", True))
    terms = [Term("vllm share", share, "rollout" if sleeping else "resident", note)]
    problems = [] if share > weights else [
        f"sampler.gpu_memory_utilization={sc.gpu_memory_utilization} gives vLLM "
        f"{share / GB:.1f} GB < its {weights / GB:.1f} GB of weights per GPU"]
    return terms, problems


def server_terms(cfg, shape: Shape, ctx: PlanContext) -> tuple[list[Term], list[str]]:
    """Servers run in their own processes on their own devices (sampler.devices / urls)."""
    return [], []
