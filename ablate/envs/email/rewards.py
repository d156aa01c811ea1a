"""The email task's reward scheme `shaped` (EnronHop v0.2.0): process + witness +
correctness (+ efficiency). It reads the episode's ToolResults (`extra` holds the
ToolBox's hits and reads) and the task's evidence ids; `reward.state_change_bonus`
credits a tool only for a call that changed what the agent knows (ToolResult.state_changed:
a read of an email not read before, a search with hits never returned before; the final
answer is its own state change), so farming repeated reads or empty searches earns nothing
(docs/environments.md, "Rewarding effects, not actions")."""
from __future__ import annotations

from typing import Any, Optional

from ablate.envs.email.episodes import email_task, evidence_read
from ablate.envs.email.tools import TOOL_NAMES
from ablate.rewards.schemes import Components, reward_scheme

# EnronHop v0.2.0 "shaped" constants (EnronHop article; docs/architecture.md)
PROCESS_BONUS = 0.05          # per distinct tool used successfully
WITNESS_WEIGHT = 0.1          # × fraction of evidence emails read
CORRECT_REWARD = 1.0
EFFICIENCY_WEIGHT = 0.1       # × max(0, 1 - turns / max_turns), only when correct
PROCESS_TOOLS = TOOL_NAMES


def credited_tools(episode, state_change_bonus: bool = False) -> set[str]:
    """Tools that earn process credit: used without error, and, with the flag, at least
    once with a state change."""
    return {c.name for c in episode.calls if c.error is None and c.name in PROCESS_TOOLS
            and (c.state_changed or not state_change_bonus)}


@reward_scheme("shaped")
def shaped(episode, cfg: Optional[Any] = None) -> tuple[float, Components]:
    """EnronHop v0.2.0: process + witness + correctness (+ efficiency), range [0, 1.35]."""
    state_change = bool(getattr(cfg, "state_change_bonus", False)) if cfg is not None else False
    process = PROCESS_BONUS * len(credited_tools(episode, state_change))
    evidence = set(email_task(episode.task).message_ids)
    witness = (WITNESS_WEIGHT * evidence_read(episode.task, episode.calls) / len(evidence)
               if evidence else 0.0)
    correct = episode.correct is True
    correctness = CORRECT_REWARD if correct else 0.0
    efficiency = (EFFICIENCY_WEIGHT * max(0.0, 1.0 - episode.num_turns / episode.max_turns)
                  if correct and episode.max_turns > 0 else 0.0)
    comps = {"process": process, "witness": witness, "correctness": correctness,
             "efficiency": efficiency}
    return sum(comps.values()), comps


shaped.env_only = True       # offered by the email environments only
SCHEMES = {"shaped": shaped}
