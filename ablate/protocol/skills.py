"""Skills: verified, replayable tool-call programs an environment declares (agent=voyager).

A skill is what a skill-library agent stores after an episode (Wang et al., 2023,
"Voyager", arXiv:2305.16291, §2.2: an executable skill, indexed by its description, kept
only after it verifies in the environment). Here it is a sequence of this environment's
tool calls whose argument values may be parameters: a value written "$name" is replaced
by the caller's `args[name]`, else by the parameter's default (the value on the task it
was made from). Replaying a skill is calling `Environment.call` once per call, so every
replayed call has its own observation and `state_changed`, exactly as if the model had
made it.

A world with skills is a SkillWorld (ablate/agents/skills.py): `skill_of(task, results)`
(a candidate skill from an episode's calls; None = nothing worth keeping) and optionally
`skill_query(task)` (the text a library indexes and searches for a task) and
`skill_feedback(task, state)` (what a failed verification shows the next attempt). This
module is the skill itself, which a world builds; replaying and verifying it belongs to
the agent (ablate/agents/skills.py).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional

PARAM = "$"          # a value "$name" is the parameter `name`


@dataclass(frozen=True)
class Skill:
    """A parameterised program: `calls` are (tool, arguments) pairs; `params` the
    parameters with their defaults; `uses` the skills an episode replayed while making
    it (Voyager's "other skills it calls")."""
    name: str
    doc: str
    calls: tuple                       # ((tool name, {argument: value | "$param"}), ...)
    params: dict = field(default_factory=dict, compare=False)
    uses: tuple = ()

    def bind(self, args: Optional[dict] = None) -> list[tuple[str, dict]]:
        """The concrete calls for `args` (missing parameters take their defaults).
        ValueError (one line) for an argument that is no parameter of the skill."""
        args = dict(args or {})
        extra = [k for k in args if k not in self.params]
        if extra:
            raise ValueError(f"skill {self.name} has no parameter {extra[0]!r}; it takes "
                             f"{', '.join(self.params) or 'no arguments'}")
        values = {**self.params, **args}
        return [(tool, {k: _value(v, values) for k, v in a.items()})
                for tool, a in self.calls]

    def signature(self) -> str:
        """The program with its defaults bound: two skills with the same signature do
        the same thing."""
        return json.dumps(self.bind(), sort_keys=True, ensure_ascii=False)

    def to_json(self) -> dict:
        return {"name": self.name, "doc": self.doc, "calls": [list(c) for c in self.calls],
                "params": self.params, "uses": list(self.uses)}

    @classmethod
    def from_json(cls, d: dict) -> "Skill":
        return cls(name=d["name"], doc=d["doc"], calls=tuple((t, a) for t, a in d["calls"]),
                   params=dict(d["params"]), uses=tuple(d.get("uses", ())))


def _value(v: Any, values: dict) -> Any:
    if isinstance(v, str) and v.startswith(PARAM) and v[1:] in values:
        return values[v[1:]]
    return v


def parameterise(calls: list[tuple[str, dict]], keys: tuple[str, ...]) -> tuple[tuple, dict]:
    """(calls, params): every argument named in `keys` becomes a parameter `<key><i>`
    (i counting that key's distinct values from 1; equal values share a parameter), its
    value the default."""
    names: dict[tuple, str] = {}
    count: dict[str, int] = {}
    params, out = {}, []
    for tool, args in calls:
        new = {}
        for k, v in args.items():
            if k not in keys:
                new[k] = v
                continue
            key = (k, json.dumps(v, sort_keys=True))
            if key not in names:
                count[k] = count.get(k, 0) + 1
                names[key] = f"{k}{count[k]}"
                params[names[key]] = v
            new[k] = PARAM + names[key]
        out.append((tool, new))
    return tuple(out), params
