"""Qwen3 chat conventions of the harness: prompt, observations, tool-call text, parsing.

Every id sequence the rollout engine feeds the sampler is built here, and so is every
supervised demonstration, so that SFT data and RL episodes are token-identical.

API
---
    render_prompt(tokenizer, task, tools_schema, mode_cfg, system_prompt=None)
        -> list[int]   system (+tools) + user message (task.prompt, the environment's
        text) + assistant header, via the
        tokenizer's own chat template (Qwen3's when it has none); instruct mode on a Qwen3
        hybrid ends with the empty think block "<think>\\n\\n</think>\\n\\n".
    observation_ids(tokenizer, observations, mode_cfg, turn_closed=True) -> list[int]
        ids appended after a generated turn: "<|im_end|>" unless the turn generated it
        (turn_closed), "\\n", one user turn holding each observation as
        "\\n<tool_response>\\n…\\n</tool_response>", the next assistant header as the
        template writes it (generation_suffix: + empty think block in instruct mode).
    format_tool_call(name, arguments) -> str
        '<tool_call>\\n{"name": …, "arguments": {…}}\\n</tool_call>' (json.dumps spacing,
        as Qwen3's template's tojson); parse_tool_calls accepts exactly this.
    parse_tool_calls(text) -> list[ParsedCall]   never raises; at least one item; an
        item has error set for: no call at all, unterminated block, broken JSON, not an
        object, missing/empty name, arguments not an object.
    split_thinking(text) -> (think, rest)
    strip_thinking_ids(tokenizer, ids) -> list[int]  a turn's ids with its think block cut
        out (token level: the ids after </think> and its newlines are kept as generated).
    render_demonstration(tokenizer, task, steps, mode_cfg, tools_schema=None,
        system_prompt=None) -> (ids, loss_mask)                          [instruct mode]
    render_demonstration_segments(...) -> list[(ids, loss_mask)]   [any mode; thinking
        mode gives one segment per turn, as the rollout does]
        steps: [(assistant_text, observations_after_it), ...]; assistant_text is the
        turn's text without <|im_end|> (e.g. optional "<think>\\nplan\\n</think>\\n\\n" +
        format_tool_call(...)); loss mask 1 on the turn's ids and its closing <|im_end|>.
    render_episode_text(episode, reward_components=None) -> str   readable trajectory.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Sequence

from ablate.models.tokenizer import QWEN3_CHAT_TEMPLATE

IM_START, IM_END, ENDOFTEXT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
EMPTY_THINK = "<think>\n\n</think>\n\n"


def _thinking(mode_cfg) -> bool:
    return bool(getattr(mode_cfg, "enable_thinking", False))


def _encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def _template(tokenizer):
    return None if getattr(tokenizer, "chat_template", None) else QWEN3_CHAT_TEMPLATE


def render_prompt(tokenizer, task, tools_schema, mode_cfg,
                  system_prompt: str | None = None) -> list[int]:
    """The first prompt of an episode (see module docstring)."""
    messages = ([{"role": "system", "content": system_prompt}] if system_prompt else [])
    messages.append({"role": "user", "content": task.prompt})
    text = tokenizer.apply_chat_template(
        messages, tools=list(tools_schema) if tools_schema else None, tokenize=False,
        add_generation_prompt=True, enable_thinking=_thinking(mode_cfg),
        chat_template=_template(tokenizer))
    return _encode(tokenizer, text)


_SUFFIX_CACHE: dict = {}


def generation_suffix(tokenizer, mode_cfg) -> str:
    """What the model's template puts after "<|im_start|>assistant\n" in a generation
    prompt: the empty think block for Qwen3 hybrids with enable_thinking=False, "" for
    thinking (or for instruct-only models such as Qwen3-*-Instruct-2507), "<think>\n"
    for thinking-only models (Qwen3-*-Thinking-2507). Later turns use the same header."""
    key = (getattr(tokenizer, "chat_template", None) or QWEN3_CHAT_TEMPLATE,
           _thinking(mode_cfg))
    if key not in _SUFFIX_CACHE:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": "x"}], tokenize=False, add_generation_prompt=True,
            enable_thinking=_thinking(mode_cfg), chat_template=_template(tokenizer))
        head = IM_START + "assistant\n"
        _SUFFIX_CACHE[key] = text[text.rfind(head) + len(head):] if head in text else ""
    return _SUFFIX_CACHE[key]


def observation_text(observations: Sequence[str], header_suffix="",
                     turn_closed: bool = True) -> str:
    """The text of observation_ids. header_suffix: the generation suffix (str), or a
    mode config (Qwen3 hybrid convention: empty think block unless thinking), or None."""
    if header_suffix is None:
        header_suffix = ""
    elif not isinstance(header_suffix, str):
        header_suffix = "" if _thinking(header_suffix) else EMPTY_THINK
    # Qwen3 renders consecutive tool messages as ONE user turn of tool_response blocks.
    parts = ["" if turn_closed else IM_END, "\n", IM_START, "user"]
    for obs in observations:
        parts.append(f"\n<tool_response>\n{obs}\n</tool_response>")
    parts += [IM_END, "\n", IM_START, "assistant\n", header_suffix]
    return "".join(parts)


def observation_ids(tokenizer, observations: Sequence[str], mode_cfg,
                    turn_closed: bool = True) -> list[int]:
    return _encode(tokenizer, observation_text(
        observations, generation_suffix(tokenizer, mode_cfg), turn_closed))


# ---------------------------------------------------------------- tool calls
@dataclass
class ParsedCall:
    name: str                    # "" when no name could be read
    arguments: dict | None       # None when malformed
    error: str | None = None     # None: well-formed (the tool may still reject values)
    raw: str = ""                # the text between the tags


def format_tool_call(name: str, arguments: dict) -> str:
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"{CALL_OPEN}\n{body}\n{CALL_CLOSE}"


def _call_blocks(text: str):
    """(body, closed) of each <tool_call> block, left to right: a block runs from an
    opening tag to the first closing tag after it. One forward pass with str.find, so
    the cost is linear in len(text) (a lazy regex rescans the tail after every unclosed
    opening tag: quadratic on text full of them)."""
    pos = 0
    while (start := text.find(CALL_OPEN, pos)) >= 0:
        body = start + len(CALL_OPEN)
        end = text.find(CALL_CLOSE, body)
        if end < 0:
            yield text[body:], False
            return
        yield text[body:end], True
        pos = end + len(CALL_CLOSE)


def _parse_one(raw: str) -> ParsedCall:
    body = raw.strip()
    try:
        obj = json.loads(body)
    except (json.JSONDecodeError, RecursionError) as exc:
        msg = exc.msg if isinstance(exc, json.JSONDecodeError) else "too deeply nested"
        return ParsedCall("", None, f"Error: the tool call is not valid JSON ({msg}). "
                                    'Write {"name": ..., "arguments": {...}}.', raw)
    if not isinstance(obj, dict):
        return ParsedCall("", None, "Error: the tool call must be a JSON object "
                                    '{"name": ..., "arguments": {...}}.', raw)
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return ParsedCall("", None, 'Error: the tool call has no "name".', raw)
    args = obj.get("arguments", obj.get("parameters"))
    if isinstance(args, str):            # OpenAI style: arguments as a JSON string
        try:
            args = json.loads(args)
        except (json.JSONDecodeError, RecursionError):
            pass
    if not isinstance(args, dict):
        return ParsedCall(name, None, f'Error: the "arguments" of {name} must be a JSON '
                                      "object.", raw)
    return ParsedCall(name, args, None, raw)


def parse_tool_calls(text: str) -> list[ParsedCall]:
    """All <tool_call> blocks of `text`, in order. Never raises, never returns [];
    linear time in len(text)."""
    try:
        if not isinstance(text, str):
            text = "" if text is None else str(text)
        calls = []
        for body, closed in _call_blocks(text):
            if closed:
                calls.append(_parse_one(body))
            else:                    # an opened block that never closed
                calls.append(ParsedCall("", None, "Error: <tool_call> was not closed with "
                                                  "</tool_call>.", body))
        if not calls:
            calls.append(ParsedCall("", None, "Error: no tool call found. Call a tool as "
                                              '<tool_call>\n{"name": ..., "arguments": '
                                              "{...}}\n</tool_call>.", text))
        return calls
    except Exception as exc:         # defensive: the harness must never die on text
        return [ParsedCall("", None, f"Error: unreadable tool call ({type(exc).__name__}).",
                           str(text)[:1000])]


def split_thinking(text: str) -> tuple[str, str]:
    """(think, rest): Qwen3's split at the last </think>; an unclosed <think> is all
    thinking; no think block: ("", text)."""
    if THINK_CLOSE in text:
        head, rest = text.rsplit(THINK_CLOSE, 1)
        think = head.split(THINK_OPEN)[-1].strip("\n")
        return think, rest.lstrip("\n")
    if THINK_OPEN in text:
        return text.split(THINK_OPEN, 1)[1].strip("\n"), ""
    return "", text


def strip_thinking_ids(tokenizer, ids: Sequence[int]) -> list[int]:
    """A turn's ids as later prompts show it: everything up to </think> and the newlines
    after it removed, the rest kept as generated. Only when a generated token mixes the
    newline with content is the remainder re-encoded (it is context, never trained)."""
    close = tokenizer.convert_tokens_to_ids(THINK_CLOSE)
    ids = list(ids)
    if close not in ids:
        return ids
    last = len(ids) - 1 - ids[::-1].index(close)
    rest = ids[last + 1:]
    i = 0
    while i < len(rest):
        piece = tokenizer.decode([rest[i]])
        if piece.strip("\n") == "":
            i += 1
            continue
        if piece.startswith("\n"):
            specials = set(tokenizer.all_special_ids)
            end = len(rest)
            while end > i and rest[end - 1] in specials:   # keep <|im_end|> as its id
                end -= 1
            body = tokenizer.decode(rest[i:end]).lstrip("\n")
            return _encode(tokenizer, body) + rest[end:]
        break
    return rest[i:]


# ---------------------------------------------------------------- demonstrations
def _turn_ids(tokenizer, text: str) -> list[int]:
    eos = tokenizer.convert_tokens_to_ids(IM_END)
    return _encode(tokenizer, text) + [eos]


def render_demonstration_segments(tokenizer, task, steps, mode_cfg, tools_schema=None,
                                  system_prompt: str | None = None):
    """Training sequences of a scripted episode, built as the rollout engine builds them
    (see module docstring; pass the environment's tool schemas and system prompt).
    Returns [(ids, loss_mask), ...]."""
    prompt = render_prompt(tokenizer, task, tools_schema, mode_cfg, system_prompt)
    steps = [(text, list(obs)) for text, obs in steps]
    if not _thinking(mode_cfg):
        ids, mask = list(prompt), [0] * len(prompt)
        for k, (text, obs) in enumerate(steps):
            turn = _turn_ids(tokenizer, text)
            ids += turn
            mask += [1] * len(turn)
            if obs and k < len(steps) - 1:
                o = observation_ids(tokenizer, obs, mode_cfg)
                ids += o
                mask += [0] * len(o)
        return [(ids, mask)]
    segments, context = [], list(prompt)
    for k, (text, obs) in enumerate(steps):
        turn = _turn_ids(tokenizer, text)
        segments.append((context + turn, [0] * len(context) + [1] * len(turn)))
        if k < len(steps) - 1:
            context = context + strip_thinking_ids(tokenizer, turn) + \
                observation_ids(tokenizer, obs, mode_cfg)
    return segments


def render_demonstration(tokenizer, task, steps, mode_cfg, tools_schema=None,
                         system_prompt: str | None = None):
    """One SFT example (ids, loss_mask) in instruct mode. In thinking mode an episode is
    one sequence per turn (earlier thinking is stripped from later prompts): use
    render_demonstration_segments, which this points to."""
    segs = render_demonstration_segments(tokenizer, task, steps, mode_cfg, tools_schema,
                                         system_prompt)
    if len(segs) != 1:
        raise ValueError("thinking-mode demonstrations have one sequence per turn; use "
                         "ablate.harness.chat.render_demonstration_segments")
    return segs[0]


# ---------------------------------------------------------------- readable episodes
def _short(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _info(extra: dict) -> str:
    """An environment's per-call facts in one line (lists as their first items)."""
    out = []
    for k, v in extra.items():
        if isinstance(v, (list, tuple)):
            v = "[" + ", ".join(map(str, v[:5])) + (", …" if len(v) > 5 else "") + "]"
        out.append(f"{k}={v}")
    return _short(" ".join(out), 200)


def render_episode_text(episode, reward_components: dict | None = None,
                        obs_chars: int = 160) -> str:
    """A compact, readable trajectory: the task, each turn's thinking and calls (with
    what the environment answered, errors), the answer against the gold, and the reward
    components."""
    t = episode.task
    meta = " ".join(f"{k}={v}" for k, v in getattr(t, "metadata", {}).items())
    lines = [f"=== task {t.id} ({meta}) group={episode.group} sample={episode.sample}",
             f"Q: {_short(t.prompt, 400)}", f"gold: {t.answer}"]
    for i, turn in enumerate(episode.turns, 1):
        think, _ = split_thinking(turn.text)
        head = f"-- turn {i}: {turn.completion_tokens} tokens"
        if turn.think_tokens:
            head += f" ({turn.think_tokens} thinking)"
        lines.append(head)
        if think:
            lines.append(f"   think: {_short(think, 200)}")
        if not turn.calls:
            lines.append(f"   text: {_short(turn.text, 200)}")
        for c in turn.calls:
            args = json.dumps(c.arguments, ensure_ascii=False) if c.arguments is not None \
                else "(unparsed)"
            lines.append(f"   call {c.name or '?'} {_short(args, 200)}")
            if c.error:
                lines.append(f"     ERROR {_short(c.error, obs_chars)}")
            else:
                changed = " [state changed]" if c.state_changed else ""
                lines.append(f"     ->{changed} {_short(c.observation, obs_chars)}")
                if c.extra:
                    lines.append(f"     info {_info(c.extra)}")
    verdict = {True: "CORRECT", False: "WRONG", None: "unjudged"}[episode.correct]
    lines.append(f"answer: {episode.final_answer!r} sources={episode.sources} "
                 f"[{verdict}] end={episode.end_reason} turns={episode.num_turns}")
    if reward_components:
        comp = ", ".join(f"{k}={v:.3g}" if isinstance(v, (int, float)) else f"{k}={v}"
                         for k, v in reward_components.items())
        lines.append(f"reward: {comp}")
    return "\n".join(lines)
