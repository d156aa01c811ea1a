"""Rewards of `env=openenv` over an environment-neutral episode record (`.results`,
`.correct`): Rubrics its world declares where it registers (env.py) (ablate/protocol/rubric.py).

- openenv_reward (the default): the sum of the rewards the server returned over the
  episode's steps (OpenEnv's Observation.reward, openenv/core/env_server/types.py).
- outcome: 1 if the episode ended with a reward >= env.success_reward, else 0.
"""
from __future__ import annotations

from typing import Any, Optional

from ablate.protocol.rubric import Rubric


def env_reward(episode: Any, cfg: Optional[Any] = None) -> float:
    """The sum of the server's rewards over the episode's accepted actions."""
    return float(sum(r.extra.get("reward", 0.0) for r in episode.results
                     if r.error is None))


openenv_reward = Rubric(env_reward, doc="OpenEnv: the sum of the server's rewards")
