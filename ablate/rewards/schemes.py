"""Reward schemes: each reads only the finished Episode (the environment's ToolResults,
final answer, judge verdict) and returns (total, components); components always have the
same keys for a given scheme and sum to the total, so every step can log them.

A new scheme is one function decorated with @reward_scheme("name") plus
conf/reward/<name>.yaml; REWARDS is the single source of the names `reward.name` accepts
(config validation and its error message read it). The generic schemes live here; an
environment's own (the email task's `shaped`, code repair's `tool_bonus`) are registered
by its package and also returned by its `reward_schemes()`, which compute_reward consults
first. A scheme receives the RewardConfig (or None) for the knobs it honours.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from ablate.harness.episode import Episode

Components = dict[str, float]
RewardFn = Callable[..., tuple[float, Components]]

REWARDS: dict[str, RewardFn] = {}


def reward_scheme(name: str) -> Callable[[RewardFn], RewardFn]:
    def register(fn: RewardFn) -> RewardFn:
        if name in REWARDS:
            raise ValueError(f"reward scheme {name!r} registered twice")
        REWARDS[name] = fn
        return fn
    return register


@reward_scheme("naive")
def naive(episode: Episode, cfg: Optional[Any] = None) -> tuple[float, Components]:
    """+1 correct, -1 wrong, 0 for no answer or an "I don't know" abstention: the
    avoidance trap (abstaining beats guessing wrong)."""
    correct = episode.correct is True
    wrong = not correct and episode.answered
    comps = {"correct": 1.0 if correct else 0.0, "wrong": -1.0 if wrong else 0.0}
    return sum(comps.values()), comps


@reward_scheme("outcome")
def outcome(episode: Episode, cfg: Optional[Any] = None) -> tuple[float, Components]:
    """1 if the judge says correct, else 0."""
    value = 1.0 if episode.correct is True else 0.0
    return value, {"correct": value}
