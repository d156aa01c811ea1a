"""The agent registry: the single source of the names `agent.name` accepts. An agent is
how a policy turns tasks into episodes (plain ReAct sampling, Reflexion, LATS); register
your own class from your own module with `@AGENTS.register("name")` and list the module in
`plugins` (ablate.core.registry)."""
from __future__ import annotations

from ablate.core.registry import Registry

# name -> Agent class (ablate.agents.base.Agent)
AGENTS = Registry("agent.name", "agent")
