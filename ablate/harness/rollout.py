"""The rollout engine: G episodes per task, all live episodes advancing together.

One turn = one batched `sampler.generate` over every episode still running, then each
episode's tool calls, then its next prompt. The records are token-exact (docs/architecture.md).
Every id sequence fed to the sampler comes from the model's own chat template through
ablate.harness.chat.ChatConventions (prompt, observation turns, generation header,
end-of-turn and stop ids, the tool-call syntax the calls are parsed and masked in):

* instruct mode: ONE Segment per episode, prompt + completion + observation ids + ...,
  each turn's prompt being the previous sequence (prefix extension); mask 1 and the
  sampler's logprobs only on generated ids (the closing end-of-turn token included).
* thinking mode: earlier turns' thinking is stripped from later prompts (Qwen3), so the
  turns no longer share a prefix: one Segment per turn (that turn's prompt + completion).

Harness knobs (HarnessConfig, all logged): max_turns, max new tokens per turn and per
episode, malformed calls (error observation and continue, or end; `max_malformed`
malformed calls tolerated), `parser` strict|lenient (ablate/harness/parser.py),
`predict` (world-model predictions, docs/rewards.md), `calls_per_turn` first|all,
action/answer/keyword masking
(keyword masking: search keywords from the question, the emails read and the search
results seen so far in the episode, at most `max_masked_keywords` per search). The final
answer ends the episode; calls and text after it in the same turn are ignored.

End reasons: "answer", "max_turns", "max_tokens" (a turn hit its token limit without a
stop token, or the episode budget is spent), "malformed", "max_context" (the model's
context is full: the next prompt, i.e. history + observation, would leave no room to
generate, or a turn was cut where prompt + completion reached the context length).
A turn cut by its token limit still has its complete calls executed and logged (it may
even answer), but the episode ends there: a cut turn has no well-defined continuation.

Context length: the model is never fed more than `sampler.max_context` tokens. Each
turn's max_new_tokens is capped so prompt + completion <= max_context; an observation
that would fill the context is not appended (the episode ends "max_context"), and an
episode whose first prompt already fills it ends before any generation, with no segment.

Cost: every turn's prompt extends the previous one (instruct), or shares it up to where
earlier thinking was stripped (thinking); samplers reuse the encoded prefix (HFSampler's
KV store, vLLM's prefix caching), so a turn encodes its observation and header, not the
history. The prefix shared by all first prompts (system prompt + tool schemas) is
announced once per call with `sampler.share_prefix`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Protocol, Sequence, runtime_checkable

from omegaconf import DictConfig, OmegaConf

from ablate.harness import chat, parser
from ablate.harness.episode import Episode, Segment, Turn, anchor_states
from ablate.harness.masking import (ActionMask, marker_positions, mask_context, strip_thinking,
                                    token_bytes)
from ablate.harness.chat import ChatConventions
from ablate.protocol.environment import (Environment, answer_from_text, examples as few_shot,
                                         prompt_tools, tool_names)
from ablate.protocol.task import ToolResult


@runtime_checkable
class Expands(Protocol):
    """A world whose one model call may run several calls, each logged with its own
    observation (agent=voyager's use_skill replays a skill: ablate/agents/voyager.py)."""

    def run_call(self, state: Any, name: Any, arguments: Any) -> list[ToolResult]: ...


def run_call(env: Environment, state: Any, name: Any, arguments: Any) -> list[ToolResult]:
    """The calls one model call runs: `env.call` alone unless the world Expands it."""
    if isinstance(env, Expands):
        return env.run_call(state, name, arguments)
    return [env.call(state, name, arguments)]


@dataclass
class _Live:
    ep: Episode
    state: Any                               # the environment's state of this episode
    context: list[int]                       # the next prompt (thinking: stripped history)
    seg: Segment | None = None               # instruct mode: the one running segment
    generated: int = 0
    malformed: int = 0
    done: bool = False
    results: list[ToolResult] = field(default_factory=list)
    t0: float = 0.0


def _mask_for(s: _Live, env: Environment, harness_cfg, mode_cfg, vocab,
              conv: ChatConventions, *, turn: int) -> ActionMask | None:
    """This turn's logits processor (None: nothing constrained); the world's
    mask_candidates is asked with the episode's `turn` (from 0) when it takes one."""
    think = getattr(mode_cfg, "max_think_tokens", None) if mode_cfg.enable_thinking else None
    if not harness_cfg.action_masking and not think:
        return None
    opened = conv.opens_think
    if not harness_cfg.action_masking:
        return ActionMask(vocab, max_think_tokens=think, think_open=opened)
    kw = bool(getattr(harness_cfg, "keyword_masking", False))
    ctx = mask_context(env, s.state, turn, answer_masking=harness_cfg.answer_masking,
                       keyword_masking=kw,
                       keyword_words=getattr(harness_cfg, "masked_keyword_words", 1))
    extra = dict(keywords=ctx["keywords"], max_keywords=harness_cfg.max_masked_keywords) \
        if kw and "keywords" in ctx else {}
    if getattr(harness_cfg, "predict", False):   # the tag after each call, its label
        extra["predict_labels"] = _labels(env)
        extra["predict_ends_turn"] = harness_cfg.calls_per_turn == "first"  # rest: ignored
    return ActionMask(vocab, tool_names=ctx.get("tool_names", list(tool_names(env))),
                      ids=ctx.get("ids"), answers=ctx.get("answers"),
                      grammar=ctx.get("grammar"), tails=ctx.get("tails"),
                      max_think_tokens=think, think_open=opened,
                      **extra, **conv.fmt.mask_spec())


def _labels(env: Environment) -> list[str]:
    """Every outcome label of the environment, in order (harness.predict)."""
    labels = {lab: None for m in parser.outcome_labels(env).values() for lab in m}
    if not labels:
        raise ValueError(f"harness.predict=true (reward.world_model.enable): env "
                         f"{env.name} defines no outcome_labels() to predict")
    return list(labels)


def _think_tokens(ids: Sequence[int], vocab, opened: bool = False) -> int:
    """Tokens of the turn's think block, its markers included (opened: the prompt
    already opened it, as thinking-only templates do). A marker that is no single token
    of the vocabulary is found in the turn's bytes (masking.marker_positions)."""
    ids = list(ids)
    opens = marker_positions(vocab, ids, chat.THINK_OPEN)
    closes = marker_positions(vocab, ids, chat.THINK_CLOSE)
    if opens:
        start = opens[0][0]
    elif opened or closes:
        start = 0
    else:
        return 0
    end = next((e for b, e in closes if b >= start), len(ids))
    return end - start


@dataclass
class _Run:
    """What every turn of one rollout call reads (set up once by `_setup`)."""
    env: Environment
    sampler: Any
    tokenizer: Any
    harness_cfg: Any
    mode_cfg: Any
    conv: ChatConventions
    vocab: Any
    system_prompt: str
    temperature: Any                 # one value, or one per sample index
    top_p: float
    predict: bool
    thinking: bool
    cap: int | None                  # the sampler's context length (None: unbounded)


def rollout(tasks: Sequence, *, group_size: int, sampler, tokenizer, env: Environment,
            harness_cfg, mode_cfg, max_turns: int, temperature: float, top_p: float = 1.0,
            seed: int = 0, system_prompt: str | None = None,
            model_cfg=None) -> list[Episode]:
    """Run `group_size` episodes for every task of `env` (tasks: its Tasks, or anything
    its reset takes that has a `.prompt`); returns them in (task, sample) order.
    `system_prompt` overrides the environment's; `model_cfg` (model.tool_format,
    model.chat_template; None: auto-detected from the tokenizer's own template) selects
    the chat conventions (ablate.harness.chat). `temperature` may be one value per sample
    index (a sequence of `group_size`; the sampler must take per-prompt temperatures)."""
    run = _setup(env, sampler, tokenizer, _plain(harness_cfg), _plain(mode_cfg), model_cfg,
                 system_prompt, temperature, top_p)
    states = _start(run, tasks, group_size, max_turns)
    for turn in range(max_turns):
        for s in states:
            if not s.done and run.cap is not None and len(s.context) >= run.cap:
                _end(s, "max_context")        # only a first prompt can be this long
                s.ep.segments = []
        live = [s for s in states if not s.done]
        if not live:
            break
        _turn(run, live, turn, max_turns, seed)
    return _finish(run, states)


def _setup(env, sampler, tokenizer, harness_cfg, mode_cfg, model_cfg, system_prompt,
           temperature, top_p) -> _Run:
    """The harness knobs checked, the system prompt (with the prediction instructions
    under harness.predict) and the model's chat conventions."""
    if system_prompt is None:
        system_prompt = env.system_prompt()
    if harness_cfg.calls_per_turn not in ("first", "all"):
        raise ValueError(f"harness.calls_per_turn={harness_cfg.calls_per_turn!r}")
    if harness_cfg.on_malformed not in ("continue", "end"):
        raise ValueError(f"harness.on_malformed={harness_cfg.on_malformed!r}")
    predict = bool(getattr(harness_cfg, "predict", False))
    if predict:
        _labels(env)
        system_prompt += "\n\n" + parser.prediction_instructions(parser.outcome_labels(env))
    conv = ChatConventions.from_config(tokenizer, model_cfg, mode_cfg)
    if predict and conv.fmt.name != "hermes":
        raise ValueError(f"harness.predict=true (reward.world_model.enable) needs the hermes "
                         f"tool-call format (<predict> follows </tool_call>); this model's "
                         f"is model.tool_format={conv.fmt.name!r}")
    return _Run(env, sampler, tokenizer, harness_cfg, mode_cfg, conv, token_bytes(tokenizer),
                system_prompt, temperature, top_p, predict, bool(mode_cfg.enable_thinking),
                getattr(sampler, "max_context", None))


def _start(run: _Run, tasks: Sequence, group_size: int, max_turns: int) -> list[_Live]:
    """One live episode per (task, sample) from its first prompt; the sampler's cache
    cleared and the prefix all first prompts share announced once."""
    examples = few_shot(run.env)   # few-shot (question, reply) turns; usually none
    prompts = [run.conv.prompt_ids(run.system_prompt, task.prompt, prompt_tools(run.env),
                                   examples) for task in tasks]
    sampler = run.sampler
    share = getattr(sampler, "share_prefix", None)   # optional (a duck-typed sampler)
    clear = getattr(sampler, "clear_cache", None)
    if clear is not None:   # every rollout starts from the same sampler state, whatever ran
        clear()             # before (an evaluation, a resume): keys and values, logprobs
    shared_cost = 0.0       # and encoded-token counts do not depend on the history
    if prompts and share is not None:
        before = _encoded(sampler)
        share(prompts[0][:_common_prefix(prompts)])
        shared_cost = (_encoded(sampler) - before) / (len(prompts) * group_size)
    states = []
    for g, (task, prompt) in enumerate(zip(tasks, prompts)):
        for k in range(group_size):
            ep = Episode(task=task, group=g, sample=k, max_turns=max_turns)
            ep.encoded_tokens = shared_cost
            s = _Live(ep=ep, state=run.env.reset(task), context=list(prompt),
                      t0=time.perf_counter())
            if not run.thinking:
                s.seg = Segment(ids=list(prompt), mask=[0] * len(prompt),
                                logprobs=[0.0] * len(prompt), allowed={})
                ep.segments.append(s.seg)
            states.append(s)
    return states


def _turn(run: _Run, live: list[_Live], turn: int, max_turns: int, seed: int) -> None:
    """One batched generation over the live episodes, then each one's calls, end rules
    and next prompt."""
    h, temp = run.harness_cfg, run.temperature
    masks = [_mask_for(s, run.env, h, run.mode_cfg, run.vocab, run.conv, turn=turn)
             for s in live]
    outs = run.sampler.generate(
        [s.context for s in live], max_new_tokens=[_budget(s, h, run.cap) for s in live],
        temperature=[temp[s.ep.sample] for s in live] if isinstance(temp, (list, tuple))
        else temp, top_p=run.top_p, stop_token_ids=run.conv.stop_ids,
        logits_processors=masks if any(m is not None for m in masks) else None,
        seed=(int(seed) * 1_000_003 + turn) % (2 ** 63))
    for s, out, mask in zip(live, outs, masks):
        ids, offset = list(out.ids), len(s.context)
        _record(run, s, ids, out, mask.replay(ids) if mask is not None else {})
        text = run.tokenizer.decode(ids, skip_special_tokens=False)
        t = Turn(text=text, completion_tokens=len(ids),
                 think_tokens=_think_tokens(ids, run.vocab, run.conv.opens_think))
        s.ep.turns.append(t)
        _act(s, run.env, t, text, h, run.conv)
        if not s.done:
            full = run.cap is not None and offset + len(ids) >= run.cap
            if out.finish_reason != "stop" and full:
                _end(s, "max_context")
            elif out.finish_reason != "stop" or s.generated >= h.max_tokens_per_episode:
                _end(s, "max_tokens")
            elif turn + 1 >= max_turns:
                _end(s, "max_turns")
        if not s.done:
            _observe(run, s, ids, [c.observation for c in t.calls], offset)


def _record(run: _Run, s: _Live, ids: list[int], out, allowed: dict) -> None:
    """The turn's generated ids into the training record: a segment of its own
    (thinking) or the running one (instruct), with the sampler's logprobs and masks."""
    offset = len(s.context)
    if run.thinking:
        s.ep.segments.append(Segment(
            ids=s.context + ids, mask=[0] * offset + [1] * len(ids),
            logprobs=[0.0] * offset + list(out.logprobs),
            allowed={offset + p: a for p, a in allowed.items()}))
    else:
        s.seg.ids += ids
        s.seg.mask += [1] * len(ids)
        s.seg.logprobs += list(out.logprobs)
        s.seg.allowed.update({offset + p: a for p, a in allowed.items()})
    s.generated += len(ids)
    s.ep.encoded_tokens += out.extra.get("encoded_tokens", 0)


def _observe(run: _Run, s: _Live, ids: list[int], observations: list[str],
             offset: int) -> None:
    """The next prompt: the turn's close and the observations appended (thinking: to
    the history without the turn's thinking); the episode ends where they do not fit."""
    obs = run.conv.closing_ids(ids) + run.conv.observation_ids(observations)
    head = strip_thinking(run.tokenizer, run.vocab, ids) if run.thinking else ids
    if run.cap is not None and offset + len(head) + len(obs) >= run.cap:
        _end(s, "max_context")    # no room left to answer the observation
    elif run.thinking:
        s.context = s.context + head + obs
    else:
        s.seg.ids += obs
        s.seg.mask += [0] * len(obs)
        s.seg.logprobs += [0.0] * len(obs)
        s.context = list(s.seg.ids)


def _finish(run: _Run, states: list[_Live]) -> list[Episode]:
    """Every episode closed: its end reason, behaviour metrics, final state and anchor
    states; the sampler's per-episode caches released."""
    release = getattr(run.sampler, "release_episodes", None)
    if release is not None:
        release()                             # every episode is over: free their caches
    for s in states:
        if not s.done:
            _end(s, "max_turns")
        s.ep.env_metrics = {**run.env.behaviour(s.ep.task, s.results),
                            **parser.episode_metrics(s.ep, run.predict)}
        s.ep.state = s.state
        s.ep.anchors = anchor_states(run.env, s.ep)
        if s.ep.segments and not any(seg.allowed for seg in s.ep.segments):
            for seg in s.ep.segments:
                seg.allowed = None
    return [s.ep for s in states]


def _plain(cfg):
    """A DictConfig's resolved values as attributes: the harness reads its knobs for every
    live episode every turn, and OmegaConf's attribute access cost ~0.3 ms a read."""
    if isinstance(cfg, DictConfig):
        return SimpleNamespace(**OmegaConf.to_container(cfg, resolve=True))
    return cfg


def _encoded(sampler) -> int:
    return getattr(sampler, "stats", {}).get("encoded_tokens", 0)


def _common_prefix(seqs: Sequence[Sequence[int]]) -> int:
    """Length of the longest prefix all sequences share."""
    first, n = seqs[0], min(len(q) for q in seqs)
    for q in seqs[1:]:
        i = 0
        while i < n and q[i] == first[i]:
            i += 1
        n = i
    return n


def _budget(s: _Live, harness_cfg, cap: int | None) -> int:
    """This turn's max_new_tokens: per-turn and per-episode limits, and the room left
    in the model's context (prompt + completion <= cap)."""
    n = min(harness_cfg.max_new_tokens_per_turn,
            harness_cfg.max_tokens_per_episode - s.generated)
    return n if cap is None else min(n, cap - len(s.context))


def _end(s: _Live, reason: str) -> None:
    s.done = True
    s.ep.end_reason = reason
    s.ep.seconds = time.perf_counter() - s.t0


def _act(s: _Live, env: Environment, turn: Turn, text: str, harness_cfg,
         conv: ChatConventions) -> None:
    """Parse the turn's calls (the model's tool-call format), run them, apply the
    final-answer and malformed rules."""
    _, rest = chat.split_thinking(text)
    for tok in (conv.end_of_turn, chat.IM_END, chat.ENDOFTEXT):
        rest = rest.replace(tok, "")
    predict = bool(getattr(harness_cfg, "predict", False))
    if conv.fmt.name == "hermes":   # strict|lenient, predictions: ablate/harness/parser.py
        parsed = parser.parse_actions(rest, getattr(harness_cfg, "parser", "strict"), predict)
    else:                           # the model's own syntax: ablate/harness/chat/conventions.py
        parsed = [parser.Action(pc, 0, 0) for pc in conv.parse_calls(rest)]
    if all(a.call.error is not None for a in parsed):   # no call: maybe a text answer
        args = answer_from_text(env, rest)
        if args is not None:
            parsed = [parser.Action(parser.ParsedCall(env.answer_tool, args, None, rest),
                                    0, len(rest))]
    if harness_cfg.calls_per_turn == "first":
        parsed = parsed[:1]
    bad = 0
    for act in parsed:
        pc = act.call
        if pc.error is not None:
            rs = [ToolResult(name=pc.name, arguments=None, observation=pc.error,
                             error=pc.error)]
        else:   # one call, or the calls a macro replays (Expands)
            rs = run_call(env, s.state, pc.name, pc.arguments)
        for r in rs:
            parser.annotate(r, act, predict, env, s.state)
            turn.calls.append(r)
            s.results.append(r)
            if r.error is not None:
                bad += 1
            elif r.done:
                s.ep.final_answer = r.answer if r.answer is not None else ""
                s.ep.sources = [str(x) for x in r.extra.get("sources", [])]
                _end(s, "answer")
                return                        # calls and text after the answer: ignored
    s.malformed += bad
    if bad and (harness_cfg.on_malformed == "end" or s.malformed > harness_cfg.max_malformed):
        _end(s, "malformed")
