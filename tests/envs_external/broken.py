"""Environments with one mistake each, the ones a newcomer makes (issue: preflight's
protocol conformance): each must stop `python -m ablate` with one line and exit 2 before
a cell directory exists (tests/envs/test_envs_preflight.py)."""
from __future__ import annotations

import random
from typing import Optional

from ablate.envs import Environment, Task, ToolResult, register_env
from ablate.rewards import Rubric, correct


class _Almost(Environment):
    """Everything but is_correct: a world with one tool `look` and the answer tool."""
    answer_tool = "answer"

    def __init__(self, size: int = 2):
        self.size = size

    def tasks(self, split: str) -> list[Task]:
        return [Task(id=f"{split}-{i}", prompt=f"Look at lamp {split}-{i}, then answer ok.",
                     answer="ok") for i in range(self.size)]

    def tool_schemas(self) -> list[dict]:
        def tool(name, **props):
            return {"type": "function", "function": {"name": name, "description": name,
                    "parameters": {"type": "object", "required": list(props),
                                   "properties": {k: {"type": "string"} for k in props}}}}
        return [tool("look"), tool("answer", value=True)]

    def system_prompt(self) -> str:
        return "Look, then answer."

    def reset(self, task: Task) -> dict:
        return {}

    def step(self, state, name: str, arguments: dict) -> ToolResult:
        if name == "look":
            return ToolResult(name, arguments, observation="You see: ok.")
        return ToolResult(name, arguments, observation="", done=True,
                          answer=arguments["value"])

    def baseline(self, task: Task, seed: int = 0):
        return lambda results: ("look", {}) if not results else ("answer", {"value": "ok"})


class NoIsCorrect(_Almost):
    """is_correct forgotten."""


class Good(_Almost):
    def is_correct(self, task: Task, answer: Optional[str], state) -> bool:
        return answer == task.answer


class NoAnswerTool(Good):
    answer_tool = ""


class StrTool(Good):
    def step(self, state, name: str, arguments: dict):
        return "You see: ok." if name == "look" else super().step(state, name, arguments)


class DictObservation(Good):
    def step(self, state, name: str, arguments: dict) -> ToolResult:
        if name == "look":
            return ToolResult(name, arguments, observation={"seen": "ok"})
        return super().step(state, name, arguments)


class RaisingTool(Good):
    def step(self, state, name: str, arguments: dict) -> ToolResult:
        if name == "look":
            raise ValueError("the lamp is broken")
        return super().step(state, name, arguments)


@register_env("named_right")
class Named(Good):
    """Registered as named_right: a config naming it otherwise contradicts that."""


class DuplicateTool(Good):
    """`look` listed twice (a schema pasted, then edited under the same name)."""
    def tool_schemas(self) -> list[dict]:
        look, answer = super().tool_schemas()
        return [look, look, answer]


class ShadowAnswer(Good):
    """A tool `Answer` beside the answer tool `answer`: the model meant one of them."""
    def tool_schemas(self) -> list[dict]:
        look, answer = super().tool_schemas()
        shadow = {**answer, "function": {**answer["function"], "name": "Answer"}}
        return [look, shadow, answer]


class CopiedTest(Good):
    """The held-out split copied from train: a test score would measure memory."""
    def tasks(self, split: str) -> list[Task]:
        return super().tasks("train")


def looked_none(episode, cfg=None):
    """Forgets to return its value."""
    0.1 if episode.results else 0.0


def looked_str(episode, cfg=None):
    """Returns the value as text."""
    return "0.1"


@register_env("rewnone", default_reward="broken_none", rewards={
    "broken_none": Rubric(correct, looked_none, doc="a component returning None")})
class RewardNone(Good):
    """Its default reward's component `looked_none` returns None."""


@register_env("rewstr", default_reward="broken_str", rewards={
    "broken_str": Rubric(correct, looked_str, doc="a component returning a str")})
class RewardStr(Good):
    """Its default reward's component `looked_str` returns a str."""


# --- issue 63: the mistakes of a newcomer's world, each stopped by preflight -----------

class EmptyMask(Good):
    """A mask that allows no tool on the turn after `look` (`tool_names: []`)."""
    def mask_candidates(self, state, **options) -> dict:
        return {"tool_names": [] if state.get("looked") else ["look"]}

    def step(self, state, name: str, arguments: dict) -> ToolResult:
        state["looked"] = True
        return super().step(state, name, arguments)


class MethodTools(Good):
    """Tools as methods of the world: step() calls `getattr(self, name)(state, **args)`."""
    def tool_schemas(self) -> list[dict]:
        look, answer = super().tool_schemas()
        props = {"where": {"type": "string"}}
        return [{**look, "function": {**look["function"], "parameters": {
            "type": "object", "properties": props, "required": ["where"]}}}, answer]

    def step(self, state, name: str, arguments: dict) -> ToolResult:
        return getattr(self, name)(state, **arguments)

    def look(self, state, where: str) -> ToolResult:
        return ToolResult("look", {"where": where}, observation=f"You see: ok at {where}.")

    def answer(self, state, value: str) -> ToolResult:
        return ToolResult("answer", {"value": value}, observation="", done=True,
                          answer=value)

    def baseline(self, task: Task, seed: int = 0):
        return lambda results: ("look", {"where": "shelf"}) if not results else \
            ("answer", {"value": "ok"})


class SchemaMismatch(MethodTools):
    """The schema says `place`, the method takes `where`: every call is a TypeError."""
    def tool_schemas(self) -> list[dict]:
        look, answer = super().tool_schemas()
        params = {"type": "object", "properties": {"place": {"type": "string"}},
                  "required": ["place"]}
        return [{**look, "function": {**look["function"], "parameters": params}}, answer]

    def baseline(self, task: Task, seed: int = 0):
        return lambda results: ("look", {"place": "shelf"}) if not results else \
            ("answer", {"value": "ok"})


class DispatchMismatch(SchemaMismatch):
    """The same mistake behind a dispatch table (no method of the tool's name): only the
    conformance episode's internal error shows it."""
    def step(self, state, name: str, arguments: dict) -> ToolResult:
        return {"look": _look_where, "answer": MethodTools.answer}[name](
            self, state, **arguments)

    look = None


def _look_where(env, state, where: str) -> ToolResult:
    return ToolResult("look", {"where": where}, observation=f"You see: ok at {where}.")


class DuplicateIds(Good):
    """Two train tasks under one id (an id built from a counter that restarts)."""
    def tasks(self, split: str) -> list[Task]:
        out = super().tasks(split)
        return [Task(id=f"{split}-0", prompt=t.prompt, answer=t.answer) for t in out]


class Unseeded(Good):
    """A task generator on the global random module: each build asks other questions
    (each seed of a grid, too, under the same ids)."""
    def tasks(self, split: str) -> list[Task]:     # the global generator: the mistake
        return [Task(id=f"{split}-{i}", prompt=f"Look at lamp {random.randrange(10**9)}, "
                     f"then answer ok ({split}).", answer="ok") for i in range(self.size)]


@register_env("ignoresseed", seed_key="seed")
class IgnoresSeed(Good):
    """Declares `seed` as what seeds its tasks, and never reads it."""
    def __init__(self, size: int = 2, seed: int = 0):
        super().__init__(size)
        self.seed = seed


@register_env("usesseed", seed_key="seed")
class UsesSeed(IgnoresSeed):
    """The same, its tasks drawn from its seed."""
    def tasks(self, split: str) -> list[Task]:
        return [Task(id=f"{split}-{i}", prompt=f"Look at lamp {self.seed}-{split}-{i}, then "
                     "answer ok.", answer="ok") for i in range(self.size)]


class ResetStr(Good):
    """reset() returns the task's prompt instead of a state."""
    def reset(self, task: Task):
        return task.prompt


class ResetNone(Good):
    """reset() builds a state and forgets to return it."""
    def reset(self, task: Task):
        """The state {"looked": False} was meant (no return: None)."""


class EmptyAnswers(Good):
    """Masks that offer `answer` before any value was read, with `answers: []`: its value
    is written free (a leak of the value mask)."""
    def mask_candidates(self, state, answer_masking: bool = True, **options) -> dict:
        return {"tool_names": ["look", "answer"], "ids": None, "answers": [],
                "grammar": {"id_key": "where", "answer_key": "value"}}


class RunSeeded(Good):
    """Draws its tasks from the run's seed (`cfg=` the whole config): each seed of a grid
    asks other questions under the same ids."""
    def __init__(self, size: int = 2, cfg=None):
        super().__init__(size)
        self.run_seed = cfg.seed if cfg is not None else 0

    def tasks(self, split: str) -> list[Task]:
        return [Task(id=f"{split}-{i}", prompt=f"Look at lamp {self.run_seed}-{split}-{i}, "
                     "then answer ok.", answer="ok") for i in range(self.size)]
