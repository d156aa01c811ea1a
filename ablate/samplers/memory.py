"""The sampler backends' terms of the memory plan (ablate/apps/memory_plan.py composes
them): the sampler's share of the learner's device during the rollout, what it keeps in
host RAM, and why it cannot start there. The KV cache is sized by context length (the
positions a sequence may hold), not by the generated-token budget: an episode's context
is its prompt, every turn's tool results and its generated tokens."""
from __future__ import annotations

import math

from ablate.core.plan import GB, PlanContext, Shape, Term, model_bytes, sel


def step_tokens(cfg, world: int) -> tuple[int, int]:
    """(episodes, generated tokens) one rank rolls out per step: its share of the
    groups, each episode up to harness.max_tokens_per_episode."""
    episodes = math.ceil(cfg.trainer.tasks_per_step * cfg.trainer.group_size / world)
    return episodes, episodes * int(cfg.harness.max_tokens_per_episode)


def engine_len(cfg, shape: Shape) -> int:
    """The positions one sequence may hold in an engine: sampler.max_model_len, else the
    model's own (config.json max_position_embeddings; 0 when unknown)."""
    return int(sel(cfg, "sampler.max_model_len", 0) or shape.context or 0)


def context_tokens(cfg, shape: Shape, ctx: PlanContext) -> int:
    """One episode's context: the prompt before the question (ctx.prompt_tokens, counted
    by preflight from the world's prompt text) plus the episode's budget, at most what a
    sequence may hold (sampler.max_model_len, else the model's context)."""
    want = int(ctx.prompt_tokens) + int(cfg.harness.max_tokens_per_episode)
    cap = engine_len(cfg, shape)
    return min(want, cap) if cap else want


def hf_terms(cfg, shape: Shape, ctx: PlanContext) -> tuple[list[Term], list[str]]:
    """HF generate: its own copy of the weights and the step's KV cache, every live
    episode at its full context."""
    episodes, _ = step_tokens(cfg, ctx.world)
    n = context_tokens(cfg, shape, ctx)
    kv = episodes * n * shape.kv_bytes_per_token(model_bytes(cfg))
    return [Term("sampler weights", shape.params * model_bytes(cfg), "resident", "HF copy"),
            Term("kv cache", kv, "rollout", f"{episodes} episodes x {n} tok context")], []


def vllm_terms(cfg, shape: Shape, ctx: PlanContext) -> tuple[list[Term], list[str]]:
    """The in-process engine: sampler.gpu_memory_utilization of the device, asleep during
    the update when sampler.sleep_during_update. Refused when the share cannot hold the
    weights, or beside them the KV cache of one sequence of its max_model_len (vLLM
    refuses to start then: vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory)."""
    sc = cfg.sampler
    tp = max(int(sc.tensor_parallel_size), 1)
    episodes, _ = step_tokens(cfg, ctx.world)
    per_tok = shape.kv_bytes_per_token(model_bytes(cfg)) * max(shape.kv_heads // tp, 1) \
        / max(shape.kv_heads, 1)                      # KV heads sharded over the GPUs
    n = context_tokens(cfg, shape, ctx)
    share = float(sc.gpu_memory_utilization) * ctx.device_bytes
    weights = shape.params * model_bytes(cfg) / tp
    room = max(share - weights, 0)
    kv = episodes * n * per_tok
    note = (f"{sc.gpu_memory_utilization} x device; KV room {room / kv:.0%} of the step's "
            f"{episodes} x {n} tok" if kv else "")
    sleeping = bool(sel(cfg, "sampler.sleep_during_update", True))
    terms = [Term("vllm share", share, "rollout" if sleeping else "resident", note),
             host_copy(cfg, shape, sleeping)]
    problems = [] if share > weights else [
        f"sampler.gpu_memory_utilization={sc.gpu_memory_utilization} gives vLLM "
        f"{share / GB:.1f} GB < its {weights / GB:.1f} GB of weights per GPU"]
    seq = engine_len(cfg, shape)
    if not problems and seq and seq * per_tok > room:
        own = "" if sel(cfg, "sampler.max_model_len") else " (null: the model's own)"
        problems.append(
            f"sampler.max_model_len={seq}{own}: one sequence's KV cache is "
            f"{seq * per_tok / GB:.1f} GB > the {room / GB:.1f} GB vLLM has beside its "
            f"weights ({sc.gpu_memory_utilization} x {ctx.device_bytes / GB:.1f} GB - "
            f"{weights / GB:.1f} GB); set sampler.max_model_len<={int(room // per_tok)} "
            "or raise sampler.gpu_memory_utilization")
    return terms, problems


def host_copy(cfg, shape: Shape, sleeping: bool) -> Term:
    """Host RAM of an in-process engine: asleep (level 1) its weights wait in host memory
    (vllm/device_allocator/cumem.py CuMemAllocator.sleep: cpu_backup_tensor); a
    full-weight push gathers the learner's state on the host and, past
    sampler.push_cap_mb, writes it to a /dev/shm file (RAM) before the engine loads
    it (ablate/samplers/vllm.py): two copies of the weights, once the engine woke from
    its sleep, so the larger of sleep and push counts. A LoRA push moves the adapter
    alone."""
    weights = shape.params * model_bytes(cfg)
    lora = bool(sel(cfg, "learner.lora.enable", False))
    push = 0 if lora else 2 * weights
    sleep = weights if sleeping else 0
    what = "sleeping weights" if sleep >= push else "weight push: state + /dev/shm file"
    return Term("vllm host", max(push, sleep), "host", what)


def server_terms(cfg, shape: Shape, ctx: PlanContext) -> tuple[list[Term], list[str]]:
    """Servers run in their own processes on their own devices (sampler.devices / urls)."""
    return [], []
