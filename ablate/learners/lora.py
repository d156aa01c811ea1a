"""peft LoRA for both learners: wrap a model, and merge gathered weights for export.

The merge runs on a plain (never ZeRO-partitioned) copy built on the meta device and
filled by assignment, so exporting costs no random init and works the same whether the
trained module lives in a DeepSpeed engine or not."""
from __future__ import annotations

import contextlib
import copy

import peft
import torch


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
