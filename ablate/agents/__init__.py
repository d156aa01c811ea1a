"""Agents: how a policy turns tasks into episodes (`agent.name`, docs/agents.md).

`react` is the harness's plain rollout (the default); `reflexion` adds verbal
self-reflection across attempts (Shinn et al., 2023); `lats` searches a tree of tool-call
steps (Zhou et al., 2024). The registry AGENTS is the single source of the names."""
from ablate.agents.base import Agent, ReAct, agent_for, build_agent, run_rollout
from ablate.agents.lats import LATS, Node, Tree
from ablate.agents.reflexion import Reflexion, with_memory
from ablate.agents.registry import AGENTS

__all__ = ["AGENTS", "Agent", "LATS", "Node", "ReAct", "Reflexion", "Tree", "agent_for",
           "build_agent", "run_rollout", "with_memory"]
