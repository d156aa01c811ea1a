"""Chat conventions read from a model's own chat template: any template, Qwen3's included.

The rollout builds each episode incrementally: the prompt, then per turn the generated
ids (closed by the model's end-of-turn token), then an observation piece that ends with
the next generation header. Every piece here is rendered by the model's chat template
(`tokenizer.apply_chat_template`) on a conversation whose assistant turns are sentinels,
and cut at those sentinels, so nothing assumes ChatML or Qwen3. `check_incremental`
verifies the pieces token-exactly against one render of the whole conversation.

    ChatConventions.from_tokenizer(tokenizer, tool_format="auto", chat_template=None,
                                   enable_thinking=False)
    ChatConventions.from_config(tokenizer, model_cfg, mode_cfg)   the same, from a cell config
        .prompt_ids(system, user, tools, examples=()) -> list[int]   ends with the
                                                           generation header; examples:
                                                           (question, reply) pairs as
                                                           earlier turns (few-shot)
        .observation_ids(observations) -> list[int]        after a closed turn; ends with
                                                           the next generation header
        .header_text                                       the generation header
        .header_suffix                                     its part the template drops
                                                           from past turns (Qwen3 hybrid,
                                                           instruct: the empty think block)
        .end_of_turn_id                                    the id closing a turn
        .closing_ids(generated) -> [] | [end_of_turn_id]   what a turn stopped by another
                                                           stop id still needs
        .stop_ids                                          end of turn, <|endoftext|>, eos
        .think_ids / .opens_think                          think markers: their ids (None:
                                                           plain BPE text), header opens one
        .format_call(name, arguments) / .parse_calls(text) the tool-call syntax
        .fmt.mask_spec()                                   the action mask's view of it
    marker_id(tokenizer, text) -> int | None   `text` as ONE token, never the unknown id
    demonstration(conv, system, user, tools, turns) -> (ids, loss_mask)   SFT data
    check_incremental(conv, system, user, tools, turns) -> (ok, index, incremental, whole)
        turns: [(assistant_text, [observation, ...]), ...]
    ChatTemplateError: a model without a chat template (message names model.chat_template)
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import jinja2
from jinja2 import meta

from ablate.harness.chat.calls import (ENDOFTEXT, THINK_CLOSE, THINK_OPEN, TOOL_FORMATS,
                                       ToolFormat, detect_tool_format)

SENTINEL = "\u2063ABLATE{}\u2063"      # an invisible separator no template writes itself


class ChatTemplateError(ValueError):
    """The tokenizer has no usable chat template; the message names the key to set."""


def _json_text_system(system: str, tools: Sequence[dict], fmt=None) -> str:
    """The system turn of a template that does not render `tools`: the schemas as JSON
    lines and how to call one, in the tool format's own syntax (bare JSON by default)."""
    lines = [system, "", "You can call these tools (JSON schemas):"]
    lines += [json.dumps(t, ensure_ascii=False) for t in tools]
    if fmt is None or fmt.call_open is None:
        key = fmt.arguments_key if fmt is not None else "arguments"
        lines += ["", 'To call a tool, answer with only a JSON object: '
                      f'{{"name": <tool name>, "{key}": {{<argument>: <value>}}}}']
    else:
        example = fmt.format_call("<tool name>", {"<argument>": "<value>"})
        lines += ["", f"To call a tool, answer with:\n{example}"]
    return "\n".join(lines).lstrip("\n")


@functools.lru_cache(maxsize=16)
def _template_renders_tools(template: str) -> bool:
    """Does the template read the `tools` variable (else tools go in the system prompt)?"""
    return "tools" in meta.find_undeclared_variables(jinja2.Environment().parse(template))


# ------------------------------------------------------------------ conventions
@dataclass
class ChatConventions:
    tokenizer: object
    template: str
    fmt: ToolFormat
    enable_thinking: bool = False
    renders_tools: bool = False
    end_of_turn: str = ""
    _header: str | None = field(default=None, repr=False)

    @classmethod
    def from_tokenizer(cls, tokenizer, tool_format: str = "auto",
                       chat_template: str | None = None, enable_thinking: bool = False):
        template = chat_template or getattr(tokenizer, "chat_template", None)
        if chat_template and "{{" not in chat_template and "{%" not in chat_template:
            template = Path(chat_template).read_text()        # a .jinja file
        if isinstance(template, dict):               # named templates: the default one
            template = template.get("default")
        if not template:
            raise ChatTemplateError(
                f"the tokenizer of {getattr(tokenizer, 'name_or_path', '?') or '?'} has no "
                "chat template; set model.chat_template=/path/to/template.jinja")
        if tool_format == "auto":
            tool_format = detect_tool_format(template)
        if tool_format not in TOOL_FORMATS:
            raise ChatTemplateError(f"model.tool_format={tool_format!r}; choose one of "
                                    f"{['auto', *TOOL_FORMATS]}")
        fmt = TOOL_FORMATS[tool_format]
        renders = _template_renders_tools(template) and not fmt.tools_in_system
        return cls(tokenizer, template, fmt, enable_thinking, renders,
                   _end_of_turn(tokenizer, template))

    @classmethod
    def from_config(cls, tokenizer, model_cfg, mode_cfg):
        """The conventions a cell uses: model.tool_format, model.chat_template and
        mode.enable_thinking (ablate/models/config.py, ablate/harness/config.py)."""
        return cls.from_tokenizer(tokenizer, getattr(model_cfg, "tool_format", "auto"),
                                  getattr(model_cfg, "chat_template", None),
                                  bool(getattr(mode_cfg, "enable_thinking", False)))

    # -- rendering
    def _render(self, messages, tools=None, gen=True) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tools=list(tools) if tools and self.renders_tools else None,
            tokenize=False, add_generation_prompt=gen, chat_template=self.template,
            enable_thinking=self.enable_thinking)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def head_messages(self, system: str | None, user: str, tools=(),
                      examples=()) -> list[dict]:
        """system, then each worked example as a user turn and an assistant turn
        (few-shot prompting as chat turns; Brown et al. 2020, arXiv:2005.14165), then the
        question."""
        if tools and not self.renders_tools:
            system = _json_text_system(system or "", tools, self.fmt)
        msgs = [{"role": "system", "content": system}] if system else []
        for question, reply in examples:
            msgs += [{"role": "user", "content": question},
                     {"role": "assistant", "content": reply}]
        return msgs + [{"role": "user", "content": user}]

    def tool_messages(self, observations: Sequence[str]) -> list[dict]:
        return [{"role": self.fmt.observation_role, "content": o} for o in observations]

    def prompt_text(self, system, user, tools=(), examples=()) -> str:
        return self._render(self.head_messages(system, user, tools, examples), tools)

    def observation_text(self, observations: Sequence[str]) -> str:
        """What follows a closed turn: the observation turn(s) and the next header, cut
        out of a render of [user, assistant(sentinel), observations] + generation header."""
        s = SENTINEL.format(0)
        text = self._render([{"role": "user", "content": "q"},
                             {"role": "assistant", "content": s},
                             *self.tool_messages(observations)])
        rest = text[text.index(s) + len(s):]
        if not rest.startswith(self.end_of_turn):
            raise ChatTemplateError(f"the chat template does not close an assistant turn "
                                    f"with {self.end_of_turn!r}; set model.chat_template")
        return rest[len(self.end_of_turn):]

    @property
    def header_text(self) -> str:
        """The generation header (e.g. "<|im_start|>assistant\\n" + Qwen3's empty think
        block in instruct mode): the tail that add_generation_prompt appends."""
        if self._header is None:
            msgs = [{"role": "user", "content": "q"}]
            self._header = self._render(msgs, gen=True)[len(self._render(msgs, gen=False)):]
        return self._header

    @property
    def header_suffix(self) -> str:
        """The part of the generation header that the template drops when it renders the
        same assistant turn in history (Qwen3 hybrids in instruct mode: the empty think
        block). The harness keeps it (prefix extension), so whole-conversation references
        put it back (whole_ids)."""
        s = SENTINEL.format(0)
        msgs = [{"role": "user", "content": "q"}]
        hist = self._render(msgs + [{"role": "assistant", "content": s}], gen=False)
        head = hist[len(self._render(msgs, gen=False)):hist.index(s)]
        return self.header_text[len(head):] if self.header_text.startswith(head) else ""

    @property
    def end_of_turn_id(self) -> int:
        return self.tokenizer.convert_tokens_to_ids(self.end_of_turn)

    @property
    def stop_ids(self) -> list[int]:
        """Ids that end a generated turn: the end-of-turn token, then <|endoftext|> and
        eos where they are tokens of this vocabulary (no duplicates)."""
        ids = (self.end_of_turn_id, marker_id(self.tokenizer, ENDOFTEXT),
               self.tokenizer.eos_token_id)
        return list(dict.fromkeys(i for i in ids if isinstance(i, int) and i >= 0))

    @property
    def think_ids(self) -> tuple[int | None, int | None]:
        """(<think>, </think>) ids where each is one token; None where it is plain text
        (SmolLM2: BPE pieces) and the harness finds it in the decoded text instead."""
        return marker_id(self.tokenizer, THINK_OPEN), marker_id(self.tokenizer, THINK_CLOSE)

    @property
    def opens_think(self) -> bool:
        """Does every generation header leave a <think> block open (thinking-only
        models, e.g. Qwen3-*-Thinking-2507)? Every prompt ends with the header."""
        head = self.header_text
        return THINK_OPEN in head and THINK_CLOSE not in head[head.rindex(THINK_OPEN):]

    def closing_ids(self, generated: Sequence[int]) -> list[int]:
        """What follows a generated turn before its observation: nothing when the turn
        ended with its end-of-turn token, else that token (the turn was closed by
        another stop id, e.g. eos)."""
        closed = bool(generated) and generated[-1] == self.end_of_turn_id
        return [] if closed else [self.end_of_turn_id]

    def prompt_ids(self, system, user, tools=(), examples=()) -> list[int]:
        return self.encode(self.prompt_text(system, user, tools, examples))

    def observation_ids(self, observations: Sequence[str]) -> list[int]:
        return self.encode(self.observation_text(observations))

    def format_call(self, name: str, arguments: dict) -> str:
        return self.fmt.format_call(name, arguments)

    def parse_calls(self, text: str) -> list:
        return self.fmt.parse_calls(text)


def marker_id(tokenizer, text: str) -> int | None:
    """The id of `text` when it is ONE token of the vocabulary, else None (never the
    unknown-token id that convert_tokens_to_ids returns for a string it lacks)."""
    i = tokenizer.convert_tokens_to_ids(text)
    if not isinstance(i, int) or i < 0:
        return None
    return i if tokenizer.convert_ids_to_tokens(i) == text else None


def _end_of_turn(tokenizer, template: str) -> str:
    """The token that closes an assistant turn in this template: <|im_end|> (ChatML),
    <|eot_id|> (Llama 3), else the tokenizer's eos token."""
    for tok in ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>"):
        if tok in template and marker_id(tokenizer, tok) is not None:
            return tok
    if not tokenizer.eos_token:
        raise ChatTemplateError("the tokenizer has no eos token and its chat template no "
                                "known end-of-turn token; set model.chat_template")
    return tokenizer.eos_token


# ------------------------------------------------------------------ the exactness check
def demonstration(conv: ChatConventions, system, user, tools, turns):
    """(ids, loss_mask) of a scripted episode as a rollout builds it: prompt + Σ (turn +
    end-of-turn + observation piece); mask 1 on each turn's ids and its end-of-turn."""
    ids = conv.prompt_ids(system, user, tools)
    mask = [0] * len(ids)
    for text, obs in turns:
        turn = conv.encode(text) + [conv.end_of_turn_id]
        ids += turn
        mask += [1] * len(turn)
        if obs:
            piece = conv.observation_ids(obs)
            ids += piece
            mask += [0] * len(piece)
    return ids, mask


def incremental_ids(conv: ChatConventions, system, user, tools, turns) -> list[int]:
    """prompt + Σ (generated turn + end-of-turn + observation piece), as a rollout builds it."""
    return demonstration(conv, system, user, tools, turns)[0]


def whole_ids(conv: ChatConventions, system, user, tools, turns) -> list[int]:
    """One render of the whole conversation (with conv.header_suffix put back after each
    assistant header where the template drops it): a generation header after the last
    observation; after a final turn without observations, cut at its end-of-turn token
    (what the template writes after it belongs to no generated piece)."""
    suffix, mark = conv.header_suffix, SENTINEL.format("s")
    msgs = conv.head_messages(system, user, tools)
    for text, obs in turns:
        msgs.append({"role": "assistant", "content": (mark if suffix else "") + text})
        msgs += conv.tool_messages(obs)
    open_end = bool(turns) and not turns[-1][1]
    text = conv._render(msgs, tools, gen=not open_end).replace(mark, suffix)
    if open_end:
        text = text[:text.rindex(conv.end_of_turn) + len(conv.end_of_turn)]
    return conv.encode(text)


def check_incremental(conv: ChatConventions, system, user, tools, turns):
    """(ok, first differing index or -1, incremental ids, whole ids)."""
    inc, whole = incremental_ids(conv, system, user, tools, turns), \
        whole_ids(conv, system, user, tools, turns)
    if inc == whole:
        return True, -1, inc, whole
    i = next((k for k, (a, b) in enumerate(zip(inc, whole)) if a != b), min(len(inc),
                                                                            len(whole)))
    return False, i, inc, whole
