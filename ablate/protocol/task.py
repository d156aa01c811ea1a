"""What an episode is made of, in every world: the task asked and each tool call's result."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

SPLITS = ("train", "test")



@dataclass(frozen=True)
class Task:
    """One task of an environment: what the agent is asked, and the gold answer.

    `metadata` holds JSON-serialisable facts used for breakdowns (e.g. `difficulty`);
    `payload` is the environment's own record of the task (not serialised); `key`, when
    the prompt alone does not tell tasks apart (code repair: one prompt, many
    repositories), names what does (see `identity`)."""
    id: str
    prompt: str                     # the user message of the episode's first turn
    answer: str                     # gold answer ("" when correctness is not by answer)
    metadata: dict = field(default_factory=dict, compare=False)
    payload: Any = field(default=None, compare=False, repr=False)
    key: str = field(default="", compare=False, repr=False)

    @property
    def identity(self) -> str:
        """What makes two tasks one question (preflight refuses a test task whose
        identity a train task has): `key` when set, else the prompt and the gold answer,
        whitespace collapsed."""
        if self.key:
            return self.key
        return " ".join(self.prompt.split()) + "\n" + " ".join(self.answer.split())

    @property
    def difficulty(self) -> int:
        """The world's difficulty level of this task (its word for it: the environment's
        `breakdown_label`); evaluations break accuracy down by it."""
        return int(self.metadata.get("difficulty", 1))

    def to_json(self) -> dict:
        return {"id": self.id, "prompt": self.prompt, "answer": self.answer,
                **self.metadata}


@dataclass
class ToolResult:
    """One tool call as the environment saw it and what it answered (environment-neutral
    episode record: tool name, arguments, observation text, structured info)."""
    name: str                       # tool name as written ("" when none could be read)
    arguments: Optional[dict]       # parsed arguments; None when they were not an object
    observation: str                # the text the model sees back
    state_changed: bool = False     # did this call change the world / the agent's view?
    error: Optional[str] = None     # set when the call was malformed / unknown / bad args
    done: bool = False              # the answer tool was called without error
    answer: Optional[str] = None    # the final answer when done
    extra: dict = field(default_factory=dict)   # environment-specific facts (JSON-safe)

    @property
    def info(self) -> dict:
        return {"state_changed": self.state_changed, "error": self.error,
                "done": self.done, **self.extra}

    def to_json(self) -> dict:
        return {"name": self.name, "arguments": self.arguments,
                "observation": self.observation, "answer": self.answer, "info": self.info}
