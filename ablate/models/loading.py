"""Policy loading (`model=`): the embedded tiny model, Qwen3 weights from a local
directory / the local Hugging Face cache, or a packaged GGUF model (ablate.models.smollm:
SmolLM2-135M-Instruct, converted once to a cached local directory). Nothing is downloaded
here: a cluster node often has no network, and a silent multi-GB download inside a run
is a bad surprise."""
from __future__ import annotations

import contextlib
import copy
import itertools
import os
from pathlib import Path

import torch

from ablate.models.errors import ModelNotFoundError  # noqa: F401  (re-exported)
from ablate.models.smollm import PACKAGED, converted_dir, warm_started_dir
from ablate.models.tiny import load_tiny

# name -> Hugging Face repo id (the `hf_id` field of conf/model/<name>.yaml overrides)
HF_IDS = {
    "qwen3_4b": "Qwen/Qwen3-4B-Instruct-2507",
    "qwen3_4b_thinking": "Qwen/Qwen3-4B-Thinking-2507",
    "qwen3_30b_a3b": "Qwen/Qwen3-30B-A3B-Instruct-2507",
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _hub_cache() -> str:
    try:
        from huggingface_hub.constants import HF_HUB_CACHE
        return str(HF_HUB_CACHE)
    except Exception:                          # noqa: BLE001
        return os.path.join(os.environ.get("HF_HOME", "~/.cache/huggingface"), "hub")


def _packaged():
    return PACKAGED


def resolve_weights(model_cfg) -> str:
    """A local directory holding config.json + weights for model_cfg, or a clear error."""
    name = model_cfg.name
    repo = getattr(model_cfg, "hf_id", None) or HF_IDS.get(name)
    path = getattr(model_cfg, "path", None)
    if path:
        p = Path(os.path.expanduser(str(path)))
        if (p / "config.json").is_file():
            return str(p)
        if not p.exists() and "/" in str(path) and not str(path).startswith(("/", ".", "~")):
            repo = str(path)                   # model.path=Org/Name: a cache id
        else:
            raise ModelNotFoundError(
                f"model.path={path} has no config.json: point model.path at a directory "
                f"holding the Hugging Face files of {repo or name} (config.json, tokenizer, "
                "*.safetensors)")
    if name in _packaged():
        if getattr(model_cfg, "warm_start", False):
            return warm_started_dir(name)
        return converted_dir(name)
    if repo is None:
        raise ModelNotFoundError(f"model.name={name!r} has no known repo id; set model.path")
    try:
        from huggingface_hub import snapshot_download
        return snapshot_download(repo, local_files_only=True)
    except Exception:                          # noqa: BLE001 - any miss: same advice
        raise ModelNotFoundError(
            f"weights of {repo} (model={name}) not found locally. Either pass "
            f"model.path=/dir/with/{repo.split('/')[-1]} (config.json, tokenizer, *.safetensors), "
            f"or put them in the Hugging Face cache ({_hub_cache()}; HF_HOME/HF_HUB_CACHE move it). "
            f"On a machine with network: `huggingface-cli download {repo}` (same cache), or "
            f"`huggingface-cli download {repo} --local-dir DIR` and copy DIR here. "
            f"Loading is always offline (local_files_only; HF_HUB_OFFLINE is respected).") \
            from None


_SHARED: dict | None = None   # model config -> (model, tokenizer) inside shared_bases()


@contextlib.contextmanager
def shared_bases():
    """Inside: load_policy loads each model config once and returns, every time, a
    module tree of its own whose parameters and buffers ARE the loaded ones (one base in
    memory for all the cells of a pack: hydra/launcher=pack, docs/packs.md). Only for
    cells that never write the base: LoRA under a learner that declares "shared_base",
    whose samplers hold the adapter unmerged (ablate/core/adapter.py)."""
    global _SHARED
    outer, _SHARED = _SHARED, {}
    try:
        yield
    finally:
        _SHARED = outer


def sharing_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of the module tree whose parameters and buffers are the original tensors
    (copy.deepcopy with them in its memo: tied weights stay tied)."""
    memo = {id(t): t for t in itertools.chain(model.parameters(), model.buffers())}
    return copy.deepcopy(model, memo)


def sampler_copy(model: torch.nn.Module) -> torch.nn.Module:
    """The in-memory sampler's own model (ModelPolicy): sharing the base inside
    shared_bases(), else a deep copy (DeepSpeed partitions the learner's in place)."""
    return sharing_copy(model) if _SHARED is not None else copy.deepcopy(model)


def load_policy(model_cfg):
    """(model, tokenizer) for model_cfg; inside shared_bases() the base is loaded once."""
    if _SHARED is None:
        return _load_policy(model_cfg)
    key = repr(sorted((k, str(v)) for k, v in dict(model_cfg).items()))
    if key not in _SHARED:
        _SHARED[key] = _load_policy(model_cfg)
    model, tok = _SHARED[key]
    return sharing_copy(model), copy.deepcopy(tok)


def _load_policy(model_cfg):
    """(model, tokenizer) for model_cfg; `tiny` comes from ablate.models.tiny."""
    if model_cfg.name == "tiny":
        return load_tiny(model_cfg)
    from transformers import AutoModelForCausalLM, AutoTokenizer
    path = resolve_weights(model_cfg)
    dtype = DTYPES.get(str(model_cfg.dtype))
    if dtype is None:
        raise ValueError(f"model.dtype={model_cfg.dtype!r}; choose one of {list(DTYPES)}")
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True,
                                        trust_remote_code=model_cfg.trust_remote_code)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=dtype, local_files_only=True,
        trust_remote_code=model_cfg.trust_remote_code)
    return model, tok
