"""Activation checkpointing of the decoder layers (`learner.activation_checkpointing`):
each layer keeps only its input for backward and is run again there (Chen et al. 2016,
"Training Deep Nets with Sublinear Memory Cost", arXiv:1604.06174), with torch's
non-reentrant checkpoint (torch/utils/checkpoint.py, `use_reentrant=False`).

transformers' own switch (`gradient_checkpointing_enable`) is off in `eval()`, where the
learners run (no dropout: an on-policy ratio is exactly 1), and turns the KV cache off,
which the shared-prefix forward needs (ablate/learners/prefix.py). Here the cache stays:
a layer appends its keys and values to its cache layer during the forward; before the
layer runs again in backward, its cache layer is put back as it was, so the rerun sees
the same keys and values and appends the same ones (checkpoint checks the saved tensors
match)."""
from __future__ import annotations

import functools

import torch
from torch.utils.checkpoint import checkpoint


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's decoder layers: the members of its ModuleList named `layers` (Qwen3,
    Llama, Qwen3-MoE; under a peft wrapper too)."""
    for name, module in model.named_modules():
        if name.split(".")[-1] == "layers" and isinstance(module, torch.nn.ModuleList):
            return list(module)
    raise ValueError(f"learner.activation_checkpointing: no decoder `layers` list in "
                     f"{type(model).__name__}; set learner.activation_checkpointing=false")


def enable(model: torch.nn.Module) -> int:
    """Checkpoint every decoder layer of `model`; returns how many."""
    layers = decoder_layers(model)
    for i, layer in enumerate(layers):
        if not getattr(layer, "_ablate_recompute", False):
            layer.forward = functools.partial(_checkpointed, layer.forward, i)
            layer._ablate_recompute = True
    return len(layers)


def _cache_layer(args, kwargs, index: int):
    cache = kwargs.get("past_key_values", kwargs.get("cache"))
    layers = getattr(cache, "layers", None)
    return layers[index] if layers is not None and index < len(layers) else None


def _checkpointed(forward, index: int, *args, **kwargs):
    """`forward` run under checkpoint when grad is on (the reference's forward and the
    sampler's are not recorded), its cache layer restored before each run."""
    if not torch.is_grad_enabled():
        return forward(*args, **kwargs)
    layer = _cache_layer(args, kwargs, index)
    before = dict(vars(layer)) if layer is not None else None

    def run(*a):
        if layer is not None:             # the rerun starts from the same cache state
            vars(layer).clear()
            vars(layer).update(before)
        return forward(*a, **kwargs)
    return checkpoint(run, *args, use_reentrant=False)
