"""Typed configuration of the reward scheme (the `reward=` group)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ablate.rewards.world_model import WorldModelConfig


@dataclass
class RewardConfig:
    name: str = "shaped"                 # shaped | naive | outcome
    format_penalty: float = 0.0          # subtracted per malformed call; 0 = off (default)
    state_change_bonus: bool = False     # process bonus only for a read/search that changed state
    # the RWML-style world-model component (ablate/rewards/world_model.py), any scheme
    world_model: WorldModelConfig = field(default_factory=WorldModelConfig)
