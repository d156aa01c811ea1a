"""Typed configuration of the sampler (`sampler=`): HF generate on CPU, vLLM on GPU, or
vLLM OpenAI-compatible servers (`sampler=vllm_server`, docs/vllm_server.md)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional


@dataclass
class SamplerConfig:
    name: str = "hf"                     # hf | vllm | vllm_server
    temperature: float = 1.0
    top_p: float = 1.0
    eval_temperature: float = 0.0        # 0 = greedy evaluation
    # vllm and vllm_server
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.5
    enforce_eager: bool = True           # false on a GPU: CUDA graphs for decoding
    # vllm in-process on a GPU: weights to host memory and KV cache freed during each
    # learner update (vLLM sleep mode, level 1), so the update has the device's memory
    sleep_during_update: bool = True
    weight_sync: str = "file"            # file | collective: how weights reach vLLM
    # vllm_server only (ablate/samplers/vllm_server.py)
    urls: List[str] = field(default_factory=list)  # running servers; [] = start num_servers
    num_servers: int = 1                 # servers the cell starts (when urls is empty)
    python: Optional[str] = None         # their interpreter (a venv with vllm); null = ours
    devices: List[str] = field(default_factory=list)  # CUDA_VISIBLE_DEVICES per server
    host: str = "127.0.0.1"              # where started servers listen
    request_timeout_s: float = 600.0     # longest wait for one generate call or push
    startup_timeout_s: float = 900.0     # longest wait for a started server to be ready
    log_dir: Optional[str] = None        # server logs; null = the cell directory
    weights_dir: Optional[str] = None    # pushed safetensors; shared fs for remote servers
    max_model_len: Optional[int] = None
    server_args: List[str] = field(default_factory=list)  # extra `vllm serve` arguments


WEIGHT_SYNCS = ("file", "collective")


def weight_sync_problem(sc) -> str | None:
    """sampler.weight_sync's check: the one-line reason, or None."""
    if sc.weight_sync not in WEIGHT_SYNCS:
        return f"sampler.weight_sync={sc.weight_sync!r}: expected one of {list(WEIGHT_SYNCS)}"
    if sc.weight_sync == "collective" and sc.name not in ("vllm", "vllm_server"):
        return (f"sampler.weight_sync=collective needs sampler=vllm_server or vllm, not "
                f"{sc.name!r} (its weights are the learner's own)")
    return None


def server_problem(sc) -> str | None:
    """sampler=vllm_server's checks: the one-line reason naming the key, or None."""
    from pathlib import Path
    if sc.request_timeout_s <= 0 or sc.startup_timeout_s <= 0:
        return (f"sampler.request_timeout_s={sc.request_timeout_s!r} / sampler.startup_"
                f"timeout_s={sc.startup_timeout_s!r}: both must be > 0 seconds")
    bad = [u for u in sc.urls if not str(u).startswith(("http://", "https://"))]
    if bad:
        return f"sampler.urls: {bad[0]!r} is not an http(s)://host:port URL"
    if not sc.urls:
        if sc.num_servers < 1:
            return f"sampler.num_servers={sc.num_servers!r} must be >= 1 (or give sampler.urls)"
        if sc.python and not Path(sc.python).is_file():
            return f"sampler.python={sc.python!r}: no such file (a venv's bin/python with vllm)"
        if sc.devices and len(sc.devices) != sc.num_servers:
            return (f"sampler.devices={list(sc.devices)!r}: give one CUDA_VISIBLE_DEVICES value "
                    f"per server (sampler.num_servers={sc.num_servers}) or none")
    return None
