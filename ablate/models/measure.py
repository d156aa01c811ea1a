"""A model's Shape (ablate.core.plan) for the memory plan, measured from its config on the
meta device: no memory, no weights, no GPU."""
from __future__ import annotations

import functools

import torch

from ablate.core.plan import Shape


def shape_of(config) -> Shape:
    """Build the model on the meta device (no memory, no weights) and measure it."""
    from transformers import AutoModelForCausalLM   # deferred: only a plan needs it
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    tc = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = int(tc.num_attention_heads)
    head_dim = getattr(tc, "head_dim", None) or tc.hidden_size // heads
    layers = _decoder_layers(model)
    in_layers = {id(p) for layer in layers for p in layer.parameters()}
    others = [sum(p.numel() for p in m.parameters(recurse=False) if id(p) not in in_layers)
              for m in model.modules()]
    linears = tuple((n.rsplit(".", 1)[-1], m.in_features, m.out_features)
                    for n, m in model.named_modules() if isinstance(m, torch.nn.Linear))
    return Shape(arch=type(model).__name__, params=sum(p.numel() for p in model.parameters()),
                 hidden=int(tc.hidden_size), layers=int(tc.num_hidden_layers),
                 kv_heads=int(getattr(tc, "num_key_value_heads", None) or heads),
                 head_dim=int(head_dim), vocab=int(tc.vocab_size),
                 largest_layer=max((sum(p.numel() for p in m.parameters()) for m in layers),
                                   default=0),
                 largest_other=max(others, default=0), linears=linears,
                 largest_param=max((p.numel() for p in model.parameters()), default=0),
                 context=int(getattr(tc, "max_position_embeddings", None) or 0))


def _decoder_layers(model) -> list:
    """The repeated blocks: the longest ModuleList in the model."""
    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList)]
    return list(max(lists, key=len)) if lists else []


@functools.lru_cache(maxsize=8)
def shape_of_dir(model_dir: str, trust_remote_code: bool = False) -> Shape:
    from transformers import AutoConfig   # deferred: only a plan needs it
    return shape_of(AutoConfig.from_pretrained(model_dir, local_files_only=True,
                                               trust_remote_code=trust_remote_code))
