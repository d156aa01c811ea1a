"""Row i of a batch through LoRA adapter names[i], several adapters injected in one module
tree over one base (a batched pack: docs/packs.md). The base matmul runs once over all
rows; each row adds its own adapter's delta. A row's gradient reaches its own adapter only.

Grouped, not looped: peft's mixed batch (peft/tuners/lora/layer.py `_mixed_batch_forward`)
runs each LoRA layer once per adapter in the batch (index, two matmuls, scatter), which at
8 adapters cost a tiny model's decode step more than its base forward (docs/packs.md). Here
a layer's adapters are stacked, each row picks its own A and B, and two batched matmuls
give every row's delta, the grouped LoRA of Punica (Chen et al. 2023, "Punica:
Multi-Tenant LoRA Serving", its SGMV kernel), as torch.bmm:
    delta_i = scale_i * (x_i @ A_i^T) @ B_i^T                  (Hu et al. 2021, eq. 3)
Under no_grad the stacks are kept per layer until a weight changes (a push copies into
the weights in place: torch's version counter says so). A layer the grouped form does not
cover (an adapter missing from it, unequal ranks, active dropout, a LoRA variant) takes
peft's own mixed-batch forward, the same hook PeftModel registers for `adapter_names`.
peft itself is not imported: its layers are found by their attributes.

`model_rows` is the same grouped form over several module trees that share one base,
each with its own adapter (a batched pack's learners): row i through model rows[i]'s
adapter, its gradient into that model's parameters."""
from __future__ import annotations

import contextlib
import weakref
from functools import partial

import torch


def _names_hook(module, args, kwargs, names):
    kwargs["adapter_names"] = names       # peft/tuners/lora/model.py, the same pre-hook
    return args, kwargs


def _lora_layers(model: torch.nn.Module) -> list:
    return [m for m in model.modules() if hasattr(m, "_mixed_batch_forward")]


# Per model: its LoRA layers (kept while its adapters are the same: peft_config's names)
# and, per set of adapter names and training mode, which layers take the grouped form.
# adapter_rows runs at every decode step; walking a Qwen3-4B-shaped tree holding 8
# adapters (5,013 modules) and checking its 144 LoRA layers at every call took 41.8 ms a
# call against 0.68 ms with the plan kept (benchmarks/results/bench_adapter_rows.json),
# more than a 4B decode step on a GPU.
_PLANS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _plan(model: torch.nn.Module, unique: list[str], grouped: bool) -> list[tuple]:
    """[(layer, takes the grouped form)] for these adapter names."""
    adapters = tuple(getattr(model, "peft_config", None) or ())
    kept = _PLANS.get(model)
    if kept is None or kept[0] != adapters:
        kept = (adapters, _lora_layers(model), {})
        _PLANS[model] = kept
    key = (tuple(unique), grouped, model.training)
    if key not in kept[2]:
        kept[2][key] = [(layer, grouped and _groupable(layer, unique)) for layer in kept[1]]
    return kept[2][key]


def _groupable(layer, unique: list[str]) -> bool:
    """Plain linear LoRA for every adapter named, equal ranks, no dropout in effect."""
    if not hasattr(layer, "lora_A") or getattr(layer, "merged", False):
        return False
    if any(n not in layer.lora_A or n in getattr(layer, "lora_variant", {}) for n in unique):
        return False
    if len({layer.lora_A[n].weight.shape for n in unique}) != 1:
        return False
    return not (layer.training and any(
        not isinstance(layer.lora_dropout[n], torch.nn.Identity) for n in unique))


def _stacks(layer, unique: list[str]):
    """(A [U, r, in], B [U, out, r], scale [U]) of the named adapters, kept under no_grad
    until one of their weights changes in place."""
    weights = [w for n in unique for w in (layer.lora_A[n].weight, layer.lora_B[n].weight)]
    key = (tuple(unique), tuple(w._version for w in weights), tuple(map(id, weights)))
    kept = getattr(layer, "_ablate_stacks", None)
    if kept is not None and kept[0] == key and not torch.is_grad_enabled():
        return kept[1]
    a = torch.stack([layer.lora_A[n].weight for n in unique])
    b = torch.stack([layer.lora_B[n].weight for n in unique])
    scale = torch.tensor([float(layer.scaling[n]) for n in unique], dtype=a.dtype,
                         device=a.device)
    if not torch.is_grad_enabled():
        layer._ablate_stacks = (key, (a, b, scale))
    return a, b, scale


def _grouped_hook(layer, args, output, stacks, rows):
    """The base output plus each row's own adapter's delta (two batched matmuls);
    stacks() gives the adapters' (A [U, r, in], B [U, out, r], scale [U])."""
    x = args[0]
    a, b, scale = stacks()
    idx = rows.to(x.device)
    flat = x.to(a.dtype).reshape(x.shape[0], -1, x.shape[-1])          # [B, T, in]
    h = torch.bmm(flat, a[idx].transpose(1, 2))                        # [B, T, r]
    delta = torch.bmm(h, b[idx].transpose(1, 2)) * scale[idx].view(-1, 1, 1)
    return output + delta.reshape(*output.shape).to(output.dtype)


@contextlib.contextmanager
def adapter_rows(model: torch.nn.Module, names: list[str] | None, grouped: bool = True):
    """Inside: row i of every batch goes through adapter names[i] (None: nothing changes).
    grouped=False: peft's mixed-batch forward on every layer (the reference)."""
    if names is None:
        yield
        return
    unique = sorted(set(names))
    rows = torch.tensor([unique.index(n) for n in names], dtype=torch.long)
    handles, off = [], []
    for layer, group in _plan(model, unique, grouped):
        if group:
            _group(layer, partial(_stacks, layer, unique), rows, handles, off)
        else:
            handles.append(layer.register_forward_pre_hook(
                partial(_names_hook, names=list(names)), with_kwargs=True))
    try:
        yield
    finally:
        _undo(handles, off)


def _group(layer, stacks, rows, handles: list, off: list) -> None:
    """The layer's own LoRA off (peft's forward: the base alone) and the grouped delta
    added after it; what to undo goes into handles and off."""
    off.append((layer, layer._disable_adapters))
    # a plain bool attribute: nn.Module.__setattr__ would end in object.__setattr__ after
    # its Parameter / Module / buffer checks, the larger part of this per-step cost
    object.__setattr__(layer, "_disable_adapters", True)
    handles.append(layer.register_forward_hook(
        partial(_grouped_hook, stacks=stacks, rows=rows)))


def _undo(handles: list, off: list) -> None:
    for h in handles:
        h.remove()
    for layer, was in off:
        object.__setattr__(layer, "_disable_adapters", was)


def _own_adapter(layer) -> tuple:
    """(A, B, scale) of a LoRA layer's one active adapter, with their autograd history."""
    name = layer.active_adapters[0]
    return layer.lora_A[name].weight, layer.lora_B[name].weight, float(layer.scaling[name])


def _model_stacks(layers: list):
    own = [_own_adapter(layer) for layer in layers]
    a = torch.stack([o[0] for o in own])
    return a, torch.stack([o[1] for o in own]), torch.tensor(
        [o[2] for o in own], dtype=a.dtype, device=a.device)


def _check_groupable(path: str, layers: list) -> None:
    for layer in layers:
        if len(layer.active_adapters) != 1 or not _groupable(layer, layer.active_adapters):
            raise ValueError(f"{path}: a LoRA layer the grouped form does not cover (merged, "
                             "a LoRA variant, active dropout or several active adapters)")
    if len({_own_adapter(layer)[0].shape for layer in layers}) != 1:
        raise ValueError(f"{path}: the models' LoRA ranks differ")


@contextlib.contextmanager
def model_rows(models: list[torch.nn.Module], rows: list[int]):
    """Inside: row i of every batch run through models[0] goes through the own LoRA
    adapter of models[rows[i]], module trees over ONE base (each a PeftModel with its
    single adapter: the cells of a batched pack, ablate/learners/packed.py). The base runs
    once for all rows; the adapters' weights enter with their autograd history, so under
    grad each row's gradient reaches its own model's adapter only."""
    lead, idx = models[0], torch.tensor(rows, dtype=torch.long)
    trees = [dict(m.named_modules()) for m in models[1:]]
    handles, off = [], []
    try:
        for path, layer in lead.named_modules():
            if not hasattr(layer, "_mixed_batch_forward"):
                continue
            layers = [layer] + [tree[path] for tree in trees]
            _check_groupable(path, layers)
            _group(layer, partial(_model_stacks, layers), idx, handles, off)
        yield
    finally:
        _undo(handles, off)
