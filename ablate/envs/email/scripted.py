"""The scripted baseline agent: search, read, follow hops, answer — through the real
ToolBox, with no learning.

It is three things at once:
  * the "no learning" baseline row of every table (`python -m ablate` evaluates it);
  * a test oracle (`ScriptedAgent.perfect()` solves every synthetic task);
  * the demonstrator whose trajectories warm-start the tiny model (`steps` are the
    (think, tool name, arguments, observation) sequence a demonstration renderer turns
    into chat text).

Like the published base model it is imperfect in the ways RL is meant to fix, with knobs:
`extra_keyword_prob` (adds a question word that the email lacks: strict AND gives zero
hits, then it backs off, costing a turn), `give_up_prob` (answers "I don't know": the
naive reward's avoidance trap), `misread_prob` (reads a lower-ranked hit first).

How it reads a question. Synthetic questions have fixed templates
(ablate.envs.email.synthetic): "What is the <attr> of project <P>?" or "Project <P> was <rel>
another project, which was then <rel2> ... . What is the <attr> of the last project?".
The hop plan is [(P, rel1), (next, rel2), ..., (last, attr)]; the next entity is taken
from the email read ("project <Q>" after the relation word). Other questions (EnronHop
files) fall back to generic keyword search: capitalised and rare content words first,
backing off to fewer keywords, reading the top hits, answering with the best-matching
sentence of the email read — a weak but honest baseline there.
"""
from __future__ import annotations

import random
import re
import time
from dataclasses import dataclass, field

from ablate.envs.email.data import Task
from ablate.envs.email.tools import ToolCall
from ablate.harness.chat import format_tool_call
from ablate.harness.episode import Episode, Turn

IDK = "I don't know"
SEARCH, READ, ANSWER = "search_inbox", "read_email", "return_final_answer"

_STOP = set("""a an the of to in on for and or but is was were be been by with at from as
which that this what who whom when where why how then last another second third fourth
project did does do it its their there these those into over than under about after
before any all""".split())
_Q1 = re.compile(r"^What is the (\w+) of project (\S+?)\?$")
_QN = re.compile(r"^Project (\S+) was (.+)\. What is the (\w+) of the last project\?$")
_REL = re.compile(r"(?:was|which was then) (\w+)")


@dataclass
class Step:
    """One assistant action of a demonstration and what the environment answered."""
    name: str
    arguments: dict
    observation: str
    think: str = ""


def parse_question(question: str):
    """(entity, [hop words]) for the synthetic templates, else None. Hop words are the
    relation keywords in order, then the attribute word."""
    q = question.strip()
    m = _Q1.match(q)
    if m:
        return m.group(2), [m.group(1)]
    m = _QN.match(q)
    if m:
        rels = _REL.findall("was " + m.group(2))
        return m.group(1), rels + [m.group(3)]
    return None


def _next_entity(body: str, entity: str, word: str) -> str | None:
    """In a link email, the project named after '<entity> ... <word> ... project X'."""
    m = re.search(rf"\b{re.escape(entity)}\b[^.\n]*?\b{re.escape(word)}\b[^.\n]*?"
                  r"project (\w+)", body)
    return m.group(1) if m else None


def _value(body: str, entity: str, attr: str) -> str | None:
    """In a fact email, V of '... <attr> ... project <entity> is V.'"""
    m = re.search(rf"\b{re.escape(attr)}\b[^.\n]*?\b{re.escape(entity)} is (\S+?)\.(?:\s|$)",
                  body)
    return m.group(1) if m else None


def _content_words(question: str) -> list[str]:
    words = re.findall(r"[A-Za-z0-9$][\w$.\-']*[\w]", question)
    out = []
    for i, w in enumerate(words):
        if w.lower() in _STOP or w in out:
            continue
        out.append(w)
    # capitalised (names) first, then longer words: the likeliest distinctive keywords
    return sorted(out, key=lambda w: (not w[:1].isupper(), -len(w)))


def _tool_text(name: str, arguments: dict, think: str = "") -> str:
    call = format_tool_call(name, arguments)
    return (f"<think>\n{think}\n</think>\n\n" if think else "") + call


@dataclass
class ScriptedAgent:
    extra_keyword_prob: float = 0.25     # add a question word the email lacks (0 hits)
    give_up_prob: float = 0.1            # answer "I don't know" at a random hop
    misread_prob: float = 0.1            # read a lower-ranked hit before the top one
    max_reads_per_hop: int = 3
    max_turns: int = 10
    think: bool = True                   # write short plans (thinking-mode demonstrations)

    @classmethod
    def perfect(cls, **kw) -> "ScriptedAgent":
        return cls(extra_keyword_prob=0.0, give_up_prob=0.0, misread_prob=0.0, **kw)

    def run(self, task: Task, toolbox, rng: random.Random) -> tuple[Episode, list[Step]]:
        t0 = time.perf_counter()
        ep = Episode(task=task, group=0, sample=0, max_turns=self.max_turns)
        steps: list[Step] = []

        def act(name: str, args: dict, think: str) -> ToolCall:
            call = toolbox.call(name, args)
            ep.turns.append(Turn(text=_tool_text(name, args, think if self.think else ""),
                                 completion_tokens=0, calls=[call]))
            steps.append(Step(name, args, call.observation, think if self.think else ""))
            return call

        def finish(answer: str, sources: list[str], think: str):
            act(ANSWER, {"answer": answer, "sources": sources}, think)
            ep.final_answer, ep.sources, ep.end_reason = answer, list(sources), "answer"

        plan = parse_question(task.question)
        give_up_at = None
        if rng.random() < self.give_up_prob:
            give_up_at = rng.randrange(len(plan[1]) if plan else 1)
        if plan is None:
            self._generic(task, act, finish, rng, give_up_at is not None)
        else:
            self._follow(task, plan, act, finish, rng, give_up_at)
        if ep.final_answer is None:
            ep.end_reason = "max_turns"
        ep.seconds = time.perf_counter() - t0
        return ep, steps

    # ------------------------------------------------------------------ policies
    def _follow(self, task, plan, act, finish, rng, give_up_at):
        entity, words = plan
        qwords = _content_words(task.question)
        sources: list[str] = []
        n = 0   # actions taken (each is one turn)
        for hop, word in enumerate(words):
            last = hop == len(words) - 1
            if give_up_at == hop:
                finish(IDK, [], f"I cannot find what {entity} leads to. I give up.")
                return
            kws = [entity, word]
            extras = [w for w in qwords if w not in kws]
            if extras and rng.random() < self.extra_keyword_prob:
                kws = kws + [rng.choice(extras)]
            found = None
            tried = []
            while found is None and n < self.max_turns - 1:
                think = (f"Search for {' '.join(kws)}." if hop == 0 else
                         f"Now {entity}: search for {' '.join(kws)}.")
                call = act(SEARCH, {"keywords": kws}, think)
                n += 1
                tried.append(kws)
                if call.hits:
                    order = list(call.hits)
                    if len(order) > 1 and rng.random() < self.misread_prob:
                        order.insert(0, order.pop(1))
                    for mid in order[:self.max_reads_per_hop]:
                        if n >= self.max_turns - 1:
                            break
                        rc = act(READ, {"message_id": mid}, f"Read {mid}.")
                        n += 1
                        if rc.read_id is None:
                            continue
                        got = (_value(rc.observation, entity, word) if last else
                               _next_entity(rc.observation, entity, word))
                        if got:
                            found = (got, rc.read_id)
                            break
                    if found is None and kws == [entity, word]:
                        break   # read the top hits without finding it: give up below
                # back off: drop the extra word first, then keep only the entity
                if found is None:
                    if len(kws) > 2:
                        kws = [entity, word]
                    elif len(kws) == 2 and not call.hits:
                        kws = [entity]
                    else:
                        break
                    if kws in tried:
                        break
            if found is None:
                if n < self.max_turns:
                    finish(IDK, sources, f"Nothing about {entity} {word}. I don't know.")
                return
            sources.append(found[1])
            if last:
                finish(found[0], sources, f"The {word} of {entity} is {found[0]}.")
                return
            entity = found[0]

    def _generic(self, task, act, finish, rng, give_up):
        """Any question: content-word search with back-off, read top hits, answer with the
        first email's best sentence (weak by design; the synthetic path is the oracle)."""
        words = _content_words(task.question)
        if give_up or not words:
            finish(IDK, [], "I don't know where to look.")
            return
        n_kw = min(3, len(words))
        if rng.random() < self.extra_keyword_prob:
            n_kw = min(len(words), n_kw + 1)
        n = 0
        while n_kw >= 1 and n < self.max_turns - 2:
            kws = words[:n_kw]
            call = act(SEARCH, {"keywords": kws}, f"Search for {' '.join(kws)}.")
            n += 1
            if call.hits:
                rc = act(READ, {"message_id": call.hits[0]}, f"Read {call.hits[0]}.")
                if rc.read_id:
                    body = rc.observation.split("\n\n", 1)[-1]
                    sents = [s.strip() for s in re.split(r"(?<=[.!?])\s+", body) if s.strip()]
                    qset = {w.lower() for w in words}
                    best = max(sents, key=lambda s: len(qset & set(s.lower().split())),
                               default="")
                    finish(best or IDK, [rc.read_id], "Answer from the email.")
                    return
                n += 1
            n_kw -= 1
        finish(IDK, [], "No results. I don't know.")


def evaluate(tasks, toolbox_for, agent: ScriptedAgent, judge, seed: int = 0):
    """Run `agent` on tasks; returns (episodes, {hops: accuracy}, overall accuracy).
    toolbox_for(task) makes a fresh ToolBox; judge(task, answer) -> bool."""
    rng = random.Random(seed)
    eps = []
    for t in tasks:
        ep, _ = agent.run(t, toolbox_for(t), rng)
        ep.correct = bool(ep.final_answer is not None and judge(t, ep.final_answer))
        eps.append(ep)
    by_hop: dict[int, list[bool]] = {}
    for e in eps:
        by_hop.setdefault(e.task.hops, []).append(bool(e.correct))
    acc = {h: sum(v) / len(v) for h, v in sorted(by_hop.items())}
    total = sum(bool(e.correct) for e in eps) / max(1, len(eps))
    return eps, acc, total
