"""Episodes driven by a scripted policy (no tokens): demonstrations, conformance checks,
sanity floors. The token-level episode of the harness is ablate/harness/episode.py."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Protocol, runtime_checkable

from ablate.protocol.environment import Environment
from ablate.protocol.task import Task, ToolResult

Policy = Callable[[list[ToolResult]], Optional[tuple[str, Any]]]
"""A scripted policy: from the results so far to the next (tool name, arguments), or
None to stop (the episode then ends without an answer, as if out of turns)."""


@runtime_checkable
class Demonstrable(Protocol):
    """A world with a scripted policy per task: demonstrations, sanity floors, the
    conformance episode of preflight and `policy=scripted` cells."""

    def baseline(self, task: Task, seed: int = 0) -> Optional[Policy]: ...


def baseline_policy(env: Environment, task: Task, seed: int = 0) -> Optional[Policy]:
    """The world's scripted policy for `task`; None for a world that has none."""
    return env.baseline(task, seed=seed) if isinstance(env, Demonstrable) else None


@dataclass
class Trajectory:
    """An episode driven by a scripted policy (no tokens): the environment-neutral record."""
    task: Task
    results: list[ToolResult]
    answer: Optional[str]
    end_reason: str                 # "answer" | "max_turns"
    correct: bool
    max_turns: int
    state: Any = field(default=None, repr=False)    # the world at the end

    def steps(self) -> list[tuple[str, Optional[dict], str]]:
        """(tool, arguments, observation) per call: a supervised demonstration."""
        return [(r.name, r.arguments, r.observation) for r in self.results]

    def to_json(self) -> dict:
        return {"task_id": self.task.id, "answer": self.answer, "correct": self.correct,
                "end_reason": self.end_reason, "steps": [r.to_json() for r in self.results]}


def run_episode(env: Environment, task: Task, policy: Policy, max_turns: int,
                on_turn: Optional[Callable[[Any, int], None]] = None) -> Trajectory:
    """Drive `policy` on a fresh state of `task` for at most `max_turns` calls;
    `on_turn(state, turn)` (turn from 0) before each (preflight reads the masks there)."""
    state = env.reset(task)
    results: list[ToolResult] = []
    answer, reason = None, "max_turns"
    for turn in range(max_turns):
        if on_turn is not None:
            on_turn(state, turn)
        action = policy(results)
        if action is None:
            break
        name, args = action
        result = env.call(state, name, args)
        results.append(result)
        if result.done:
            answer, reason = result.answer, "answer"
            break
    return Trajectory(task=task, results=results, answer=answer, end_reason=reason,
                      correct=bool(env.is_correct(task, answer, state)),
                      max_turns=max_turns, state=state)


def scripted(calls: Iterable[tuple[str, Any]]) -> Policy:
    """A policy that plays a fixed list of calls, then repeats the last one."""
    seq = list(calls)

    def policy(results: list[ToolResult]) -> tuple[str, Any]:
        return seq[min(len(results), len(seq) - 1)]
    return policy
