"""Typed configuration of the policy model (`model=`)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class ModelConfig:
    name: str = "tiny"                   # tiny | qwen3_4b | qwen3_4b_thinking | qwen3_30b_a3b
    path: Optional[str] = None           # local directory or HF cache id; tiny: shipped checkpoint
    dtype: str = "float32"               # float32 | bfloat16
    trust_remote_code: bool = False      # let transformers run the model repo's own code
    hf_id: Optional[str] = None          # Hugging Face repo id looked up in the local cache
