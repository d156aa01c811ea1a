"""The reward registry and the generic schemes.

REWARDS (ablate.core.registry) is the single source of the names `reward.name` accepts:
name -> Rubric (ablate/protocol/rubric.py), a list of named components with weights
(`reward.weights.<component>`). The generic schemes live here; a world's own (the email
task's `shaped`, code repair's `tool_bonus`) are declared where it registers
(`register_env(..., rewards=...)`, ablate/envs/registry.py) and offered to it alone. A
user's generic scheme registers here from a module listed in `plugins` (docs/rewards.md).
"""
from __future__ import annotations

from typing import Any

from ablate.core.registry import Registry
from ablate.protocol.rubric import Components, Rubric  # noqa: F401  (re-exported)

REWARDS = Registry("reward.name", "reward scheme")


def correct(episode: Any, cfg: Any = None) -> float:
    """1 if the judge says correct, else 0."""
    return 1.0 if episode.correct is True else 0.0


def wrong(episode: Any, cfg: Any = None) -> float:
    """-1 for a wrong answer; 0 for a right one, no answer or an "I don't know"."""
    return -1.0 if episode.correct is not True and episode.answered else 0.0


# EnronHop article (naive): +1 correct, -1 wrong, 0 for no answer: the avoidance trap
naive = REWARDS.register("naive", Rubric(correct, wrong, doc=(
    "+1 correct, -1 wrong, 0 for no answer or \"I don't know\" (the avoidance trap)")))
# EnronHop article (outcome): 1 if correct else 0
outcome = REWARDS.register("outcome", Rubric(correct, doc="1 if the judge says correct, else 0"))
