"""A complete user environment: look a key up in a small key-value store, then answer.

Copy this file to start your own (docs/environments.md walks through it): the protocol
methods, the answer tool, its own default reward, action masks for small models, a
scripted baseline and the registration of its name."""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Optional

from ablate.envs import Environment, Task, ToolResult, register_env
from ablate.rewards import Rubric, correct

WORDS = ("amber", "birch", "cedar", "delta", "ember", "fjord", "grove", "heron", "indigo",
         "juniper", "kestrel", "lotus", "maple", "nectar", "onyx", "pebble")
GET, ANSWER = "get", "answer"

# The action mask's grammar (docs/environments.md, "Action masking"): which argument
# keys take candidates, and the text each tool name forces up to its first value.
GRAMMAR = {"id_key": "key", "answer_key": "value",
           "after_name": {GET: ', "arguments": {"key": "', ANSWER: ', "arguments": {"value": "'},
           "after_id": "}}", "after_answer": "}}"}


@dataclass
class KVState:
    store: dict
    values: list = field(default_factory=list)    # values the agent has read


def looked_up(episode, cfg=None) -> float:
    """0.1 when the answer came after reading some value."""
    return 0.1 if any(r.name == GET and r.state_changed for r in episode.results) else 0.0


# 1 for a correct answer, plus 0.1 for having read a value (reward.weights.looked_up=0 drops it)
kv_lookup = Rubric(correct, looked_up, doc="1 if correct, +0.1 after reading a value")


# its own reward (offered to this world alone), the default when the command line sets none,
# and what its behaviour() columns count (the tables' labels)
@register_env("kvlookup", rewards={"kv_lookup": kv_lookup}, default_reward="kv_lookup",
              behaviour_labels={"gets": "values read", "missing_keys": "gets of a missing key"})
class KVLookupEnv(Environment):
    answer_tool = ANSWER

    def __init__(self, num_tasks: int = 16, num_keys: int = 6, seed: int = 0):
        self.num_tasks, self.num_keys, self.seed = num_tasks, num_keys, seed

    def tasks(self, split: str) -> list[Task]:
        rng = random.Random(f"{self.seed}-{split}")       # the held-out split: its own stream
        out = []
        for i in range(self.num_tasks):
            keys = rng.sample(WORDS, self.num_keys)
            store = {k: str(rng.randrange(100, 1000)) for k in keys}
            asked = rng.choice(keys)
            out.append(Task(id=f"{split}-{i}", answer=store[asked], payload=store,
                            prompt=f"The store holds the keys {', '.join(keys)}. What "
                                   f"value is stored under the key {asked!r}?",
                            metadata={"difficulty": 1, "asked": asked}))
        return out

    def tool_schemas(self) -> list[dict]:
        def tool(name, description, **props):
            return {"type": "function", "function": {
                "name": name, "description": description,
                "parameters": {"type": "object", "additionalProperties": False,
                               "properties": {k: {"type": "string"} for k in props},
                               "required": list(props)}}}
        return [tool(GET, "Read the value of a key.", key=True),
                tool(ANSWER, "Answer with the value. Ends the episode.", value=True)]

    def system_prompt(self) -> str:
        return "You look values up in a key-value store with the tools get and answer."

    def reset(self, task: Task) -> KVState:
        return KVState(store=dict(task.payload))

    def step(self, state: KVState, name: str, arguments: dict) -> ToolResult:
        if name == GET:
            key = arguments["key"]
            if not isinstance(key, str) or key not in state.store:
                msg = "Error: no such key; the question lists the keys."
                return ToolResult(name, arguments, observation=msg, error=msg)
            value = state.store[key]
            changed = value not in state.values
            state.values += [value] if changed else []
            return ToolResult(name, arguments, observation=f"{key} = {value}",
                              state_changed=changed)
        value = arguments["value"]
        if not isinstance(value, str):
            msg = 'Error: answer needs "value": a string.'
            return ToolResult(name, arguments, observation=msg, error=msg)
        return ToolResult(name, arguments, observation="Answered.", state_changed=True,
                          done=True, answer=value)

    def is_correct(self, task: Task, answer: Optional[str], state: KVState) -> bool:
        return answer is not None and answer.strip() == task.answer

    def behaviour(self, task: Task, results: list[ToolResult]) -> dict:
        ok = [r for r in results if r.error is None]
        return {"gets": sum(r.name == GET for r in ok),
                "missing_keys": sum(r.name == GET and r.error is not None for r in results)}

    def mask_candidates(self, state: KVState, answer_masking: bool = True,
                        **options) -> dict:
        """Tool names allowed next (answer once a value was read), the store's keys (the
        question lists them) as the ids `get` may name, and (answer masking) the values
        read as the answers."""
        return {"tool_names": [GET] + ([ANSWER] if state.values else []),
                "ids": list(state.store),
                "answers": list(state.values) if answer_masking else None,
                "grammar": GRAMMAR}

    def baseline(self, task: Task, seed: int = 0):
        def policy(results: list[ToolResult]):
            if not results:
                return GET, {"key": task.metadata["asked"]}
            return ANSWER, {"value": results[-1].observation.split(" = ")[-1]}
        return policy
