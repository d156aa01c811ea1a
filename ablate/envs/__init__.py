"""Environments as plug-ins: the protocol's types (ablate.protocol, re-exported
here for a world's author), the registry (registry.py), and the built-ins.

    from ablate.envs import ENVIRONMENTS, make_env, run_episode
    env = make_env(cfg.env)          # by `env.name`, or a user's class via `_target_`

Built-ins: `synthetic` / `enronhop` (the email task, email.py), `coderepair`,
`reasoning_gym` (reasoning-gym's datasets; the optional extra ablate[reasoning-gym]) and
`openenv` (an OpenEnv server; the optional extra ablate[openenv]) and `verifiers` (a
verifiers v1 taskset, verifiers_env.py; the optional extra ablate[verifiers]).
docs/environments.md shows how to write your own.
"""
from ablate.protocol.environment import (EnvError, Environment, config_keys, option_keys,
                                         split_tasks, tool_names)
from ablate.protocol.task import Task, ToolResult
from ablate.protocol.trajectory import Policy, Trajectory, run_episode, scripted
from ablate.envs.registry import (ENVIRONMENTS, Declared, check_reward_for, declared,
                                  describe, env_class, env_names, make_env, register_env)
from ablate.envs import coderepair  # noqa: F401  (registers coderepair)
from ablate.envs import email  # noqa: F401  (registers synthetic, enronhop)
from ablate.envs import reasoning_gym  # noqa: F401  (registers reasoning_gym)
from ablate.envs import openenv  # noqa: F401  (registers openenv)
from ablate.envs import verifiers_env  # noqa: F401  (registers verifiers)

__all__ = ["Declared", "ENVIRONMENTS", "EnvError", "Environment", "Policy", "Task", "ToolResult",
           "Trajectory", "check_reward_for", "config_keys", "declared", "describe", "env_class",
           "env_names", "make_env", "option_keys", "register_env", "run_episode", "scripted",
           "split_tasks", "tool_names"]
