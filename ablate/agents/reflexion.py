"""Reflexion: verbal self-reflection kept in an episodic memory (Shinn et al., 2023,
"Reflexion: Language Agents with Verbal Reinforcement Learning", arXiv:2303.11366, §3).

For every (task, sample): attempt 1 is the plain rollout (the same call as agent=react,
so success@1 is ReAct's accuracy at the same seed). After a failed attempt (the judge says
wrong, or no answer) and while attempts remain, the policy itself writes a short
reflection: a generation, with the sampler and temperature of the attempts, from a prompt
holding the task, the end of the failed attempt's transcript and its outcome (the binary
feedback of §3). The reflection is stored in the (task, sample)'s memory, which keeps the
latest `memory_size` (Ω) of them, and the next attempt's question is the memory followed by
the original question. The agent's episode for the (task, sample) is its last attempt;
`reflexion_solved_at` (0 = never) gives eval/reflexion_success@k.

Training on these episodes (agent.train=true) uses them as sampled: the memory stays in
the prompt (mask 0), so ids and log-probabilities are exactly what the sampler produced
and any algorithm can use them. Removing the memory would make the log-probabilities
those of another context (as STaR's hint, ablate/algos/hints.py); this is the documented
choice (docs/agents.md). Reflection tokens are counted in `agent_tokens` but are not
trained on.
"""
from __future__ import annotations

import dataclasses

from ablate.core.seeding import derived_seed
from ablate.agents.base import Agent, conventions, run_rollout, stop_ids
from ablate.agents.registry import AGENTS
from ablate.agents.retry import retry_loop
from ablate.harness import chat

REFLECTION_SYSTEM = ("You review a failed attempt of an agent that used tools to "
                     "answer a question.")
REFLECTION_ASK = ("In at most three sentences, say why the attempt failed and what to do "
                  "differently next time. Do not call tools.")
MEMORY_HEAD = "Reflections on your earlier attempts at this question:"


def with_memory(task, memory: list[str]):
    """The task (ablate.protocol.task.Task) whose prompt starts with the memory's
    reflections."""
    if not memory:
        return task
    block = MEMORY_HEAD + "\n" + "\n".join(f"- {m}" for m in memory) + "\n\n"
    return dataclasses.replace(task, prompt=block + task.prompt)


def visible(text: str, end_of_turn: str = "") -> str:
    """A completion without its thinking and end tokens (the model's `end_of_turn`, and
    ChatML's), whitespace collapsed."""
    _, text = chat.split_thinking(text)
    for tok in filter(None, (end_of_turn, chat.IM_END, chat.ENDOFTEXT)):
        text = text.replace(tok, "")
    return " ".join(text.split())


def transcript(episode, limit: int, end_of_turn: str = "") -> str:
    """The attempt as text: each turn's visible text and its tool results, its last
    `limit` characters."""
    lines = []
    for t in episode.turns:
        lines.append(f"Assistant: {visible(t.text, end_of_turn)}")
        lines += [f"Result: {c.observation[:300]}" for c in t.calls]
    return "\n".join(lines)[-limit:] if limit else ""


def episode_prompt(policy, episode, system: str, ask: str, limit: int = 1500) -> list[int]:
    """A prompt showing the policy one of its episodes (the task, the end of the
    transcript, the final answer) and asking `ask` (a reflection, a rating), through the
    policy's own chat template (the conventions its rollouts use)."""
    conv = conventions(policy)
    answer = episode.final_answer if episode.final_answer is not None else "(none)"
    user = (f"Question:\n{episode.task.prompt}\n\nThe attempt:\n"
            f"{transcript(episode, limit, conv.end_of_turn)}\n\nFinal answer: {answer}"
            f"\n\n{ask}")
    return conv.prompt_ids(system, user)


def outcome(episode) -> str:
    if episode.final_answer is not None and episode.answered:
        return f"the answer {episode.final_answer!r} was judged wrong."
    return f"no answer was given (the attempt ended: {episode.end_reason or 'unknown'})."


@AGENTS.register("reflexion")
class Reflexion(Agent):
    name = "reflexion"

    def __init__(self, *, max_attempts: int = 3, memory_size: int = 1,
                 max_reflection_tokens: int = 64, transcript_chars: int = 1500):
        self.max_attempts, self.memory_size = int(max_attempts), int(memory_size)
        self.max_reflection_tokens = int(max_reflection_tokens)
        self.transcript_chars = int(transcript_chars)

    @classmethod
    def from_config(cls, agent_cfg) -> "Reflexion":
        r = agent_cfg.reflexion
        return cls(max_attempts=r.max_attempts, memory_size=r.memory_size,
                   max_reflection_tokens=r.max_reflection_tokens,
                   transcript_chars=r.transcript_chars)

    def act(self, policy, tasks, group_size, *, temperature, seed, score):
        memory, solved = {}, {}

        def rollout(ts, n, s):
            return run_rollout(policy, ts, n, temperature=temperature, seed=s)

        def retry(judged, attempt):
            """The failed attempts' reflections join their slot's memory (Ω newest)."""
            for k, e in judged:
                if e.correct:
                    solved[k] = attempt + 1
            failed = [(k, e) for k, e in judged if not e.correct]
            if not failed:
                return {}
            texts, spent = self.reflect(policy, [e for _, e in failed], temperature,
                                        derived_seed(seed, attempt + 1, 1))
            for (k, _), text, n in zip(failed, texts, spent):
                kept = memory.get(k, []) + [text] if text else memory.get(k, [])
                memory[k] = kept[-self.memory_size:]
                out_tokens[k] = out_tokens.get(k, 0) + n
            return {k: with_memory(tasks[k[0]], memory[k]) for k, _ in failed}

        out_tokens: dict = {}
        got = retry_loop(tasks, group_size, attempts=self.max_attempts, seed=seed,
                         rollout=rollout, score=score, retry=retry, retry_seed_offset=1)
        for k, e in got.final.items():
            if e.correct:
                solved.setdefault(k, got.taken[k])
            e.env_metrics.update({
                "agent_tokens": got.tokens[k] + out_tokens.get(k, 0),
                "reflexion_solved_at": solved.get(k, 0),
                "reflexion_max_attempts": self.max_attempts})
        return list(got.final.values())

    def reflect(self, policy, episodes, temperature, seed) -> tuple[list[str], list[int]]:
        """One batched generation: a reflection per failed episode (text, tokens)."""
        tok, sampler = policy.tokenizer, policy.sampler
        cap = getattr(sampler, "max_context", None)
        prompts, budgets = [], []
        for e in episodes:
            ids, limit = self.prompt(policy, e, self.transcript_chars), self.transcript_chars
            while cap is not None and len(ids) + self.max_reflection_tokens > cap and limit:
                limit //= 2                     # a shorter transcript until it fits
                ids = self.prompt(policy, e, limit)
            prompts.append(ids)
            budgets.append(max(0, min(self.max_reflection_tokens,
                                      (cap - len(ids)) if cap else self.max_reflection_tokens)))
        outs = sampler.generate(prompts, max_new_tokens=budgets, temperature=temperature,
                                top_p=policy.cfg.sampler.top_p, stop_token_ids=stop_ids(policy),
                                seed=seed)
        eot = conventions(policy).end_of_turn
        texts = [visible(tok.decode(list(o.ids), skip_special_tokens=False), eot)
                 for o in outs]
        return texts, [len(o.ids) for o in outs]

    def prompt(self, policy, episode, limit: int) -> list[int]:
        return episode_prompt(policy, episode, REFLECTION_SYSTEM,
                              f"Outcome: {outcome(episode)}\n\n{REFLECTION_ASK}", limit)
