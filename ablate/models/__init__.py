"""Policy models: the embedded tiny Qwen3-architecture model and Qwen3 checkpoints.

    load_policy(model_cfg) -> (model, tokenizer)     ablate.models.loading
    build_tokenizer(texts, vocab_size, ...)          ablate.models.tokenizer
"""
from __future__ import annotations


def load_policy(model_cfg):
    # deferred: loading imports torch (+1.0 s, ~1000 modules measured, 2-core host), which
    # ablate.models.tokenizer (the chat layer's, through ablate.rewards) never needs
    from ablate.models.loading import load_policy as _load
    return _load(model_cfg)
