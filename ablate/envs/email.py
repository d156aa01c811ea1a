"""The email task (EnronHop / synthetic mailbox) presented through the protocol.

An adapter over ablate.env (EmailDB, ToolBox, tasks, judge, scripted agent), which it
reuses unchanged: the observations are the ToolBox's, byte for byte. A state is one
episode's ToolBox; `state_changed` is the ToolBox's own notion (a search that returned
hits never returned before, a first read of an email, the final answer).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Optional

from ablate.env import ExactJudge, ToolBox
from ablate.env.bundle import EnvBundle, build_env
from ablate.env.data import Task as EmailTask
from ablate.env.scripted import ScriptedAgent
from ablate.env.tools import ANSWER, READ, TOOL_SCHEMAS
from ablate.envs.base import Environment, Task, ToolResult, register_env, scripted
from ablate.harness.chat import DEFAULT_SYSTEM_PROMPT, question_text
from ablate.harness.episode import Episode, ToolCall, Turn
from ablate.harness.masking import episode_candidates

EMAIL_METRICS = ("searches", "reads", "keywords_per_search", "zero_hit_rate",
                 "read_after_hit", "fabricated_sources", "evidence_read")


@dataclass
class EmailState:
    task: EmailTask
    toolbox: ToolBox
    calls: list


@register_env("enronhop")
@register_env("synthetic")
class EmailEnv(Environment):
    """`env=synthetic|enronhop`: the mailbox and tasks of an EnvBundle."""
    answer_tool = ANSWER

    def __init__(self, bundle: EnvBundle, judge: Any = None, name: str = "synthetic"):
        self.bundle, self.judge, self.name = bundle, judge or ExactJudge(), name

    @classmethod
    def from_config(cls, env_cfg, judge: Any = None, **_objects) -> "EmailEnv":
        return cls(build_env(SimpleNamespace(env=env_cfg)), judge=judge, name=env_cfg.name)

    def tasks(self, split: str) -> list[Task]:
        raw = {"train": self.bundle.train_tasks, "test": self.bundle.test_tasks}[split]
        return [_task(t) for t in raw]

    def tool_schemas(self) -> list[dict]:
        return TOOL_SCHEMAS

    def system_prompt(self) -> str:
        return DEFAULT_SYSTEM_PROMPT

    def reset(self, task: Task) -> EmailState:
        return EmailState(task=task.payload, toolbox=self.bundle.toolbox(task.payload),
                          calls=[])

    def step(self, state: EmailState, name: str, arguments: dict) -> ToolResult:
        return self.call(state, name, arguments)

    def call(self, state: EmailState, name: Any, arguments: Any) -> ToolResult:
        """The ToolBox validates every input itself (and never raises): its messages,
        byte for byte, are today's observations, so the generic checks are skipped."""
        call = state.toolbox.call(name, arguments)
        state.calls.append(call)
        return _result(call)

    def is_correct(self, task: Task, answer: Optional[str], state: Any) -> bool:
        if answer is None:
            return False
        return bool(self.judge.judge(task.payload.question, task.payload.answer, answer))

    def behaviour(self, task: Task, results: list[ToolResult]) -> dict:
        """The email metrics of Episode.behaviour (the one implementation)."""
        calls = [_call(r) for r in results]
        done = [r for r in results if r.done]
        ep = Episode(task=task.payload, group=0, sample=0,
                     turns=[Turn(text="", completion_tokens=0, calls=calls)],
                     final_answer=done[-1].answer if done else None,
                     sources=list(done[-1].extra.get("sources", [])) if done else [])
        full = ep.behaviour()
        return {k: full[k] for k in EMAIL_METRICS}

    def mask_candidates(self, state: EmailState, answer_masking: bool = True,
                        keyword_masking: bool = False, keyword_words: int = 1) -> dict:
        """The harness's mask context for this episode so far, plus the tools allowed
        next (read_email only once a search has shown an id), as rollout._mask_for
        computes them today."""
        ctx = episode_candidates(state.calls, answer_masking=answer_masking,
                                 keyword_masking=keyword_masking,
                                 question=state.task.question, keyword_words=keyword_words)
        ctx["tool_names"] = [n for n in self.tool_names()
                             if ctx["message_ids"] or n != READ]
        return ctx

    def baseline(self, task: Task, seed: int = 0):
        """The scripted EnronHop agent's calls on this task, replayed (the world is
        deterministic, so the replay sees the same observations)."""
        _, steps = ScriptedAgent.perfect().run(task.payload, self.bundle.toolbox(task.payload),
                                               random.Random(seed))
        return scripted([(s.name, s.arguments) for s in steps])

    def snapshot(self, state: EmailState) -> tuple:
        tb = state.toolbox
        return (state.task, frozenset(tb.seen_hits), frozenset(tb.read_ids),
                tuple(state.calls))

    def restore(self, snapshot: tuple) -> EmailState:
        task, hits, read, calls = snapshot
        tb = self.bundle.toolbox(task)
        tb.seen_hits, tb.read_ids = set(hits), set(read)
        return EmailState(task=task, toolbox=tb, calls=list(calls))

    def close(self) -> None:
        close = getattr(self.bundle.db, "close", None)
        if close is not None:
            close()


def _task(t: EmailTask) -> Task:
    return Task(id=t.id, prompt=question_text(t), answer=t.answer,
                metadata={"hops": t.hops, "difficulty": t.hops}, payload=t)


def _result(call: ToolCall) -> ToolResult:
    ok = call.error is None
    done = ok and call.name == ANSWER
    changed = ok and (call.new_hits > 0 or call.new_read or done)
    args = call.arguments or {}
    extra = {"hits": list(call.hits), "new_hits": call.new_hits, "read_id": call.read_id,
             "new_read": call.new_read}
    if done:
        extra["sources"] = [str(s) for s in args.get("sources", [])]
    return ToolResult(name=call.name, arguments=call.arguments, observation=call.observation,
                      state_changed=changed, error=call.error, done=done,
                      answer=str(args.get("answer", "")) if done else None, extra=extra)


def _call(r: ToolResult) -> ToolCall:
    """Back to the ToolBox record, for the metrics that still read it."""
    return ToolCall(name=r.name, arguments=r.arguments, observation=r.observation,
                    error=r.error, hits=list(r.extra.get("hits", [])),
                    new_hits=int(r.extra.get("new_hits", 0)),
                    read_id=r.extra.get("read_id"), new_read=bool(r.extra.get("new_read")))
