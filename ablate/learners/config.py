"""Typed configuration of the learner (`learner=`): DeepSpeed ZeRO-3 or plain torch."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class LoraConfig:
    enable: bool = False                 # train LoRA adapters instead of all weights
    rank: int = 8                        # LoRA rank r (Hu et al. 2021, sec. 4)
    alpha: int = 16                      # LoRA scale: updates are multiplied by alpha / rank
    dropout: float = 0.0                 # dropout on the LoRA input, in [0, 1)
    # modules that get LoRA adapters
    target_modules: list = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])


@dataclass
class LearnerConfig:
    name: str = "deepspeed"              # deepspeed | torch
    zero_stage: int = 3                  # DeepSpeed ZeRO stage 0..3 (Rajbhandari et al. 2020)
    dtype: str = "float32"               # float32 | bfloat16
    micro_batch_tokens: int = 4096       # tokens per forward/backward; grads accumulate
    weight_decay: float = 0.0            # AdamW decoupled weight decay (Loshchilov & Hutter 2019)
    betas: list = field(default_factory=lambda: [0.9, 0.999])   # AdamW (beta1, beta2)
    grad_clip: float = 1.0               # global gradient-norm clip (0 = off)
    warmup_steps: int = 0                # linear learning-rate warmup, optimizer steps
    checkpoint_every: int = 1            # optimizer steps between checkpoints (0 = only at end)
    keep_checkpoints: int = 2            # newest complete checkpoints kept on disk
    # deep-merged into the generated DeepSpeed config (offload, buckets, thresholds, ...)
    ds_overrides: dict[str, Any] = field(default_factory=dict)
    lora: LoraConfig = field(default_factory=LoraConfig)
