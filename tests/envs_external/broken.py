"""Environments with one mistake each, the ones a newcomer makes (issue: preflight's
protocol conformance): each must stop `python -m ablate` with one line and exit 2 before
a cell directory exists (tests/envs/test_envs_preflight.py)."""
from __future__ import annotations

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
