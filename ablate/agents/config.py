"""The `agent` config group (conf/agent/): which agent turns tasks into episodes, for
evaluation and optionally for training (docs/agents.md)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ReflexionConfig:
    max_attempts: int = 3                # N: attempts per (task, sample), the first included
    # Ω: reflections kept in the task's memory (Shinn et al., 2023, §3: Ω is 1-3); 1 = only
    # the latest, so attempt k's reflection is in attempt k+1's prompt and nowhere else
    memory_size: int = 1
    max_reflection_tokens: int = 64      # generation budget of one reflection
    transcript_chars: int = 1500         # the failed attempt shown to the reflection (its end)


@dataclass
class LatsConfig:
    node_budget: int = 8                 # tree nodes besides the root (one per sampled action)
    children: int = 2                    # k: candidate actions sampled per expansion
    exploration: float = 1.0             # UCT constant c (Zhou et al., 2024, §4, eq. 1)
    # node value: rollout (the rollout's reward, judge included) | policy (the policy's
    # own 0-10 rating of the rollout's answer, no judge)
    value: str = "rollout"
    rating_tokens: int = 8               # generation budget of one rating (value=policy)
    stop_on_success: bool = True         # stop a tree at its first judged-correct rollout
    # training episodes (agent.train): best (one per tree) | siblings (every rollout, a
    # group per expanded node: Agent Q's sibling pairs for +algo=dpo, or RFT's data)
    train_episodes: str = "best"


@dataclass
class AgentConfig:
    name: str = "react"                  # react | reflexion | lats (ablate.agents.AGENTS)
    # also the training rollouts (false: the agent only evaluates; training samples ReAct)
    train: bool = False
    reflexion: ReflexionConfig = field(default_factory=ReflexionConfig)
    lats: LatsConfig = field(default_factory=LatsConfig)


def check(cfg, need) -> None:
    """Checks of the agent keys; `need(ok, key, value, allowed)` raises the config error."""
    a = cfg.agent
    r, t = a.reflexion, a.lats
    need(r.max_attempts >= 1, "agent.reflexion.max_attempts", r.max_attempts, "must be >= 1")
    need(r.memory_size >= 1, "agent.reflexion.memory_size", r.memory_size, "must be >= 1")
    need(r.max_reflection_tokens >= 1, "agent.reflexion.max_reflection_tokens",
         r.max_reflection_tokens, "must be >= 1")
    need(r.transcript_chars >= 0, "agent.reflexion.transcript_chars", r.transcript_chars,
         "must be >= 0")
    need(t.node_budget >= 1, "agent.lats.node_budget", t.node_budget, "must be >= 1")
    need(t.children >= 1, "agent.lats.children", t.children, "must be >= 1")
    need(t.exploration >= 0, "agent.lats.exploration", t.exploration, "must be >= 0")
    need(t.value in ("rollout", "policy"), "agent.lats.value", t.value,
         "choose rollout or policy")
    need(t.rating_tokens >= 1, "agent.lats.rating_tokens", t.rating_tokens, "must be >= 1")
    need(t.train_episodes in ("best", "siblings"), "agent.lats.train_episodes",
         t.train_episodes, "choose best or siblings")
    if t.train_episodes == "siblings" and a.train and a.name == "lats":
        need(cfg.algo.algorithm in ("dpo", "rft"), "agent.lats.train_episodes",
             t.train_episodes, "groups of siblings vary in size: use +algo=dpo or +algo=rft")
        need(not cfg.algo.dynamic_sampling.enable and not cfg.algo.buffer.enable,
             "agent.lats.train_episodes", t.train_episodes,
             "a sibling group is not a task's group: disable dynamic sampling and the buffer")
    if a.name != "react" and cfg.model.name == "scripted":
        need(False, "agent.name", a.name, "needs a language model, not model=scripted")
    if a.train and a.name != "react":
        need(cfg.trainer.max_async_level == 0, "agent.train", a.train,
             "the asynchronous producer samples ReAct: set trainer.max_async_level=0")
