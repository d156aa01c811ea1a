"""Typed configuration of the learner (`learner=`): the keys every learner has
(LearnerConfig) and each backend's own (DeepSpeedLearnerConfig), each with its one check
(`check_learner`, `check_deepspeed`), declared where the backend registers
(ablate/learners/__init__.py)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ablate.core.errors import ConfigError, need


@dataclass
class LoraConfig:
    enable: bool = False
    rank: int = 8
    alpha: int = 16
    dropout: float = 0.0
    target_modules: list = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])


@dataclass
class LearnerConfig:
    name: str = "deepspeed"              # a registered learner (learner=NAME selects it)
    dtype: str = "float32"               # float32 | bfloat16
    micro_batch_tokens: int = 4096       # tokens per forward/backward; grads accumulate
    # the untrained tokens all segments of an update start with (system prompt, tool
    # schemas) are forwarded once and their keys/values reused by every row (exact
    # gradients, see ablate/learners/prefix.py); used when at least this many are shared
    shared_prefix: bool = True
    shared_prefix_min_tokens: int = 16
    # rerun each decoder layer's forward in backward instead of keeping its activations
    # (ablate/learners/recompute.py; the shared prefix's KV cache is kept): on in the GPU
    # presets, where a 16k-token micro-batch of Qwen3-4B would hold ~70-100 GB otherwise
    activation_checkpointing: bool = False
    # threads for update() alone (0: the process's, run.num_threads, which `auto` already
    # sets to the unshared cores, or the cell's cores where an engine's rule set the process
    # to 1 or the optimizer is offloaded: ablate/core/threads.py); on a loaded machine two
    # threads were 2x slower than one (docs/cpu.md)
    update_threads: int = 0
    weight_decay: float = 0.0
    betas: list = field(default_factory=lambda: [0.9, 0.999])
    grad_clip: float = 1.0
    warmup_steps: int = 0
    checkpoint_every: int = 1            # optimizer steps between checkpoints (0 = only at end)
    keep_checkpoints: int = 2            # newest complete checkpoints kept on disk
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class DeepSpeedLearnerConfig(LearnerConfig):
    """learner=deepspeed's own keys."""
    zero_stage: int = 3                  # 0..3 (ZeRO, Rajbhandari et al. 2020)
    # deep-merged into the generated DeepSpeed config (offload, buckets, thresholds, ...)
    ds_overrides: dict[str, Any] = field(default_factory=dict)


def offloaded(lc, what: str) -> bool:
    """learner.ds_overrides moves `what` (offload_optimizer / offload_param) off the
    device (ZeRO-Offload / ZeRO-Infinity: device cpu or nvme)."""
    over = getattr(lc, "ds_overrides", None) or {}
    zero = over.get("zero_optimization") or {}
    dev = (zero.get(what) or {}).get("device", "none")
    return str(dev).lower() in ("cpu", "nvme")


def check_learner(cfg) -> None:
    """The keys every learner has (learner.*)."""
    lc = cfg.learner
    need(lc.update_threads >= 0, "learner.update_threads", lc.update_threads,
         "must be >= 0 (0: the process's threads, or the cell's cores beside vLLM / "
         "under optimizer offload)")
    need(lc.micro_batch_tokens >= 1, "learner.micro_batch_tokens", lc.micro_batch_tokens,
         "must be >= 1")
    need(lc.checkpoint_every >= 0, "learner.checkpoint_every", lc.checkpoint_every,
         "must be >= 0 (0 = only at the end)")
    need(lc.keep_checkpoints >= 1, "learner.keep_checkpoints", lc.keep_checkpoints,
         "must be >= 1")
    for key in ("weight_decay", "grad_clip", "warmup_steps"):
        need(lc[key] >= 0, f"learner.{key}", lc[key], "must be >= 0")
    betas = list(lc.betas)
    need(len(betas) == 2 and all(0 <= b < 1 for b in betas), "learner.betas", betas,
         "give two values in [0, 1)")
    lo = lc.lora
    if lo.enable:
        need(lo.rank >= 1, "learner.lora.rank", lo.rank, "must be >= 1")
        need(lo.alpha > 0, "learner.lora.alpha", lo.alpha, "must be > 0")
        need(0 <= lo.dropout < 1, "learner.lora.dropout", lo.dropout, "must be in [0, 1)")


def check_deepspeed(cfg) -> None:
    """learner=deepspeed: the common keys, then its own."""
    check_learner(cfg)
    if cfg.learner.zero_stage not in (0, 1, 2, 3):
        raise ConfigError(f"learner.zero_stage={cfg.learner.zero_stage} is not allowed; "
                          "choose 0..3")
