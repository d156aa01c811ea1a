"""A LoRA adapter as it crosses from the learner to a sampler (adapter-native sync): the
sampler keeps the base it loaded and receives only the adapter, so a push moves the
adapter's bytes (megabytes), not a merged copy of the base (gigabytes).

The format is peft's saved one, so peft and vLLM read it as they read an adapter folder:
tensor keys `base_model.model.<module>.lora_A.weight` / `.lora_B.weight` (peft/utils/
save_and_load.py `get_peft_model_state_dict`), the LoraConfig's fields in
adapter_config.json and the tensors in adapter_model.safetensors (vllm/lora/
peft_helper.py and lora/models.py read those two files)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

PREFIX = "base_model.model."          # peft's prefix of a saved adapter's keys
CONFIG_FILE, WEIGHTS_FILE = "adapter_config.json", "adapter_model.safetensors"


@dataclass
class LoraAdapter:
    config: dict                      # adapter_config.json's fields (JSON-able)
    tensors: dict[str, torch.Tensor]  # peft's saved keys -> cpu tensors

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())

    def module_keys(self, adapter_name: str = "default") -> dict[str, torch.Tensor]:
        """The tensors under the keys of a model whose LoRA layers were injected in place
        (peft `inject_adapter_in_model`): `<module>.lora_A.<adapter_name>.weight`."""
        out = {}
        for key, t in self.tensors.items():
            name = key.removeprefix(PREFIX)
            for part in ("lora_A", "lora_B"):
                name = name.replace(f".{part}.weight", f".{part}.{adapter_name}.weight")
            out[name] = t
        return out

    def save(self, folder: Path) -> Path:
        """adapter_config.json and adapter_model.safetensors in `folder` (created)."""
        from safetensors.torch import save_file
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / CONFIG_FILE).write_text(json.dumps(self.config, indent=1, sort_keys=True))
        save_file({k: v.contiguous() for k, v in self.tensors.items()},
                  str(folder / WEIGHTS_FILE))
        return folder


def json_config(peft_config) -> dict:
    """A peft LoraConfig as adapter_config.json holds it (sets as sorted lists, enums as
    their values), as peft's PeftConfig.save_pretrained writes it."""
    def plain(v):
        if isinstance(v, (set, frozenset)):
            return sorted(plain(x) for x in v)
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in v.items()}
        if hasattr(v, "value") and not isinstance(v, (int, float, str, bool)):
            return v.value                # peft's PeftType / TaskType enums
        return v if v is None or isinstance(v, (int, float, str, bool)) else str(v)
    return {k: plain(v) for k, v in peft_config.to_dict().items()}
