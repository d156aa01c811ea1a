"""`env=openenv`: an OpenEnv environment server as an ablate environment. Needs the
optional extra `pip install 'ablate[openenv]'`; importing this package does not (the
class registers either way).

    env.py      OpenEnvEnv: one WebSocket session per episode, reset seeds as tasks
    server.py   serving an installed OpenEnv app (env.app) on a loopback port
    rewards.py  openenv_reward (the server's rewards), outcome
"""
from ablate.envs.openenv.env import OpenEnvEnv

__all__ = ["OpenEnvEnv"]
