"""Typed configuration of the learner (`learner=`): DeepSpeed ZeRO-3 or plain torch."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class LoraConfig:
    enable: bool = False
    rank: int = 8
    alpha: int = 16
    dropout: float = 0.0
    target_modules: list = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])


@dataclass
class LearnerConfig:
    name: str = "deepspeed"              # deepspeed | torch
    zero_stage: int = 3
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
    # sets to the unshared cores); on a loaded machine two threads were 2x slower than one
    # (docs/cpu.md)
    update_threads: int = 0
    weight_decay: float = 0.0
    betas: list = field(default_factory=lambda: [0.9, 0.999])
    grad_clip: float = 1.0
    warmup_steps: int = 0
    checkpoint_every: int = 1            # optimizer steps between checkpoints (0 = only at end)
    keep_checkpoints: int = 2            # newest complete checkpoints kept on disk
    # deep-merged into the generated DeepSpeed config (offload, buckets, thresholds, ...)
    ds_overrides: dict[str, Any] = field(default_factory=dict)
    lora: LoraConfig = field(default_factory=LoraConfig)
