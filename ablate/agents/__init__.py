"""Agents: how a policy turns tasks into episodes (`agent.name`, docs/agents.md).

`react` is the harness's plain rollout (the default); `reflexion` adds verbal
self-reflection across attempts (Shinn et al., 2023); `lats` searches a tree of tool-call
steps (Zhou et al., 2024); `voyager` keeps a library of verified skills across a cell's
episodes (Wang et al., 2023). The registry AGENTS is the single source of the names."""
from ablate.agents.base import (Agent, ReAct, agent_for, build_agent, persistent_agent,
                                run_rollout)
from ablate.agents.lats import LATS, Node, Tree
from ablate.agents.reflexion import Reflexion, with_memory
from ablate.agents.registry import AGENTS
from ablate.agents.voyager import SkillEnv, Voyager

__all__ = ["AGENTS", "Agent", "LATS", "Node", "ReAct", "Reflexion", "Tree", "agent_for",
           "build_agent", "persistent_agent", "run_rollout", "SkillEnv", "Voyager",
           "with_memory"]
