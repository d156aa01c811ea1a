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
        return path
    try:
        return Path(resolve_weights(m))
    except ModelNotFoundError as exc:     # its messages name model.path / model=NAME
        raise ConfigError(str(exc)) from None


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
