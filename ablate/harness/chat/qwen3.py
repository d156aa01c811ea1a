"""Qwen3's chat template as the harness writes it by hand: the tiny model's conventions.

The prompt goes through the one chat-template layer (ChatConventions, the tokenizer's own
template, Qwen3's when it has none), so any model's template is honoured. The pieces
below it are Qwen3's template written out, for what must exist before a tokenizer does
(the tiny model's tokenizer is trained on observation_text) and for the tiny model's
supervised data; tests/harness/test_templates.py checks them against ChatConventions.

    render_prompt(tokenizer, task, tools_schema, mode_cfg, system_prompt=None)
        -> list[int]   system (+tools) + user message (task.prompt, the environment's
        text) + assistant header; instruct mode on a Qwen3 hybrid ends with the empty
        think block "<think>\\n\\n</think>\\n\\n".
    observation_ids(tokenizer, observations, mode_cfg, turn_closed=True) -> list[int]
        ids appended after a generated turn: "<|im_end|>" unless the turn generated it
        (turn_closed), "\\n", one user turn holding each observation as
        "\\n<tool_response>\\n…\\n</tool_response>", the next assistant header as the
        template writes it (generation_suffix: + empty think block in instruct mode).
    strip_thinking_ids(tokenizer, ids) -> list[int]  a turn's ids with its think block cut
        out (token level: the ids after </think> and its newlines are kept as generated).
    render_demonstration(tokenizer, task, steps, mode_cfg, tools_schema=None,
        system_prompt=None) -> (ids, loss_mask)                          [instruct mode]
    render_demonstration_segments(...) -> list[(ids, loss_mask)]   [any mode; thinking
        mode gives one segment per turn, as the rollout does]
        steps: [(assistant_text, observations_after_it), ...]; assistant_text is the
        turn's text without <|im_end|> (e.g. optional "<think>\\nplan\\n</think>\\n\\n" +
        format_tool_call(...)); loss mask 1 on the turn's ids and its closing <|im_end|>.
"""
from __future__ import annotations

from typing import Sequence

from ablate.harness.chat.calls import IM_END, IM_START, THINK_CLOSE
from ablate.harness.chat.conventions import ChatConventions
from ablate.models.tokenizer import QWEN3_CHAT_TEMPLATE

EMPTY_THINK = "<think>\n\n</think>\n\n"


def _thinking(mode_cfg) -> bool:
    return bool(getattr(mode_cfg, "enable_thinking", False))


def _encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def _template(tokenizer):
    return None if getattr(tokenizer, "chat_template", None) else QWEN3_CHAT_TEMPLATE


def conventions(tokenizer, mode_cfg) -> ChatConventions:
    """The tokenizer's own chat conventions (Qwen3's template when it has none)."""
    return ChatConventions.from_tokenizer(tokenizer, chat_template=_template(tokenizer),
                                          enable_thinking=_thinking(mode_cfg))


def render_prompt(tokenizer, task, tools_schema, mode_cfg,
                  system_prompt: str | None = None) -> list[int]:
    """The first prompt of an episode (see module docstring)."""
    return conventions(tokenizer, mode_cfg).prompt_ids(system_prompt, task.prompt,
                                                       tools_schema or ())


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

