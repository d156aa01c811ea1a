"""Typed configuration of the reward scheme (the `reward=` group)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ablate.rewards.world_model import WorldModelConfig


@dataclass
class RewardConfig:
    name: str = "shaped"                 # a registered scheme (ablate.rewards.REWARDS)
    # component -> weight: the total is Σ weight x component; a component not listed
    # weighs 1.0 (the scheme as published); conf/reward/<scheme>.yaml lists its components
    weights: dict[str, float] = field(default_factory=dict)
    format_penalty: float = 0.0          # subtracted per malformed call; 0 = off (default)
    state_change_bonus: bool = False     # process bonus only for a read/search that changed state
    # the RWML-style world-model component (ablate/rewards/world_model.py), any scheme
    world_model: WorldModelConfig = field(default_factory=WorldModelConfig)
