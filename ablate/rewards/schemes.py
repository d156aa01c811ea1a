"""Reward schemes: each reads only the finished Episode (tool log, final answer, judge
verdict, evidence ids) and returns (total, components); components always have the same
keys for a given scheme and sum to the total, so every step can log them.

A new scheme is one function decorated with @reward_scheme("name") plus
conf/reward/name.yaml; REWARDS is the single source of the names `reward.name` accepts
(config validation and its error message read it).
A scheme receives the RewardConfig (or None) for the knobs it honours.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from ablate.harness.episode import Episode

Components = dict[str, float]
RewardFn = Callable[..., tuple[float, Components]]

REWARDS: dict[str, RewardFn] = {}

# EnronHop v0.2.0 "shaped" constants (EnronHop article; DESIGN.md §4)
PROCESS_BONUS = 0.05          # per distinct tool used successfully
WITNESS_WEIGHT = 0.1          # × fraction of evidence emails read
CORRECT_REWARD = 1.0
EFFICIENCY_WEIGHT = 0.1       # × max(0, 1 - turns / max_turns), only when correct
PROCESS_TOOLS = ("search_inbox", "read_email", "return_final_answer")


def reward_scheme(name: str) -> Callable[[RewardFn], RewardFn]:
    def register(fn: RewardFn) -> RewardFn:
        if name in REWARDS:
            raise ValueError(f"reward scheme {name!r} registered twice")
        REWARDS[name] = fn
        return fn
    return register


def _state_changing(call, tool: str) -> bool:
    """Did this successful call change what the agent knows? A read of an email not read
    before; a search that returned hits never returned before (seed article 004)."""
    if tool == "read_email":
        return call.new_read
    if tool == "search_inbox":
        return call.new_hits > 0
    return True   # return_final_answer ends the episode: it is its own state change


def credited_tools(episode: Episode, state_change_bonus: bool = False) -> set[str]:
    """Tools that earn process credit: used without error, and, with the flag, at least
    once with a state change (so farming repeated reads / empty searches earns nothing)."""
    if not state_change_bonus:
        return episode.tools_used & set(PROCESS_TOOLS)
    return {c.name for c in episode.calls
            if c.error is None and c.name in PROCESS_TOOLS and _state_changing(c, c.name)}


@reward_scheme("shaped")
def shaped(episode: Episode, cfg: Optional[Any] = None) -> tuple[float, Components]:
    """EnronHop v0.2.0: process + witness + correctness (+ efficiency), range [0, 1.35]."""
    state_change = bool(getattr(cfg, "state_change_bonus", False)) if cfg is not None else False
    process = PROCESS_BONUS * len(credited_tools(episode, state_change))
    evidence = set(episode.task.message_ids)
    witness = WITNESS_WEIGHT * episode.evidence_read / len(evidence) if evidence else 0.0
    correct = episode.correct is True
    correctness = CORRECT_REWARD if correct else 0.0
    efficiency = (EFFICIENCY_WEIGHT * max(0.0, 1.0 - episode.num_turns / episode.max_turns)
                  if correct and episode.max_turns > 0 else 0.0)
    comps = {"process": process, "witness": witness, "correctness": correctness,
             "efficiency": efficiency}
    return sum(comps.values()), comps


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
