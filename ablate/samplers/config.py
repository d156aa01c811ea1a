"""Typed configuration of the sampler (`sampler=`): the keys every sampler has
(SamplerConfig) and each backend's own (VLLMSamplerConfig for the in-process engine,
VLLMServerSamplerConfig for OpenAI-compatible servers, docs/vllm_server.md), each with its
one check beside it, declared where the backend registers (ablate/samplers/__init__.py)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

from ablate.core.errors import ConfigError, need


@dataclass
class SamplerConfig:
    name: str = "hf"                     # a registered sampler (sampler=NAME selects it)
    temperature: float = 1.0
    top_p: float = 1.0
    eval_temperature: float = 0.0        # 0 = greedy evaluation


@dataclass
class VLLMEngineConfig(SamplerConfig):
    """The keys of every vLLM engine, in this process or behind a server."""
    tensor_parallel_size: int = 1        # GPUs one engine shards the model over
    gpu_memory_utilization: float = 0.5  # share of each GPU the engine may take
    enforce_eager: bool = True           # false on a GPU: CUDA graphs for decoding
    weight_sync: str = "file"            # file | collective: how weights reach vLLM
    request_timeout_s: float = 600.0     # longest wait for one generate call or push
    # positions one sequence may hold (the engine sizes its KV cache for at least one);
    # null = the model's own (Qwen3-4B-Instruct-2507: 262,144, ~36 GiB of KV at bf16)
    max_model_len: Optional[int] = None


@dataclass
class VLLMSamplerConfig(VLLMEngineConfig):
    """sampler=vllm's own keys (the engine in this process)."""
    # on a GPU: weights to host memory and KV cache freed during each learner update
    # (vLLM sleep mode, level 1), so the update has the device's memory
    sleep_during_update: bool = True
    # weight_sync=file: a push of at most this many MiB goes in the engine call's message,
    # a larger one through a file in /dev/shm (one message is refused past 4 GiB)
    push_cap_mb: float = 1024.0


@dataclass
class VLLMServerSamplerConfig(VLLMEngineConfig):
    """sampler=vllm_server's own keys (ablate/samplers/vllm_server.py)."""
    urls: List[str] = field(default_factory=list)  # running servers; [] = start num_servers
    num_servers: int = 1                 # servers the cell starts (when urls is empty)
    python: Optional[str] = None         # their interpreter (a venv with vllm); null = ours
    devices: List[str] = field(default_factory=list)  # CUDA_VISIBLE_DEVICES per server
    host: str = "127.0.0.1"              # where started servers listen
    startup_timeout_s: float = 900.0     # longest wait for a started server to be ready
    log_dir: Optional[str] = None        # server logs; null = the cell directory
    weights_dir: Optional[str] = None    # pushed safetensors; shared fs for remote servers
    server_args: List[str] = field(default_factory=list)  # extra `vllm serve` arguments


WEIGHT_SYNCS = ("file", "collective")


def check_sampler(cfg) -> None:
    """The keys every sampler has (sampler.*)."""
    s = cfg.sampler
    need(s.temperature > 0, "sampler.temperature", s.temperature,
         "training samples a group of rollouts per task: must be > 0 "
         "(eval.temperature=0 is the greedy switch, for evaluation)")
    need(s.eval_temperature >= 0, "sampler.eval_temperature", s.eval_temperature,
         "must be >= 0 (0 = greedy)")
    need(0 < s.top_p <= 1, "sampler.top_p", s.top_p, "must be in (0, 1]")


def check_vllm(cfg) -> None:
    """sampler=vllm: the common keys, then the engine's."""
    check_sampler(cfg)
    _check_engine(cfg.sampler)
    need(0 < cfg.sampler.push_cap_mb < 4096, "sampler.push_cap_mb", cfg.sampler.push_cap_mb,
         "must be in (0, 4096): one message carries at most 4 GiB")


def _check_engine(s) -> None:
    need(s.weight_sync in WEIGHT_SYNCS, "sampler.weight_sync", s.weight_sync,
         f"choose one of {list(WEIGHT_SYNCS)}")
    need(s.tensor_parallel_size >= 1, "sampler.tensor_parallel_size",
         s.tensor_parallel_size, "must be >= 1")
    need(0 < s.gpu_memory_utilization <= 1, "sampler.gpu_memory_utilization",
         s.gpu_memory_utilization, "must be in (0, 1]")
    need(s.request_timeout_s > 0, "sampler.request_timeout_s", s.request_timeout_s,
         "must be > 0 seconds")
    need(s.max_model_len is None or s.max_model_len >= 1, "sampler.max_model_len",
         s.max_model_len, "must be >= 1 positions or null (the model's own)")


def check_vllm_server(cfg) -> None:
    """sampler=vllm_server: the engine's keys, then the servers'."""
    check_sampler(cfg)
    problem = server_problem(cfg.sampler)
    if problem:
        raise ConfigError(problem)
    _check_engine(cfg.sampler)


def server_problem(sc) -> str | None:
    """sampler=vllm_server's own checks: the one-line reason naming the key, or None."""
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


def devices_problem(sc, visible: int) -> str | None:
    """An engine's tensor parallelism against the CUDA devices visible here (preflight,
    run.device=cuda): the one-line reason naming the key, or None. Servers given by
    sampler.urls run elsewhere; servers started here take sampler.devices (one
    CUDA_VISIBLE_DEVICES value each, as many ids as the parallelism) or the visible GPUs."""
    tp = sc.get("tensor_parallel_size")
    if tp is None or sc.get("urls"):
        return None
    devices = list(sc.get("devices") or [])
    short = [d for d in devices if len(str(d).split(",")) < tp]
    if short:
        return (f"sampler.tensor_parallel_size={tp} is not allowed: sampler.devices entry "
                f"{short[0]!r} names fewer than {tp} GPUs; give each server {tp} device "
                "ids or lower sampler.tensor_parallel_size")
    if devices or tp <= visible:
        return None
    fix = ("use sampler.tensor_parallel_size=1" if visible <= 1 else
           f"use sampler.tensor_parallel_size<={visible}")
    return (f"sampler.tensor_parallel_size={tp} is not allowed: {visible} CUDA device(s) "
            f"visible here; {fix}, or run where {tp} GPUs are visible "
            "(CUDA_VISIBLE_DEVICES, the launcher's GPUs per node)")
