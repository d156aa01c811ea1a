"""Names of the Prime world resolved to ablate's: a model id to a model preset (or a
generic Hugging Face chat model), an environment id to a verifiers package or an ablate
environment's alias, an `hf://` file to the local Hugging Face cache (nothing is
downloaded, as everywhere in ablate)."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import yaml

from ablate.apps.cli import conf_dir
from ablate.envs import ENVIRONMENTS


def model_presets() -> dict[str, str]:
    """hf_id -> preset name, from conf/model/*.yaml (a preset that names an hf_id)."""
    out = {}
    for path in sorted(Path(conf_dir(), "model").glob("*.yaml")):
        cfg = yaml.safe_load(path.read_text()) or {}
        hf_id = cfg.get("hf_id") or (cfg.get("model") or {}).get("hf_id")
        if hf_id:
            out.setdefault(str(hf_id), path.stem)
    return out


def model_overrides(model_id: str) -> list[tuple[str, object]]:
    preset = model_presets().get(model_id)
    if preset:
        return [("model", preset)]
    slug = re.sub(r"[^0-9a-z]+", "_", model_id.rsplit("/", 1)[-1].lower()).strip("_")
    return [("~model", None), ("model.name", slug), ("model.hf_id", model_id),
            ("model.dtype", "bfloat16")]


# ------------------------------------------------------------------ environments
def env_name(env_id: str) -> str:
    """`o-taisei/enronhop_env@0.1.2` -> `enronhop_env` (the Hub's owner and version
    dropped)."""
    return env_id.rsplit("/", 1)[-1].split("@", 1)[0]


def verifiers_package(env_id: str) -> str | None:
    """The importable module of an installed verifiers environment of that id."""
    module = env_name(env_id).replace("-", "_")
    try:
        found = importlib.util.find_spec(module) and importlib.util.find_spec("verifiers")
    except (ImportError, ValueError):
        return None
    return module if found else None


def env_alias(env_id: str) -> dict | None:
    """The spec an ablate environment declares for `env_id` (its `prime_aliases`)."""
    name = env_name(env_id)
    for cls in dict.fromkeys(ENVIRONMENTS.values()):
        spec = (getattr(cls, "prime_aliases", None) or {}).get(name)
        if spec:
            return spec
    return None


def known_aliases() -> list[str]:
    return sorted({a for cls in ENVIRONMENTS.values()
                   for a in (getattr(cls, "prime_aliases", None) or {})})


# ------------------------------------------------------------------ hf:// files
HF = re.compile(r"^hf://(?:(datasets|spaces|models)/)?([^/]+/[^/]+)/(.+)$")


def hf_local(url: str) -> str | None:
    """The local copy of `hf://[datasets/]owner/repo/path` in the Hugging Face cache
    (huggingface_hub's layout: snapshots of refs/main), else None."""
    match = HF.match(url)
    if not match:
        return None
    kind, repo, filename = match.groups()
    repo_type = {"datasets": "dataset", "spaces": "space"}.get(kind or "", "model")
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:                      # pragma: no cover - transformers needs it
        return None
    found = try_to_load_from_cache(repo, filename, repo_type=repo_type)
    return found if isinstance(found, str) and Path(found).is_file() else None
