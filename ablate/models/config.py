"""Typed configuration of the policy model (`model=`)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

# checkpoints shipped with the package (`${ablate_asset:NAME}` in a model preset)
ASSETS_DIR = Path(__file__).resolve().parent / "assets"


@dataclass
class ModelConfig:
    name: str = "tiny"                   # tiny | qwen3_* | smollm2_135m | any name + path
    path: Optional[str] = None           # local directory or HF cache id; tiny: shipped checkpoint
    dtype: str = "float32"               # float32 | bfloat16
    trust_remote_code: bool = False      # let transformers run the model repo's own code
    hf_id: Optional[str] = None          # Hugging Face repo id looked up in the local cache
    tool_format: str = "auto"            # auto (from the template) | hermes | llama3_json | json_text
    chat_template: Optional[str] = None  # a .jinja file for a tokenizer that has none
    warm_start: bool = False             # smollm2_135m: SFT warm start (python -m ablate.recipes.smollm_warmstart warmstart)
