"""What agent=voyager asks of a world with skills, and how a skill is replayed and verified
(Wang et al., 2023, "Voyager", arXiv:2305.16291, section 2.2: a skill is kept only after
it verifies in the environment). The skill itself is ablate/protocol/skills.py."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Protocol, runtime_checkable

from ablate.protocol.environment import judge_all
from ablate.protocol.skills import Skill
from ablate.protocol.task import Task, ToolResult


@runtime_checkable
class SkillWorld(Protocol):
    """A world whose episodes can become skills: a candidate Skill from an episode's
    calls (None: nothing worth keeping). `skill_query(task)` (what a library indexes;
    default the prompt) and `skill_feedback(task, state)` (shown to a retry; default the
    last call's observation) are optional."""

    def skill_of(self, task: Task, results: list[ToolResult]) -> Optional[Skill]: ...


def skill_query(env: Any, task: Task) -> str:
    """The text a skill library indexes and searches for `task`."""
    query = getattr(type(env), "skill_query", None)
    return query(env, task) if query is not None else task.prompt


def skill_feedback(env: Any, task: Task, state: Any) -> str:
    """What a failed verification shows the next attempt ("": the last observation)."""
    feedback = getattr(type(env), "skill_feedback", None)
    return feedback(env, task, state) if feedback is not None else ""


def replay(env, state: Any, skill: Skill, args: Optional[dict] = None) -> list:
    """The skill's calls through `env.call` on `state` (mutated), in order; stops after
    a call that errors or ends the episode (as the model's own calls would)."""
    results = []
    for tool, a in skill.bind(args):
        r = env.call(state, tool, a)
        results.append(r)
        if r.error is not None or r.done:
            break
    return results


@dataclass
class Verdict:
    ok: bool
    results: list                      # the replayed calls' ToolResults
    feedback: str                      # what the next attempt is shown when not ok


def verify(env, task, skill: Skill) -> Verdict:
    """Replay `skill` on a fresh state of `task`; it verifies when its last call ends
    the episode with an answer the environment (its judge) accepts."""
    state = env.reset(task)
    try:
        results = replay(env, state, skill)
    except ValueError as exc:
        return Verdict(False, [], str(exc))
    last = results[-1] if results else None
    answer = last.answer if last is not None and last.done else None
    ok = answer is not None and bool(judge_all(env, [(task, answer, state)])[0])
    feedback = "" if ok else (skill_feedback(env, task, state) or
                              (last.observation if last is not None else "no calls"))
    return Verdict(ok, results, feedback)
