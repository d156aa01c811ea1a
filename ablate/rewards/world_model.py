"""The world-model reward (RWML, Yu et al. 2026: the agent predicts the consequence of its
action and is paid for predicting it right), `reward.world_model.enable`.

The harness (`harness.predict`, which follows reward.world_model.enable) asks for a
`<predict>LABEL</predict>` before each call and records, per call, `extra["prediction"]`
(the label written, or None) and `extra["outcome"]` (Environment.outcome_label: what
happened; None = not predictable). A call is *predictable* when its outcome is not None;
a prediction is *right* when it equals the outcome (a missing one is wrong). The
component, added to any scheme's total:
    aggregate=mean: weight x right / predictable   (0 when nothing was predictable)
    aggregate=sum:  weight x right                  (pays per call: more calls, more pay)
docs/rewards.md has the format and the reasoning.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ablate.harness.episode import Episode
from ablate.harness.parser import prediction_counts

AGGREGATES = ("mean", "sum")


@dataclass
class WorldModelConfig:
    enable: bool = False                 # pay right predictions (and ask for them)
    weight: float = 0.1                  # the component's scale
    aggregate: str = "mean"              # mean (x accuracy) | sum (x right predictions)


def world_model_reward(episode: Episode, cfg: Any) -> float:
    """The component's value for one episode (module docstring)."""
    aggregate, weight = getattr(cfg, "aggregate", "mean"), float(cfg.weight)
    if aggregate not in AGGREGATES:
        raise ValueError(f"reward.world_model.aggregate={aggregate!r} is not one of "
                         f"{list(AGGREGATES)}")
    right, predictable, _ = prediction_counts(episode)
    # RWML (Yu et al. 2026): paid for predicting the action's consequence right; mean/sum ours
    if aggregate == "sum":
        return weight * right
    return weight * right / predictable if predictable else 0.0
