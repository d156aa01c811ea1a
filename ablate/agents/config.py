"""The `agent` config group (conf/agent/): which agent turns tasks into episodes, for
evaluation and optionally for training (docs/agents.md)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ablate.algos.registry import ALGORITHMS


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
class VoyagerConfig:
    top_k: int = 2                       # skills offered per task (BM25 over the library)
    # retries of a candidate skill that fails verification, each an episode shown the
    # failed program and the environment's feedback (Wang et al., 2023, §2.3: 4 rounds)
    max_retries: int = 2
    doc_chars: int = 160                 # characters of a skill's docstring in the prompt
    feedback_chars: int = 400            # characters of a retry's feedback in the prompt
    # automatic curriculum: unsolved tasks nearest the library's solved ones first, within
    # the promotion curriculum's difficulty level (false: tasks drawn uniformly)
    curriculum: bool = True
    start_level: int = 1                 # the first difficulty level (hops) drawn from
    promote_at: float = 0.5              # training accuracy over `window` steps to level up
    window: int = 2                      # steps whose training accuracy is averaged
    # dense retrieval beside BM25 (ablate/agents/embedding.py): null (none) | policy (a
    # frozen copy of the cell's model) | a local model directory; the two rankings are
    # fused by reciprocal rank fusion (docs/agents.md)
    embedding: Optional[str] = None
    fusion_k: int = 60                   # RRF's constant k (Cormack et al., 2009: 60)
    embed_tokens: int = 256              # tokens of a text embedded (its start)


@dataclass
class AgentConfig:
    name: str = "react"                  # react | reflexion | lats | voyager (ablate.agents.AGENTS)
    # also the training rollouts (false: the agent only evaluates; training samples ReAct)
    train: bool = False
    reflexion: ReflexionConfig = field(default_factory=ReflexionConfig)
    lats: LatsConfig = field(default_factory=LatsConfig)
    voyager: VoyagerConfig = field(default_factory=VoyagerConfig)


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
        able = ALGORITHMS.declaring("unequal_groups")
        need(cfg.algo.algorithm in able, "agent.lats.train_episodes", t.train_episodes,
             "groups of siblings vary in size: use an algorithm that trains on groups of "
             f"any size ({' or '.join(f'+algo={n}' for n in able)})")
        need(not cfg.algo.dynamic_sampling.enable and not cfg.algo.buffer.enable,
             "agent.lats.train_episodes", t.train_episodes,
             "a sibling group is not a task's group: disable dynamic sampling and the buffer")
    _check_voyager(cfg, need)
    if a.name != "react" and cfg.model.name == "scripted":
        need(False, "agent.name", a.name, "needs a language model, not model=scripted")
    if a.train and a.name != "react":
        need(cfg.trainer.max_async_level == 0, "agent.train", a.train,
             "the asynchronous producer samples ReAct: set trainer.max_async_level=0")


def _check_voyager(cfg, need) -> None:
    a, v = cfg.agent, cfg.agent.voyager
    need(v.top_k >= 0, "agent.voyager.top_k", v.top_k, "must be >= 0")
    need(v.max_retries >= 0, "agent.voyager.max_retries", v.max_retries, "must be >= 0")
    need(v.doc_chars >= 0 and v.feedback_chars >= 0, "agent.voyager.doc_chars",
         v.doc_chars, "doc_chars and feedback_chars must be >= 0")
    need(v.start_level >= 1 and v.window >= 1, "agent.voyager.start_level", v.start_level,
         "start_level and window must be >= 1")
    need(0 <= v.promote_at <= 1, "agent.voyager.promote_at", v.promote_at, "in [0, 1]")
    need(v.fusion_k >= 1 and v.embed_tokens >= 1, "agent.voyager.fusion_k", v.fusion_k,
         "fusion_k and embed_tokens must be >= 1")
    need(v.embedding in (None, "policy") or
         (Path(str(v.embedding)).expanduser() / "config.json").is_file(),
         "agent.voyager.embedding", v.embedding,
         "null, policy or a local model directory holding config.json")
    if a.name != "voyager":
        return
    need(a.train, "agent.train", a.train,
         "agent=voyager learns its library from the training episodes: set agent.train=true")
    need(not cfg.algo.curriculum.enable and not cfg.algo.buffer.enable,
         "agent.name", a.name, "agent=voyager samples its own curriculum: disable "
         "algo.curriculum.enable and algo.buffer.enable")
