"""Environments with one mistake each, the ones a newcomer makes (issue: preflight's
protocol conformance): each must stop `python -m ablate` with one line and exit 2 before
a cell directory exists (tests/test_envs_preflight.py)."""
from __future__ import annotations

from typing import Optional

from ablate.envs import Environment, Task, ToolResult, register_env


class _Almost(Environment):
    """Everything but is_correct: a world with one tool `look` and the answer tool."""
    answer_tool = "answer"

    def __init__(self, size: int = 2):
        self.size = size

    def tasks(self, split: str) -> list[Task]:
        return [Task(id=f"{split}-{i}", prompt="Look, then answer ok.", answer="ok")
                for i in range(self.size)]

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
