"""Policy models: the embedded tiny Qwen3-architecture model and Qwen3 checkpoints.

    load_policy(model_cfg) -> (model, tokenizer)     ablate.models.loading
    build_tokenizer(texts, vocab_size, ...)          ablate.models.tokenizer
"""
from __future__ import annotations


def load_policy(model_cfg):
    from ablate.models.loading import load_policy as _load
    return _load(model_cfg)
