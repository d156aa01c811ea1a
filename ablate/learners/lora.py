"""peft LoRA for both learners: wrap a model, export its adapter alone (adapter-native
sync), and merge gathered weights for a sampler that cannot load adapters.

The merge runs on a plain (never ZeRO-partitioned) copy built on the meta device and
filled by assignment, so exporting costs no random init and works the same whether the
trained module lives in a DeepSpeed engine or not."""
from __future__ import annotations

import contextlib
import copy
import warnings

import peft
import torch

from ablate.core.adapter import LoraAdapter, json_config


def lora_config(cfg) -> peft.LoraConfig:
    return peft.LoraConfig(r=int(cfg.rank), lora_alpha=int(cfg.alpha),
                           lora_dropout=float(cfg.dropout),
                           target_modules=list(cfg.target_modules), bias="none",
                           task_type="CAUSAL_LM")


def apply_lora(model: torch.nn.Module, cfg) -> torch.nn.Module:
    """Only the adapters train (peft freezes the base); the adapter init draws from the
    global torch RNG, so the caller seeds it first."""
    return peft.get_peft_model(model, lora_config(cfg))


@contextlib.contextmanager
def _zero3_off():
    """While an HfDeepSpeedConfig is alive transformers builds models under zero.Init;
    the export copy must be plain."""
    from transformers.integrations import deepspeed as hfds
    saved = hfds._hf_deepspeed_config_weak_ref
    hfds._hf_deepspeed_config_weak_ref = None
    try:
        yield
    finally:
        hfds._hf_deepspeed_config_weak_ref = saved


def merged_state_dict(peft_model, gathered: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`gathered`: the full state dict of `peft_model` (peft keys). Returns the merged
    model's state dict with standard HF keys."""
    from transformers import AutoModelForCausalLM
    base_cfg = peft_model.get_base_model().config
    adapter_cfg = copy.deepcopy(peft_model.peft_config[peft_model.active_adapter])
    with _zero3_off(), torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(base_cfg)
        plain = peft.get_peft_model(plain, adapter_cfg)
    missing, unexpected = plain.load_state_dict(gathered, strict=False, assign=True)
    if unexpected or any(not k.endswith("lm_head.weight") for k in missing):
        raise RuntimeError(f"LoRA export: keys do not match (missing {missing[:5]}, "
                           f"unexpected {unexpected[:5]})")
    if getattr(base_cfg, "tie_word_embeddings", False):
        plain.get_base_model().tie_weights()
    merged = plain.merge_and_unload()
    return {k: v.detach().clone() for k, v in merged.state_dict().items()}


def adapter_of(peft_model, trained: dict[str, torch.Tensor]) -> LoraAdapter:
    """The active adapter of `peft_model` in peft's saved format, from `trained` (its
    trainable parameters under the model's own keys, gathered on cpu)."""
    name = peft_model.active_adapter
    tensors = peft.get_peft_model_state_dict(peft_model, state_dict=trained, adapter_name=name)
    return LoraAdapter(json_config(peft_model.peft_config[name]),
                       {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()})


def add_adapter(model: torch.nn.Module, name: str, adapter: LoraAdapter) -> None:
    """`adapter` loaded into `model` under `name`, unmerged, beside the adapters it holds:
    injected (peft `inject_adapter_in_model`) the first time, its tensors copied in place
    after (the cells of a pack over one base, docs/packs.md)."""
    params = dict(model.named_parameters())
    if not all(k in params for k in adapter.module_keys(name)):
        keep = set(peft.LoraConfig.__dataclass_fields__)
        config = peft.LoraConfig(**{k: v for k, v in adapter.config.items() if k in keep})
        with warnings.catch_warnings():   # "multiple adapters in the model": the point here
            warnings.filterwarnings("ignore", message="Already found a `peft_config`")
            peft.inject_adapter_in_model(config, model, adapter_name=name)
        model.eval()                      # the injected layers start in training mode
        params = dict(model.named_parameters())
    with torch.no_grad():
        for key, t in adapter.module_keys(name).items():
            params[key].copy_(t)
