"""The agent protocol: how a policy turns tasks into episodes.

    agent = build_agent(cfg.agent)
    episodes = agent.act(policy, tasks, group_size, temperature=..., seed=..., score=...)

`policy` is anything with `sampler`, `tokenizer`, `env` and `cfg` (the cell's ModelPolicy);
`score(episodes)` judges and rewards episodes as the cell does (it sets `correct`) and
returns [(reward, components)]. An agent returns `group_size` episodes per task in (task,
sample) order, token-exact like the harness's rollout, so they can be evaluated and
trained on like any other. Each episode's `env_metrics["agent_tokens"]` is everything the
agent generated to produce it (its search or earlier attempts included): the compute a
comparison with plain sampling must match.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from ablate.agents.registry import AGENTS
from ablate.harness.chat import ChatConventions
from ablate.harness.rollout import rollout

Score = Callable[[list], list]


def run_rollout(policy, tasks: Sequence, group_size: int, *, temperature: float, seed: int,
                sampler=None, env=None) -> list:
    """The harness's rollout with the policy's settings: the one path from a policy to
    episodes (the cell's ModelPolicy.act, agent=react, every attempt of the other
    agents), with the cell's harness, mode, model.tool_format and model.chat_template;
    optionally through another sampler (LATS's replaying wrapper) or in a wrapped
    environment (Voyager's use_skill)."""
    c = policy.cfg
    return rollout(tasks, group_size=group_size, sampler=sampler or policy.sampler,
                   tokenizer=policy.tokenizer, env=env or policy.env, harness_cfg=c.harness,
                   mode_cfg=c.mode, max_turns=c.env.max_turns, temperature=temperature,
                   top_p=c.sampler.top_p, seed=seed, model_cfg=c.model)


def conventions(policy) -> ChatConventions:
    """The chat conventions the policy's rollouts use (its template, tool format, mode)."""
    return ChatConventions.from_config(policy.tokenizer, policy.cfg.model, policy.cfg.mode)


def stop_ids(policy) -> list[int]:
    """The ids that end a turn of the policy's model (as the harness's rollout stops on)."""
    return conventions(policy).stop_ids


class Agent:
    """Base class: `act` as the module docstring says; `from_config` reads `agent.*`.
    A `persistent` agent (agent=voyager) is built once per cell and keeps its state
    across calls; `experience(env, model_cfg)` then gives the ablate.algos.curriculum.Experience
    that samples its training tasks and saves / loads its state with the checkpoints."""
    name = ""
    persistent = False

    @classmethod
    def from_config(cls, agent_cfg: Any) -> "Agent":
        return cls()

    def act(self, policy, tasks: Sequence, group_size: int, *, temperature: float,
            seed: int, score: Score) -> list:
        raise NotImplementedError


@AGENTS.register("react")
class ReAct(Agent):
    """One rollout per (task, sample): exactly the harness's rollout (the default)."""
    name = "react"

    def act(self, policy, tasks, group_size, *, temperature, seed, score):
        return run_rollout(policy, tasks, group_size, temperature=temperature, seed=seed)


def build_agent(agent_cfg: Any) -> Agent:
    """The configured agent (`agent.name` from the registry)."""
    cls = AGENTS.get_checked(agent_cfg.name)
    agent = cls.from_config(agent_cfg)
    agent.name = agent_cfg.name
    return agent


def _agent_cfg(cfg: Any):
    return cfg.get("agent") if hasattr(cfg, "get") else getattr(cfg, "agent", None)


def agent_for(cfg: Any, evaluation: bool, cache: dict | None = None) -> Agent | None:
    """The agent a cell uses for this purpose, or None for the harness's plain rollout
    (agent=react, or a training rollout when `agent.train` is false). A persistent
    agent is taken from (and kept in) `cache`, the policy's, so it lives for the cell."""
    a = _agent_cfg(cfg)
    if a is None or a.name == "react" or not (evaluation or a.train):
        return None
    agent = (cache or {}).get(a.name) or build_agent(a)
    if cache is not None and agent.persistent:
        cache[a.name] = agent
    agent.training = not evaluation
    return agent


def persistent_agent(cfg: Any, cache: dict) -> Agent | None:
    """The cell's persistent agent (built now and kept in `cache`), or None when the
    configured agent keeps no state across calls."""
    a = _agent_cfg(cfg)
    if a is None or not getattr(AGENTS.get_checked(a.name), "persistent", False):
        return None
    if a.name not in cache:
        cache[a.name] = build_agent(a)
    return cache[a.name]
