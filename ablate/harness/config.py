"""Typed configuration of the harness and the reasoning mode. The harness is part of the
policy (docs/architecture.md): every knob here is logged with the run and is an ablation axis."""
from __future__ import annotations

from dataclasses import dataclass

from ablate.core.errors import ConfigError, need


@dataclass
class HarnessConfig:
    max_new_tokens_per_turn: int = 96    # generated tokens per assistant turn at most
    max_tokens_per_episode: int = 1024   # generated tokens over all turns
    on_malformed: str = "continue"       # continue (error observation) | end (episode ends)
    max_malformed: int = 3               # retries: malformed calls tolerated before ending
    calls_per_turn: str = "first"        # first | all
    parser: str = "strict"               # strict | lenient (ablate/harness/parser.py)
    predict: bool = False                # ask for predict tags; = reward.world_model.enable
    action_masking: bool = False         # constrained decoding (ids from context, known tools)
    answer_masking: bool = False         # answer values drawn from emails read (needs action_masking)
    keyword_masking: bool = False        # search keywords drawn from the question, emails read
                                         # and search results seen (needs action_masking)
    max_masked_keywords: int = 3         # keyword masking: at most this many keywords per search
    masked_keyword_words: int = 1        # keyword masking: 1 = single words; 2 = + adjacent pairs


@dataclass
class ModeConfig:
    name: str = "instruct"               # instruct | thinking
    enable_thinking: bool = False        # Qwen3 chat template switch
    max_think_tokens: int = 64           # thinking budget per turn (thinking mode)


def check_harness(cfg) -> None:
    """The harness.* and mode.* keys (and the world-model weight the harness predicts for)."""
    h, m = cfg.harness, cfg.mode
    for key in ("max_new_tokens_per_turn", "max_tokens_per_episode", "max_masked_keywords"):
        need(h[key] >= 1, f"harness.{key}", h[key], "must be >= 1")
    need(h.max_malformed >= 0, "harness.max_malformed", h.max_malformed, "must be >= 0")
    w = cfg.reward.world_model.weight
    need(w >= 0, "reward.world_model.weight", w, "must be >= 0")
    need(h.masked_keyword_words in (1, 2), "harness.masked_keyword_words",
         h.masked_keyword_words, "choose 1 (single words) or 2 (also adjacent pairs)")
    if h.answer_masking and not h.action_masking:
        raise ConfigError("harness.answer_masking=true needs harness.action_masking=true")
    if h.keyword_masking and not h.action_masking:
        raise ConfigError("harness.keyword_masking=true needs harness.action_masking=true")
    if m.enable_thinking:
        need(m.max_think_tokens >= 1, "mode.max_think_tokens", m.max_think_tokens,
             "must be >= 1 in thinking mode")
