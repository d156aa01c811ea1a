"""The email task (EnronHop / synthetic mailbox) presented through the protocol.

A state is one episode's ToolBox (ablate/envs/email/tools.py) and its call log; the
observations are the ToolBox's, byte for byte, and `state_changed` is its own notion (a
search that returned hits never returned before, a first read of an email, the final
answer). The ToolBox's per-call facts (hits, reads) travel in `ToolResult.extra`.
"""
from __future__ import annotations

import json
import os
import random
import re
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Optional

from omegaconf import OmegaConf

from ablate.envs.registry import register_env
from ablate.protocol.environment import EnvError, Environment, tool_names
from ablate.protocol.task import Task, ToolResult
from ablate.envs.email.alias import PRIME_ALIASES
from ablate.envs.email.bundle import EnvBundle, build_env
from ablate.envs.email.config import JUDGES, EmailEnvConfig
from ablate.envs.email.data import DataFileError, Task as EmailTask
from ablate.envs.email.db import EmailDBError
from ablate.envs.email.episodes import email_task, emails_read, evidence_read  # noqa: F401
from ablate.envs.email.judge import ExactJudge, make_judge, normalize_answer
from ablate.envs.email.masking import GRAMMAR, episode_candidates
from ablate.envs.email.rewards import shaped
from ablate.envs.email.scripted import ScriptedAgent
from ablate.protocol.skills import Skill, parameterise
from ablate.harness.episode import is_abstention
from ablate.envs.email.tools import (ANSWER, READ, SEARCH, SYSTEM_PROMPT, TOOL_SCHEMAS,
                                     ToolBox, ToolCall)

@dataclass
class EmailState:
    task: EmailTask
    toolbox: ToolBox
    calls: list             # the episode's ToolResults so far

    def __getstate__(self) -> dict:
        """Pickled (async rollouts send ended episodes between processes) without the
        ToolBox, whose database connection cannot cross a process boundary."""
        return {**self.__dict__, "toolbox": None}


# the email worlds' declarations (ablate/envs/registry.py, register_env)
DECLARED = dict(
    rewards={"shaped": shaped}, default_reward="shaped",
    config_errors=(DataFileError, EmailDBError),      # a bad data file or database
    breakdown_label="hops",             # evidence emails chained per question
    behaviour_labels={
        "searches": "searches", "reads": "emails read",
        "keywords_per_search": "keywords per search", "zero_hit_rate": "searches with no hit",
        "read_after_hit": "read after a hit", "fabricated_sources": "sources never seen",
        "evidence_read": "evidence emails read"})


@register_env("enronhop", **DECLARED)
@register_env("synthetic", **DECLARED)
class EmailEnv(Environment):
    """`env=synthetic|enronhop`: the mailbox and tasks of an EnvBundle."""
    answer_tool = ANSWER
    config_schema = EmailEnvConfig
    prime_aliases = PRIME_ALIASES        # Prime Hub ids it stands for (alias.py)

    def __init__(self, bundle: EnvBundle, judge: Any = None, name: str = "synthetic"):
        self.bundle, self.judge, self.name = bundle, judge or ExactJudge(), name

    @classmethod
    def from_config(cls, env_cfg, judge: Any = None, cfg: Any = None,
                    preflight: bool = False, **_objects) -> "EmailEnv":
        """`cfg` (the whole run config, when given) bounds the questions by the model's
        context (ablate.apps.preflight.question_budget); `env.judge` makes the answer
        judge (exact | llm) unless a `judge` object is given; at preflight the exact one
        (its conformance episode sends no request)."""
        if cfg is None:   # the env group alone: schema defaults for the keys not given
            env_cfg = OmegaConf.merge(OmegaConf.structured(EmailEnvConfig), env_cfg)
            cfg = SimpleNamespace(env=env_cfg)
        if judge is None and not preflight and "judge" in env_cfg:   # old configs lack it
            judge = make_judge(env_cfg.judge)
        _check_files(env_cfg)
        return cls(build_env(cfg), judge=judge, name=env_cfg.name)

    @classmethod
    def check_config(cls, env_cfg) -> None:
        super().check_config(env_cfg)
        env = env_cfg
        _need(1 <= env.max_results <= 10, "env.max_results", env.max_results, "in 1..10")
        _need(env.max_read_chars >= 1, "env.max_read_chars", env.max_read_chars, ">= 1")
        _check_judge(env.judge)
        if env.name == "synthetic":
            for key in ("num_inboxes", "emails_per_inbox", "train_tasks", "test_tasks"):
                _need(env[key] >= 1, f"env.{key}", env[key], ">= 1")
            _need(1 <= env.max_hops <= 4, "env.max_hops", env.max_hops, "in 1..4")
        if env.name == "enronhop":
            for key in ("emails_path", "train_tasks_path", "test_tasks_path"):
                if not env[key]:
                    raise EnvError(f"env=enronhop needs env.{key}=<path to your JSONL file>")

    @classmethod
    def prompt_text(cls, env_cfg) -> str:
        return SYSTEM_PROMPT + json.dumps(TOOL_SCHEMAS)

    @classmethod
    def over_db(cls, db, max_results: int = 10, judge: Any = None) -> "EmailEnv":
        """An environment over a mailbox alone (its tasks come from elsewhere)."""
        return cls(EnvBundle(db=db, train_tasks=[], test_tasks=[], max_results=max_results,
                             root=None), judge=judge)

    def tasks(self, split: str) -> list[Task]:
        raw = {"train": self.bundle.train_tasks, "test": self.bundle.test_tasks}[split]
        return [as_task(t) for t in raw]

    def tool_schemas(self) -> list[dict]:
        return TOOL_SCHEMAS

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT

    def reset(self, task) -> EmailState:
        raw = email_task(task)
        return EmailState(task=raw, toolbox=self.bundle.toolbox(raw), calls=[])

    def step(self, state: EmailState, name: str, arguments: dict) -> ToolResult:
        return self.call(state, name, arguments)

    def call(self, state: EmailState, name: Any, arguments: Any) -> ToolResult:
        """The ToolBox validates every input itself (and never raises): its messages,
        byte for byte, are the observations, so the generic checks are skipped."""
        result = tool_result(state.toolbox.call(name, arguments))
        state.calls.append(result)
        return result

    def is_correct(self, task, answer: Optional[str], state: Any) -> bool:
        return self.judge_many([(task, answer, state)])[0]

    def judge_many(self, items) -> list[bool]:
        """One batched judge call (an LLM judge sends them concurrently, cached)."""
        asked = [(email_task(t), a) for t, a, _ in items]
        todo = [(t.question, t.answer, a) for t, a in asked if a is not None]
        many = getattr(self.judge, "judge_many", None)
        verdicts = iter((many(todo) if many is not None else
                         [self.judge.judge(*x) for x in todo]) if todo else [])
        return [bool(next(verdicts)) if a is not None else False for _, a in asked]

    def behaviour(self, task, results: list[ToolResult]) -> dict:
        """The EnronHop article's behaviour metrics of one episode."""
        ok = [r for r in results if r.error is None]
        searches = [r for r in ok if r.name == SEARCH]
        reads = [r for r in ok if r.name == READ]
        hits = [r.extra.get("hits", []) for r in searches]
        seen_hits = {h for hs in hits for h in hs}
        read_ids = emails_read(results)
        kw = [len(r.arguments.get("keywords", [])) for r in searches if r.arguments]
        done = [r for r in results if r.done]
        sources = done[-1].extra.get("sources", []) if done else []
        fabricated = [s for s in sources if s not in seen_hits and s not in read_ids]
        return {
            "searches": len(searches),
            "reads": len(reads),
            "keywords_per_search": (sum(kw) / len(kw)) if kw else 0.0,
            "zero_hit_rate": (sum(1 for h in hits if not h) / len(searches))
            if searches else 0.0,
            "read_after_hit": any(hits) and bool(reads),
            "fabricated_sources": len(fabricated),
            "evidence_read": evidence_read(task, results),
        }

    def mask_candidates(self, state: EmailState, answer_masking: bool = True,
                        keyword_masking: bool = False, keyword_words: int = 1) -> dict:
        """The mask's context for this episode so far (ids seen, answer spans, keywords),
        the tools allowed next (read_email only once a search has shown an id) and the
        grammar that says which argument keys they constrain."""
        ctx = episode_candidates(state.calls, answer_masking=answer_masking,
                                 keyword_masking=keyword_masking,
                                 question=state.task.question, keyword_words=keyword_words)
        ctx["tool_names"] = [n for n in tool_names(self) if ctx["ids"] or n != READ]
        ctx["grammar"] = GRAMMAR
        return ctx

    def outcome_labels(self) -> dict[str, dict[str, str]]:
        return dict(OUTCOME_LABELS)

    def outcome_label(self, state: EmailState, result: ToolResult) -> Optional[str]:
        """search_inbox: any hit or none; read_email: does the email shown hold the gold
        answer (its normalised tokens as a contiguous span, the exact judge's
        normalisation)? Errors: not predictable."""
        if result.error is not None:
            return None
        if result.name == SEARCH:
            return "hits" if result.extra.get("hits") else "none"
        if result.name == READ:
            return "answer" if contains_answer(result.observation, state.task.answer) \
                else "no_answer"
        return None


    def anchor_states(self, task, turns: list[list[ToolResult]]) -> list:
        """GiGPO's anchor state before each turn (Anchored, ablate/harness/episode.py): the
        message ids the searches returned and the emails read so far. Two turns share a
        state when the agent has seen the same evidence, whatever keywords found it."""
        keys, hits, reads = [], set(), set()
        for calls in turns:
            keys.append((frozenset(hits), frozenset(reads)))
            for call in calls:
                hits.update(call.extra.get("hits", ()))
                if call.extra.get("read_id"):
                    reads.add(call.extra["read_id"])
        return keys

    def baseline(self, task, seed: int = 0, agent: Optional[ScriptedAgent] = None):
        """The scripted EnronHop agent (ScriptedAgent(), the no-learning baseline row)
        on this task, replayed: the world is deterministic, so the replay sees the same
        observations; the policy stops (None) where the agent stopped."""
        raw = email_task(task)
        agent = agent or ScriptedAgent()
        _, steps = agent.run(raw, self.bundle.toolbox(raw), random.Random(seed))
        calls = [(s.name, s.arguments) for s in steps]
        return lambda results: calls[len(results)] if len(results) < len(calls) else None

    # ------------------------------------------------------------------ skills (agent=voyager)
    def skill_of(self, task, results: list[ToolResult]) -> Optional[Skill]:
        """A search-and-read plan: the searches that found new emails, the first reads of
        emails, then the answer with its sources (keywords, ids, answer and sources are
        parameters). None without an answer ("I don't know" is none)."""
        ok = [r for r in results if r.error is None]
        done = [r for r in ok if r.done]
        if not done or is_abstention(done[-1].answer or ""):
            return None
        plan = [r for r in ok if (r.name == SEARCH and r.extra.get("new_hits")) or
                (r.name == READ and r.extra.get("new_read"))]
        calls = [(r.name, dict(r.arguments or {})) for r in plan + done[-1:]]
        calls, params = parameterise(calls, ("keywords", "message_id", "answer", "sources"))
        words = [w for w in re.findall(r"[A-Za-z0-9]+", email_task(task).question)
                 if w.lower() not in _PLAN_STOP][:4]
        steps = "; ".join(f"{n} {json.dumps(a, ensure_ascii=False)}"
                          for n, a in self_bound(calls, params))
        return Skill(name="answer_" + "_".join(w.lower() for w in words),
                     doc=f"Answers: {email_task(task).question} Plan: {steps}",
                     calls=calls, params=params)

    def skill_query(self, task) -> str:
        """The question alone (the prompt's inbox and date lines are in every task)."""
        return email_task(task).question

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


_PLAN_STOP = {"what", "is", "the", "of", "a", "an", "was", "which", "then", "to", "in",
              "last", "another", "project", "did", "who", "when", "where", "how"}


def self_bound(calls: tuple, params: dict) -> list[tuple[str, dict]]:
    """A parameterised plan's calls with their defaults (for its description)."""
    return Skill(name="", doc="", calls=calls, params=params).bind()


def _check_files(env_cfg) -> None:
    """enronhop reads the user's files: each must exist (EnvError naming the key)."""
    if env_cfg.name != "enronhop":
        return
    for key in ("emails_path", "train_tasks_path", "test_tasks_path"):
        if not os.path.isfile(os.path.expanduser(str(env_cfg[key]))):
            raise EnvError(f"env.{key}={env_cfg[key]!r}: file not found")


def _check_judge(judge) -> None:
    """env.judge: a known judge; llm needs its endpoint and model (one line each)."""
    if judge.name not in JUDGES:
        raise EnvError(f"env.judge.name={judge.name!r} is not allowed; choose one of "
                       f"{', '.join(JUDGES)}")
    if judge.name == "llm" and not (judge.base_url and judge.model):
        raise EnvError("env.judge.name=llm needs env.judge.base_url and env.judge.model")
    _need(judge.timeout_s > 0, "env.judge.timeout_s", judge.timeout_s, "> 0 seconds")
    _need(judge.max_retries >= 0, "env.judge.max_retries", judge.max_retries, ">= 0")


def _need(ok: bool, key: str, value, allowed: str) -> None:
    if not ok:
        raise EnvError(f"{key}={value!r} is not allowed; must be {allowed}")


OUTCOME_LABELS = {
    SEARCH: {"hits": "it returns at least one email", "none": "it returns no email"},
    READ: {"answer": "the email contains the answer to the question",
           "no_answer": "it does not"}}


def contains_answer(text: str, gold: str) -> bool:
    """Do the gold answer's normalised tokens appear contiguously in `text`'s?"""
    g, t = normalize_answer(gold), normalize_answer(text)
    return bool(g) and any(t[i:i + len(g)] == g for i in range(len(t) - len(g) + 1))


def as_task(t: EmailTask) -> Task:
    """The generic Task (ablate/protocol/task.py) of an EnronHop record: its payload."""
    return Task(id=t.id, prompt=t.prompt, answer=t.answer,
                metadata={"hops": t.hops, "difficulty": t.hops}, payload=t)


def tool_result(call: ToolCall) -> ToolResult:
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
