"""A model's budgets, read from its weights directory without loading it: where the
weights are (check_weights) and how many tokens of question fit in its context beside
the episode's generation budget and the environment's fixed prompt (question_budget)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from omegaconf import DictConfig
from tokenizers import Tokenizer

from ablate.core.errors import ConfigError
from ablate.models.loading import ModelNotFoundError, resolve_weights
from ablate.models.tiny import tiny_path

# the chat template's own tokens around the system prompt, tools and question
TEMPLATE_SLACK_TOKENS = 64


@dataclass
class QuestionBudget:
    """At most `max_tokens` tokens of question (the rest of the context holds the system
    prompt, the tools and the generated turns); `count` counts a text's tokens and
    `explain` says where the limit comes from."""
    max_tokens: int
    count: Callable[[str], int]
    explain: str = ""


def check_weights(cfg: DictConfig) -> Path | None:
    """The model's local directory (None for the scripted agent, or without a model: an
    environment built alone), or ConfigError."""
    m = getattr(cfg, "model", None)
    if m is None or m.name == "scripted":
        return None
    if m.name == "tiny":
        path = tiny_path(m)
        if not (path / "config.json").is_file():
            raise ConfigError(f"model.path={m.path!r}: no tiny checkpoint (config.json) in "
                              f"{path}; rebuild it with `python -m ablate.recipes.tiny build`")
    else:
        try:
            path = Path(resolve_weights(m))
        except ModelNotFoundError as exc:     # its messages name model.path / model=NAME
            raise ConfigError(str(exc)) from None
    check_model_files(path, f"model.path={m.path!r}" if m.path else f"model={m.name}")
    return path


# what transformers loads a model's weights from (modeling_utils: SAFE_WEIGHTS_NAME,
# WEIGHTS_NAME and their sharded *.index.json) and its tokenizer from (tokenization_utils_base:
# tokenizer.json, or a slow tokenizer's vocabulary files)
WEIGHT_GLOBS = ("*.safetensors", "pytorch_model*.bin")
INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
TOKENIZER_FILES = (("tokenizer.json",), ("tokenizer.model",), ("vocab.json", "merges.txt"),
                   ("vocab.txt",))


def check_model_files(path: Path, key: str) -> None:
    """ConfigError (one line) for a model directory without weights (or a shard its index
    names) or without a tokenizer: config.json alone sizes the memory plan, not a cell."""
    missing = missing_shard(path)
    weights = any(any(path.glob(g)) for g in WEIGHT_GLOBS)
    if missing or not weights:
        what = f"the shard {missing} its index names" if missing else \
            "no weights (*.safetensors or pytorch_model*.bin)"
        raise ConfigError(f"{key}: {path} holds {what}; copy the model's weight files "
                          "there beside config.json (docs/models.md)")
    if not any(all((path / f).is_file() for f in files) for files in TOKENIZER_FILES):
        raise ConfigError(f"{key}: {path} holds no tokenizer (tokenizer.json, tokenizer.model "
                          "or vocab.json with merges.txt); copy the model's tokenizer files "
                          "there beside config.json (docs/models.md)")


def missing_shard(path: Path) -> str | None:
    """The first weight file a sharded checkpoint's index names that is not there."""
    for index in INDEXES:
        try:
            shards = json.loads((path / index).read_text()).get("weight_map", {}).values()
        except (OSError, ValueError, AttributeError):
            continue
        for shard in sorted(set(shards)):
            if not (path / str(shard)).is_file():
                return str(shard)
    return None


def context_length(model_dir: Path) -> int | None:
    try:
        config = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return None
    value = config.get("max_position_embeddings")
    return int(value) if isinstance(value, int) and value > 0 else None


def question_budget(cfg: DictConfig, model_dir: Path | None, fixed_text: str):
    """The question's token budget: the context length less the episode's generation
    budget and `fixed_text` (the environment's system prompt and tools); ConfigError when nothing is left. None when
    the model has no known context or tokenizer (the scripted agent)."""
    if model_dir is None or (n_ctx := context_length(model_dir)) is None:
        return None
    if not (model_dir / "tokenizer.json").is_file():
        return None
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))

    def count(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False).ids)

    fixed = count(fixed_text) + TEMPLATE_SLACK_TOKENS
    gen = cfg.harness.max_tokens_per_episode
    left = n_ctx - gen - fixed
    if left < 16:
        raise ConfigError(
            f"harness.max_tokens_per_episode={gen} is not allowed: model={cfg.model.name} has "
            f"a context of {n_ctx} tokens and the system prompt with the tools takes ~{fixed}; "
            f"use at most {n_ctx - fixed - 16}")
    return QuestionBudget(left, count, f"model={cfg.model.name} has a context of {n_ctx} "
                          f"tokens: harness.max_tokens_per_episode={gen} and ~{fixed} for the "
                          "system prompt and tools")
