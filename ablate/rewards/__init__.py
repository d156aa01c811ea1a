"""Reward schemes over finished episodes (the `reward=` group), each a Rubric: named
component functions `fn(episode, cfg) -> float` with weights (`reward.weights.<component>`),
registered in REWARDS. `naive` (+1 / -1 / 0) and `outcome` (1 / 0) here; a world's own
schemes (the email task's `shaped`, code repair's `tool_bonus`) are declared where it
registers (`register_env(..., rewards=...)`, ablate/envs/registry.py);
`compute_reward(episode, cfg.reward)` applies the configured one with the optional format
penalty. `ablate.rewards.<scheme>` names any scheme registered so far (e.g.
`ablate.rewards.shaped` once ablate.envs is imported); docs/rewards.md shows how to add
one."""
from ablate.rewards.compute import check_world_model_for, compute_reward, malformed_calls
from ablate.protocol.rubric import Component, Components, Rubric
from ablate.rewards.schemes import REWARDS, correct, naive, outcome, wrong

__all__ = ["Component", "Components", "REWARDS", "Rubric", "check_world_model_for",
           "compute_reward", "correct", "malformed_calls", "naive", "outcome", "wrong"]


def __getattr__(name: str):
    """A scheme registered so far (an environment's registers when its package is
    imported, e.g. `shaped` with ablate.envs; this module imports no environment)."""
    if name in REWARDS:
        return REWARDS[name]
    raise AttributeError(f"module 'ablate.rewards' has no attribute {name!r} (a scheme "
                         "is an attribute once the module registering it is imported)")
