"""Voyager: a library of verified skills, retrieved and composed across a cell's episodes
(Wang et al., 2023, "Voyager: An Open-Ended Embodied Agent with Large Language Models",
arXiv:2305.16291, §2: automatic curriculum, skill library, iterative prompting with
environment feedback and self-verification).

What a skill is belongs to the environment (ablate/protocol/skills.py; code repair: a patch
program, the email task: a search-and-read plan); the agent is generic:

1. Retrieval (§2.2): for each task the top-k skills by BM25 of the environment's
   `skill_query(task)` against the library (ablate/agents/library.py; with
   `embedding` set, fused with the cosine ranking of dense vectors) are offered as text
   in the task's prompt and through a `use_skill(skill, args)` tool, which replays the
   skill through `Environment.call`: every replayed call is logged as its own tool call,
   with its own observation and state change (SkillEnv.run_call).
2. Verification (§2.3): after a training episode, the environment's candidate skill
   (`skill_of`: the calls that did something, parameterised) is replayed on a fresh state
   of its task; it enters the library only if the judge accepts the outcome. A candidate
   that fails is retried up to `max_retries` times: another episode of the task whose
   prompt shows the failed program and the environment's feedback (its error observation).
3. Curriculum (§2.1): the next training tasks are the unsolved ones nearest (BM25) to the
   tasks the library solved, within the difficulty level of ablate.algos.curriculum's
   promotion curriculum (LibraryExperience; the same machinery as algo.curriculum).
4. Lifelong metrics: library size, skills added / used, and on the cell's fixed held-out
   evaluation stream the solve rate and forgetting (tasks solved at an earlier evaluation
   that fail now); held-out tasks never enter the library.

Voyager writes skills with GPT-4; here the candidates are the policy's own verified
episodes, so a policy that solves nothing leaves the library empty (docs/agents.md).
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Optional

from ablate.agents.base import Agent, run_rollout
from ablate.agents.embedding import Embedder
from ablate.agents.library import RRF_K, SkillLibrary
from ablate.agents.registry import AGENTS
from ablate.agents.retry import retry_loop
from ablate.algos.curriculum import Curriculum, Experience
from ablate.core.seeding import derived_seed
from ablate.agents.skills import SkillWorld, replay, skill_query, verify
from ablate.harness.masking import mask_context
from ablate.harness.parser import Predictable, outcome_labels
from ablate.protocol.environment import (Environment, answer_from_text, judge_all,
                                         parse_arguments, prompt_tools, quote, tool_names)
from ablate.protocol.skills import Skill
from ablate.protocol.task import ToolResult

USE_SKILL = "use_skill"
USE_SKILL_SCHEMA = {"type": "function", "function": {
    "name": USE_SKILL,
    "description": "Replay a skill of your library (its tool calls run one by one and "
                   "their results are shown). args: values for its parameters; by "
                   "default those of the task it was made on.",
    "parameters": {"type": "object", "properties": {
        "skill": {"type": "string", "description": "The name of an offered skill."},
        "args": {"type": "object", "description": "Parameter values (optional)."}},
        "required": ["skill"], "additionalProperties": False}}}
SKILLS_HEAD = "Skills from your library (use_skill replays one):"
RETRY_HEAD = "Your previous attempt did not verify."


# ------------------------------------------------------------------ the use_skill world
@dataclass
class SkillState:
    inner: Any                                   # the wrapped environment's state
    offered: tuple = ()                          # the Skills offered for this task
    used: list = field(default_factory=list)     # names of the skills replayed


class SkillEnv(Environment):
    """The cell's environment plus `use_skill` over the skills offered per task id."""

    def __init__(self, env: Environment, offers: dict[str, list[Skill]]):
        self.env, self.offers = env, offers
        self.name, self.answer_tool = env.name, env.answer_tool

    def tasks(self, split):
        return self.env.tasks(split)

    def tool_schemas(self):
        return list(self.env.tool_schemas()) + [USE_SKILL_SCHEMA]

    def prompt_tool_schemas(self):
        return list(prompt_tools(self.env)) + [USE_SKILL_SCHEMA]

    def text_answer(self, text):
        return answer_from_text(self.env, text)

    def system_prompt(self):
        return self.env.system_prompt()

    def reset(self, task):
        return SkillState(self.env.reset(task), tuple(self.offers.get(task.id, ())))

    def step(self, state, name, arguments):
        return self.env.step(state.inner, name, arguments)

    def call(self, state, name, arguments):
        """A tool of the environment; use_skill: its last replayed call (run_call logs
        them all)."""
        return self.run_call(state, name, arguments)[-1]

    def run_call(self, state, name, arguments) -> list[ToolResult]:
        if name != USE_SKILL:
            return [self.env.call(state.inner, name, arguments)]
        args = parse_arguments(arguments)
        skill = next((s for s in state.offered if isinstance(args, dict)
                      and s.name == args.get("skill")), None)
        problem = None
        if skill is None:
            got = args.get("skill") if isinstance(args, dict) else args
            problem = (f"Error: no offered skill {quote(got)}; offered: "
                       f"{', '.join(s.name for s in state.offered) or '(none)'}.")
        elif not isinstance(args.get("args", {}), dict):
            problem = f"Error: args of {USE_SKILL} must be a JSON object."
        if problem is None:
            try:
                results = replay(self.env, state.inner, skill, args.get("args") or {})
            except ValueError as exc:
                problem = f"Error: {exc}."
        if problem is not None:
            return [ToolResult(name=USE_SKILL, arguments=args if isinstance(args, dict)
                               else None, observation=problem, error=problem)]
        state.used.append(skill.name)
        return results or [ToolResult(name=USE_SKILL, arguments=args,
                                      observation=f"{skill.name} has no calls.")]

    def is_correct(self, task, answer, state):
        return self.env.is_correct(task, answer, _inner(state))

    def judge_many(self, items):
        return judge_all(self.env, [(t, a, _inner(s)) for t, a, s in items])

    def behaviour(self, task, results):
        return self.env.behaviour(task, results)

    def mask_candidates(self, state, **options) -> dict:
        """The environment's masks, plus use_skill when skills are offered: under
        masking its whole call is forced to the best-ranked offered skill with its
        default arguments (the model chooses whether to use it, not which)."""
        ctx = mask_context(self.env, state.inner, **options)
        if not ctx or not state.offered:
            if ctx:
                ctx["tool_names"] = [t for t in ctx.get("tool_names", tool_names(self.env))
                                     if t != USE_SKILL]
            return ctx
        grammar = dict(ctx.get("grammar") or {})
        after = dict(grammar.get("after_name") or {})
        after[USE_SKILL] = ', "arguments": {"skill": ' + \
            json.dumps(state.offered[0].name, ensure_ascii=False) + '}}'
        grammar["after_name"] = after
        ctx["grammar"] = grammar
        ctx["tool_names"] = list(ctx.get("tool_names", tool_names(self.env))) + [USE_SKILL]
        return ctx

    def outcome_labels(self):
        return outcome_labels(self.env)

    def outcome_label(self, state, result):
        return (self.env.outcome_label(_inner(state), result)
                if isinstance(self.env, Predictable) else None)


def _inner(state):
    return state.inner if isinstance(state, SkillState) else state


def with_text(task, text: str):
    """The task (ablate.protocol.task.Task) whose prompt ends with `text`."""
    if not text:
        return task
    return dataclasses.replace(task, prompt=task.prompt + "\n\n" + text)


def offer_text(skills: list[Skill], doc_chars: int) -> str:
    if not skills:
        return ""
    return SKILLS_HEAD + "".join(f"\n- {s.name}: {s.doc[:doc_chars]}" for s in skills)


def program_text(skill: Skill) -> str:
    return "; ".join(f"{n} {json.dumps(a, ensure_ascii=False)}" for n, a in skill.bind())


# ------------------------------------------------------------------ the agent
@AGENTS.register("voyager")
class Voyager(Agent):
    """Voyager: a library of verified skills, retrieved and composed across a cell's
    episodes (Wang et al., 2023, "Voyager", arXiv:2305.16291, §2).

    One instance lives for the whole cell (`persistent`): its library is the state
    checkpointed inside the learner's (LibraryExperience.save / load)."""
    name = "voyager"
    persistent = True

    def __init__(self, *, top_k: int = 2, max_retries: int = 2, doc_chars: int = 160,
                 feedback_chars: int = 400, curriculum: bool = True, start_level: int = 1,
                 promote_at: float = 0.5, window: int = 2, embedding: Optional[str] = None,
                 fusion_k: int = RRF_K, embed_tokens: int = 256):
        self.top_k, self.max_retries = int(top_k), int(max_retries)
        self.doc_chars, self.feedback_chars = int(doc_chars), int(feedback_chars)
        self.curriculum = (Curriculum(mode="promotion", start_level=int(start_level),
                                      promote_at=float(promote_at), window=int(window))
                           if curriculum else None)
        self.embedding, self.embed_tokens = embedding, int(embed_tokens)
        self.library = SkillLibrary(fusion_k=fusion_k)
        self.step, self.training = 0, False
        self.counts: dict[str, float] = {}       # this training step's counters

    @classmethod
    def from_config(cls, agent_cfg) -> "Voyager":
        v = agent_cfg.voyager
        return cls(top_k=v.top_k, max_retries=v.max_retries, doc_chars=v.doc_chars,
                   feedback_chars=v.feedback_chars, curriculum=v.curriculum,
                   start_level=v.start_level, promote_at=v.promote_at, window=v.window,
                   embedding=v.embedding, fusion_k=v.fusion_k, embed_tokens=v.embed_tokens)

    def bind(self, model_cfg) -> None:
        """Give the library its embedder (`embedding`: policy = a frozen copy of the
        cell's model as configured; a directory = that model), once, before it is
        searched or restored (the loop's experience(), and act())."""
        if self.embedding and self.library.embedder is None:
            self.library.embedder = Embedder.from_spec(self.embedding, model_cfg,
                                                       self.embed_tokens)

    # --- acting --------------------------------------------------------------------------
    def offers(self, env, tasks) -> dict[str, list[Skill]]:
        return {t.id: [s for s, _ in self.library.search(skill_query(env, t), self.top_k)]
                for t in tasks}

    def rollout(self, policy, tasks, group_size, offers, *, temperature, seed) -> list:
        """The harness's rollout; with skills on offer, of the tasks with their skills in
        the prompt, in the world with use_skill (states unwrapped afterwards)."""
        if not any(offers.get(t.id) for t in tasks):
            eps = run_rollout(policy, tasks, group_size, temperature=temperature, seed=seed)
            for e in eps:
                e.env_metrics["voyager_skills_used"] = 0
            return eps
        shown = [with_text(t, offer_text(offers.get(t.id, []), self.doc_chars))
                 for t in tasks]
        eps = run_rollout(policy, shown, group_size, temperature=temperature, seed=seed,
                          env=SkillEnv(policy.env, offers))
        for e in eps:
            e.env_metrics["voyager_skills_used"] = len(e.state.used)
            e.env_metrics["voyager_skills"] = ",".join(e.state.used)   # a JSON scalar
            e.state = e.state.inner
        return eps

    def act(self, policy, tasks, group_size, *, temperature, seed, score):
        if self.embedding:
            self.bind(policy.cfg.model)
        offers = self.offers(policy.env, tasks)
        if not self.training:
            return self.evaluate(policy, tasks, group_size, offers, temperature, seed, score)
        added = {}

        def rollout(ts, n, s):
            return self.rollout(policy, ts, n, offers, temperature=temperature, seed=s)

        def retry(judged, attempt):
            """Each attempt's skill is verified (and stored); a failed one is retried
            with its execution feedback (Voyager §2.3)."""
            again = {}
            for k, e in judged:
                added[k], text = self.learn(policy.env, e)
                if text is not None:
                    again[k] = with_text(tasks[k[0]], text)
            return again

        got = retry_loop(tasks, group_size, attempts=self.max_retries + 1, seed=seed,
                         rollout=rollout, score=score, retry=retry)
        self.counts["voyager/retries"] = self.counts.get("voyager/retries", 0) + got.retried
        final = got.final
        for k, e in final.items():
            if got.taken[k] == self.max_retries + 1:   # the last attempt: no retry asked
                added[k], _ = self.learn(policy.env, e)
            e.env_metrics.update({
                "agent_tokens": got.tokens[k], "voyager_attempts": got.taken[k],
                "voyager_skill_added": int(added[k] is not None),
                "voyager_library_size": len(self.library)})
        out = list(final.values())
        self._count(out)
        return out

    def learn(self, env, episode) -> tuple[Optional[str], Optional[str]]:
        """(name of the skill stored, feedback for a retry): the episode's candidate
        skill, verified by replay on a fresh state of its task."""
        cand = (env.skill_of(episode.task, episode.calls) if isinstance(env, SkillWorld)
                else None)
        if cand is None:
            return None, None
        used = episode.env_metrics.get("voyager_skills", "")
        cand = dataclasses.replace(cand, uses=tuple(used.split(",")) if used else ())
        self.counts["voyager/candidates"] = self.counts.get("voyager/candidates", 0) + 1
        verdict = verify(env, episode.task, cand)
        if verdict.ok:
            self.counts["voyager/skills_added"] = \
                self.counts.get("voyager/skills_added", 0) + 1
            return self.library.add(cand, episode.task.id, skill_query(env, episode.task),
                                    self.step), None
        self.counts["voyager/verify_failed"] = self.counts.get("voyager/verify_failed", 0) + 1
        return None, (f"{RETRY_HEAD} Result: {verdict.feedback}\nIts program: "
                      f"{program_text(cand)}")[: self.feedback_chars]

    def _count(self, episodes) -> None:
        c = self.counts
        c["voyager/episodes"] = c.get("voyager/episodes", 0) + len(episodes)
        c["voyager/skills_used"] = c.get("voyager/skills_used", 0) + sum(
            e.env_metrics.get("voyager_skills_used", 0) for e in episodes)

    # --- the held-out stream ---------------------------------------------------------------
    def evaluate(self, policy, tasks, group_size, offers, temperature, seed, score):
        """One rollout per (task, sample) with the library's skills offered; nothing is
        learned. Records the held-out stream: solved = at least half the samples correct."""
        eps = self.rollout(policy, tasks, group_size, offers, temperature=temperature,
                           seed=seed)
        score(eps)
        by_task: dict[str, list[bool]] = {}
        for e in eps:
            by_task.setdefault(e.task.id, []).append(bool(e.correct))
        solved = {t: 2 * sum(v) >= len(v) for t, v in by_task.items()}
        decoding = "greedy" if temperature == 0 else "sampled"
        forgotten = self.library.record_eval(decoding, solved)
        self.library.set_meta(f"last_eval_{decoding}", {
            "heldout_solved": sum(solved.values()) / max(len(solved), 1),
            "forgotten": sum(forgotten.values())})
        for e in eps:
            e.env_metrics.update({"agent_tokens": e.response_tokens,
                                  "voyager_forgotten": int(forgotten[e.task.id]),
                                  "voyager_library_size": len(self.library)})
        return eps

    # --- the cell's hooks --------------------------------------------------------------------
    def step_metrics(self) -> dict:
        """This step's figures for metrics.jsonl (the counters are then reset)."""
        c, self.counts = self.counts, {}
        n = max(c.pop("voyager/episodes", 0), 1)
        row = {"voyager/library_size": float(len(self.library)),
               "voyager/skills_used": c.pop("voyager/skills_used", 0) / n,
               **{k: float(c.get(k, 0)) for k in ("voyager/skills_added",
                                                  "voyager/candidates",
                                                  "voyager/verify_failed",
                                                  "voyager/retries")}}
        last = self.library.meta("last_eval_sampled") or self.library.meta("last_eval_greedy")
        if last is not None:
            row["voyager/heldout_solved"] = float(last["heldout_solved"])
            row["voyager/forgotten"] = float(last["forgotten"])
        return row

    def experience(self, env, model_cfg=None) -> "LibraryExperience":
        self.bind(model_cfg)
        return LibraryExperience(self, env)

    def propose(self, env, tasks: list, rng) -> list:
        """The drawable tasks in training order (Voyager's automatic curriculum, §2.1):
        unsolved tasks whose description matches a skill's (best BM25 first), then the
        other unsolved ones, then the solved ones; ties in a random order."""
        keys = rng.random(len(tasks))
        solved = self.library.solved_task_ids()

        def rank(j):
            t = tasks[j]
            if t.id in solved:
                return (2, 0.0, keys[j])
            near = self.library.search(skill_query(env, t), 1) if len(self.library) else []
            return (0, near[0][1], keys[j]) if near else (1, 0.0, keys[j])
        return [tasks[j] for j in sorted(range(len(tasks)), key=rank)]


class LibraryExperience(Experience):
    """ablate.algos.curriculum's Experience for agent=voyager: the promotion curriculum
    (difficulty level), the library's task order (`propose`), the step's library figures
    in the metrics row, and the library saved and loaded with the curriculum."""

    def __init__(self, agent: Voyager, env):
        propose = (lambda tasks, rng: agent.propose(env, tasks, rng)) \
            if agent.curriculum is not None else None
        super().__init__(agent.curriculum, None, propose=propose)
        self.agent = agent

    def sample(self, tasks, n, step, rng):
        self.agent.step = step
        return super().sample(tasks, n, step, rng)

    def after_rollout(self, step, episodes, rewards, group_ids, row):
        out = super().after_rollout(step, episodes, rewards, group_ids, row)
        row.update(self.agent.step_metrics())
        return out

    def describe(self) -> dict:
        a = self.agent
        return {**super().describe(), "voyager": {
            "top_k": a.top_k, "max_retries": a.max_retries, "retrieval": "fts5 bm25" + (
                f" + {a.library.embedder.name} cosine, rrf k={a.library.fusion_k}"
                if a.library.embedder is not None else ""),
            "curriculum": "library proximity" + (" + promotion" if a.curriculum else "")}}

    def save(self, ckpt_dir, step: int) -> None:
        super().save(ckpt_dir, step)
        self.agent.library.save(ckpt_dir, step)

    def load(self, ckpt_dir, step: int) -> None:
        super().load(ckpt_dir, step)
        self.agent.library.load(ckpt_dir, step)
