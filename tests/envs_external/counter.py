"""A complete minimal environment: move a counter to a target, then answer.

Copy this file to start your own (docs/environments.md walks through it)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ablate.envs import Environment, Task, ToolResult, register_env


@dataclass
class CounterState:
    value: int


@register_env("counter")
class CounterEnv(Environment):
    answer_tool = "answer"

    def __init__(self, num_tasks: int = 8, max_step: int = 5):
        self.num_tasks, self.max_step = num_tasks, max_step

    def tasks(self, split: str) -> list[Task]:
        out = []
        for i in range(self.num_tasks):
            j = 2 * i + (split == "test")      # the held-out split: the odd (start, gap)s
            start, gap = j // 9 % 60, 1 + j % 9
            out.append(Task(id=f"{split}-{i}", answer=str(start + gap),
                            prompt=f"The counter is at {start}. Make it {start + gap}, "
                                   "then answer with its value.",
                            metadata={"difficulty": 1 + gap // 5, "start": start}))
        return out

    def tool_schemas(self) -> list[dict]:
        return [
            {"type": "function", "function": {
                "name": "add", "description": f"Add n (|n| <= {self.max_step}).",
                "parameters": {"type": "object",
                               "properties": {"n": {"type": "integer"}},
                               "required": ["n"], "additionalProperties": False}}},
            {"type": "function", "function": {
                "name": "answer", "description": "Answer with the value. Ends the episode.",
                "parameters": {"type": "object",
                               "properties": {"value": {"type": "string"}},
                               "required": ["value"], "additionalProperties": False}}},
        ]

    def system_prompt(self) -> str:
        return "You control a counter with the tools add and answer."

    def reset(self, task: Task) -> CounterState:
        return CounterState(value=task.metadata["start"])

    def step(self, state: CounterState, name: str, arguments: dict) -> ToolResult:
        if name == "add":
            n = arguments.get("n")
            if isinstance(n, bool) or not isinstance(n, int) or abs(n) > self.max_step:
                msg = f"Error: n must be an integer in -{self.max_step}..{self.max_step}."
                return ToolResult(name, arguments, observation=msg, error=msg)
            state.value += n
            return ToolResult(name, arguments, observation=f"The counter is at {state.value}.",
                              state_changed=n != 0)
        value = arguments.get("value")
        if not isinstance(value, str):
            msg = 'Error: answer needs "value": a string.'
            return ToolResult(name, arguments, observation=msg, error=msg)
        return ToolResult(name, arguments, observation="", done=True, answer=value)

    def is_correct(self, task: Task, answer: Optional[str], state: CounterState) -> bool:
        return answer is not None and answer.strip() == task.answer and \
            state.value == int(task.answer)

    def behaviour(self, task: Task, results: list[ToolResult]) -> dict:
        return {"adds": sum(1 for r in results if r.name == "add" and r.error is None)}

    def baseline(self, task: Task, seed: int = 0):
        def policy(results: list[ToolResult]):
            value = task.metadata["start"] + sum(
                r.arguments["n"] for r in results if r.name == "add" and r.error is None)
            gap = int(task.answer) - value
            if gap == 0:
                return "answer", {"value": str(value)}
            return "add", {"n": max(-self.max_step, min(self.max_step, gap))}
        return policy
