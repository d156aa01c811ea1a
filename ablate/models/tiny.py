"""The embedded tiny policy: a Qwen3-architecture model of a few million parameters with
its own byte-level BPE tokenizer, warm-started by SFT on scripted-agent demonstrations.

    load_tiny(model_cfg) -> (model, tokenizer)
        the shipped checkpoint in ablate/models/assets/tiny/ (or model_cfg.path).

Building, warm-starting and evaluating it are recipes (python -m ablate.recipes.tiny
build | warmstart | eval; ablate/recipes/tiny.py): loading never imports an environment.

Why it can act at all (docs/cpu.md, "Why the tiny model needs action masking"): message ids, code names and answer
values are single tokens (ablate.envs.email.synthetic pools), so copying one out of the context is
pointing at one token; copy tokens are weighted up in the SFT loss. Build details in
ablate.recipes.tiny_train.
"""
from __future__ import annotations

from pathlib import Path

from ablate.models.config import ASSETS_DIR

ASSET_DIR = ASSETS_DIR / "tiny"
# the shipped checkpoint warm-started on another environment (ablate.recipes.tiny_warmstart)
WARM_ASSETS = {"coderepair": ASSETS_DIR / "tiny_coderepair"}


class TinyModelMissing(FileNotFoundError):
    pass


def tiny_path(model_cfg=None) -> Path:
    path = getattr(model_cfg, "path", None) if model_cfg is not None else None
    return Path(path).expanduser() if path else ASSET_DIR


def load_tiny(model_cfg=None):
    """(model, tokenizer) of the tiny warm start, in model_cfg.dtype (default float32)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    path = tiny_path(model_cfg)
    if not (path / "config.json").is_file():
        env = next((e for e, p in WARM_ASSETS.items() if p == path.resolve()), None)
        how = f"warmstart --env {env}" if env else f"build --out {path}"
        raise TinyModelMissing(f"tiny model checkpoint not found in {path}; rebuild it "
                               f"with `python -m ablate.recipes.tiny {how}`")
    dtype = getattr(torch, getattr(model_cfg, "dtype", None) or "float32")
    tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype,
                                                 local_files_only=True)
    model.eval()
    return model, tok
