"""reasoning-gym's own `env` keys (`env=reasoning_gym`), beside the common ones of
ablate.protocol.config.EnvConfig. The dataset's generator arguments go under `env.options`
(checked against the dataset's own config dataclass, e.g. ChainSumConfig)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ablate.protocol.config import EnvConfig


@dataclass
class ReasoningGymEnvConfig(EnvConfig):
    name: str = "reasoning_gym"
    dataset: str = "chain_sum"           # any registered reasoning-gym dataset
    max_turns: int = 1                   # single-turn; more with tools=calculator
    gen_seed: int = 0                    # the same seed gives the same questions
    train_tasks: int = 400               # questions generated for training
    test_tasks: int = 200                # held-out questions (disjoint from train)
    tools: str = "none"                  # none | calculator
    prompt: str = "direct"               # a reasoning_gym.utils.SYSTEM_PROMPTS key, or the text
    correct_threshold: float = 1.0       # correct when score_answer >= this
    answer_format: str = "tag"           # tag: <answer>...</answer> | text: the whole reply
    shots: int = 0                       # worked train questions shown first (few-shot)
    shots_seed: Optional[int] = None     # null: the first `shots`; an int: drawn with it
