"""Typed configuration of the sampler (`sampler=`): HF generate on CPU, vLLM on GPU."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SamplerConfig:
    name: str = "hf"                     # hf | vllm
    temperature: float = 1.0             # training rollouts; must be > 0 (groups need variety)
    top_p: float = 1.0                   # nucleus sampling mass, in (0, 1]
    eval_temperature: float = 0.0        # 0 = greedy evaluation
    # vllm only
    tensor_parallel_size: int = 1        # GPUs one vLLM engine spans
    gpu_memory_utilization: float = 0.5  # share of GPU memory vLLM may take, in (0, 1]
    enforce_eager: bool = True           # no CUDA graphs (faster start, slower decode)
