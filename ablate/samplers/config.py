"""Typed configuration of the sampler (`sampler=`): HF generate on CPU, vLLM on GPU."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SamplerConfig:
    name: str = "hf"                     # hf | vllm
    temperature: float = 1.0
    top_p: float = 1.0
    eval_temperature: float = 0.0        # 0 = greedy evaluation
    # vllm only
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.5
    enforce_eager: bool = True
