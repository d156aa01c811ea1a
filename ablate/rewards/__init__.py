"""Reward schemes over finished episodes (the `reward=` group): `shaped` (EnronHop v0.2.0),
`naive` (+1 / -1 / 0), `outcome` (1 / 0); `compute_reward(episode, cfg.reward)` applies the
configured one with the optional format penalty and state-change condition."""
from ablate.rewards.compute import compute_reward, malformed_calls
from ablate.rewards.schemes import (REWARDS, credited_tools, naive, outcome, reward_scheme,
                                    shaped)

__all__ = ["REWARDS", "compute_reward", "credited_tools", "malformed_calls", "naive",
           "outcome", "reward_scheme", "shaped"]
