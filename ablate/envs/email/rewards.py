"""The email task's reward scheme `shaped` (EnronHop v0.2.0): process + witness +
correctness (+ efficiency), each a component `fn(episode, cfg) -> float` weighted by
`reward.weights.<component>` (ablate/protocol/rubric.py). It reads the episode's
ToolResults (`extra` holds the ToolBox's hits and reads) and the task's evidence ids; `reward.state_change_bonus`
credits a tool only for a call that changed what the agent knows (ToolResult.state_changed:
a read of an email not read before, a search with hits never returned before; the final
answer is its own state change), so farming repeated reads or empty searches earns nothing
(docs/environments.md, "Rewarding effects, not actions")."""
from __future__ import annotations

from typing import Any, Optional

from ablate.envs.email.episodes import email_task, evidence_read
from ablate.envs.email.tools import TOOL_NAMES
from ablate.protocol.rubric import Rubric

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


def _state_change(cfg: Optional[Any]) -> bool:
    return bool(getattr(cfg, "state_change_bonus", False)) if cfg is not None else False


def process(episode, cfg: Optional[Any] = None) -> float:
    """0.05 per distinct tool used without error (with the flag: with a state change)."""
    # EnronHop v0.2.0 shaped reward, process term
    return PROCESS_BONUS * len(credited_tools(episode, _state_change(cfg)))


def witness(episode, cfg: Optional[Any] = None) -> float:
    """0.1 x evidence emails read / evidence emails."""
    evidence = set(email_task(episode.task).message_ids)
    # EnronHop v0.2.0 shaped reward, witness term
    return (WITNESS_WEIGHT * evidence_read(episode.task, episode.calls) / len(evidence)
            if evidence else 0.0)


def correctness(episode, cfg: Optional[Any] = None) -> float:
    """1.0 if the judge says correct, else 0."""
    return CORRECT_REWARD if episode.correct is True else 0.0   # EnronHop v0.2.0


def efficiency(episode, cfg: Optional[Any] = None) -> float:
    """When correct: 0.1 x max(0, 1 - turns / max_turns), else 0."""
    # EnronHop v0.2.0 shaped reward, the turn-efficiency part of the correctness term
    if episode.correct is not True or episode.max_turns <= 0:
        return 0.0
    return EFFICIENCY_WEIGHT * max(0.0, 1.0 - episode.num_turns / episode.max_turns)


# EnronHop v0.2.0: process + witness + correctness (+ efficiency), range [0, 1.35]
shaped = Rubric(
    process, witness, correctness, efficiency,         # the email environments'
    doc="EnronHop v0.2.0: process + witness + correctness (+ efficiency), range [0, 1.35]")
