"""Typed configuration of the harness and the reasoning mode. The harness is part of the
policy (docs/architecture.md): every knob here is logged with the run and is an ablation axis."""
from __future__ import annotations

from dataclasses import dataclass


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
