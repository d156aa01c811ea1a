"""`compute_reward`: the configured scheme plus the scheme-independent knobs."""
from __future__ import annotations

from typing import Any

from ablate.harness.episode import Episode
from ablate.harness.parser import Predictable, outcome_labels
from ablate.rewards.schemes import REWARDS, Components
from ablate.rewards.world_model import world_model_reward


def malformed_calls(episode: Episode) -> int:
    return sum(1 for c in episode.calls if c.error is not None)


def compute_reward(episode: Episode, reward_cfg: Any) -> tuple[float, Components]:
    """(total, components) of the scheme `reward_cfg.name` (REWARDS), its components
    weighted by `reward_cfg.weights`. `format_penalty` (> 0 to enable) is
    subtracted once per malformed call and logged as the `format_penalty` component
    (always present, so keys are stable); with it on, totals can be negative even for
    `shaped`, by choice. `state_change_bonus` is passed to the scheme in `reward_cfg`.
    `world_model.enable` adds the `world_model` component (ablate/rewards/world_model.py)."""
    scheme = REWARDS.get_checked(reward_cfg.name)
    penalty_per_call = float(getattr(reward_cfg, "format_penalty", 0.0) or 0.0)
    if penalty_per_call < 0:
        raise ValueError(f"reward.format_penalty={penalty_per_call} must be >= 0")
    total, comps = scheme(episode, reward_cfg)
    penalty = -penalty_per_call * malformed_calls(episode)
    comps = {**comps, "format_penalty": penalty}
    wm = getattr(reward_cfg, "world_model", None)
    if wm is not None and wm.enable:
        comps["world_model"] = world_model_reward(episode, wm)
        total += comps["world_model"]
    return total + penalty, comps


def check_world_model_for(reward_cfg: Any, env, label: str = "") -> None:
    """ValueError (one line) when the world-model reward is on for an environment with
    nothing to predict. `env`: the world, or its class (preflight, before building it)."""
    built = not isinstance(env, type)
    wm = getattr(reward_cfg, "world_model", None)
    if wm is not None and wm.enable and not (outcome_labels(env) if built else (
            issubclass(env, Predictable) and env.outcome_labels(None))):
        raise ValueError(f"reward.world_model.enable=true: env={label} defines no "
                         "outcome_labels() to predict (Predictable, ablate/harness/parser.py); "
                         "allowed only for an environment that does (docs/environments.md)")
