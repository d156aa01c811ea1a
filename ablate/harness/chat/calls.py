"""The markup of a chat: ChatML/Qwen3 markers, and the tool-call syntaxes a model writes.

    IM_START, IM_END, ENDOFTEXT, THINK_OPEN, THINK_CLOSE, CALL_OPEN, CALL_CLOSE
    format_tool_call(name, arguments) -> str
        '<tool_call>\\n{"name": …, "arguments": {…}}\\n</tool_call>' (json.dumps spacing,
        as Qwen3's template's tojson); parse_tool_calls accepts exactly this.
    parse_tool_calls(text) -> list[ParsedCall]   never raises; at least one item; an
        item has error set for: no call at all, unterminated block, broken JSON, not an
        object, missing/empty name, arguments not an object.
    split_thinking(text) -> (think, rest)
    TOOL_FORMATS: name -> ToolFormat       the registry of tool-call syntaxes
        hermes       Qwen3 / Hermes: <tool_call>\\n{"name", "arguments"}\\n</tool_call>
        llama3_json  Llama 3.1/3.2: {"name": …, "parameters": {…}} as the whole turn,
                     results in "ipython" turns
        json_text    fallback for templates without tool support: tools described in the
                     system prompt, the call a JSON object anywhere in the text
    detect_tool_format(template) -> str    "hermes" | "llama3_json" | "json_text"
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

from ablate.core.registry import Registry

IM_START, IM_END, ENDOFTEXT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"


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




def _json_objects(text: str):
    """Every top-level JSON object in `text`, in order, with its span."""
    dec, i = json.JSONDecoder(), 0
    while (i := text.find("{", i)) >= 0:
        try:
            obj, end = dec.raw_decode(text, i)
        except (json.JSONDecodeError, RecursionError):
            i += 1
            continue
        yield obj, text[i:end]
        i = end


def _parse_json_text(text: str) -> list[ParsedCall]:
    """Calls written as bare JSON objects with a "name" (json_text, llama3_json)."""
    body = text.replace("<|python_tag|>", "")
    calls = [_parse_one(raw) for obj, raw in _json_objects(body)
             if isinstance(obj, dict) and "name" in obj]
    return calls or [ParsedCall("", None, 'Error: no tool call found. Call a tool with a '
                                          'JSON object {"name": ..., "arguments": {...}}.',
                                text)]


def _format_llama3(name: str, arguments: dict) -> str:
    # Llama 3.1 model card, "JSON based tool calling": {"name": ..., "parameters": ...}
    return json.dumps({"name": name, "parameters": arguments}, ensure_ascii=False)


def _format_json_text(name: str, arguments: dict) -> str:
    return json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)



@dataclass(frozen=True)
class ToolFormat:
    name: str
    format_call: Callable[[str, dict], str]
    parse_calls: Callable[[str], list]
    observation_role: str = "tool"
    detect_marks: tuple = ()            # template substrings that select this format
    tools_in_system: bool = False       # True: we describe tools in the system prompt
    call_open: str | None = None        # the text opening a call (None: a bare JSON object)
    call_close: str | None = None       # the text closing it
    arguments_key: str = "arguments"    # the JSON key holding the call's arguments

    def mask_spec(self) -> dict:
        """The action mask's view of this syntax (ablate.harness.masking.ActionMask):
        empty for hermes, the layout the masks were written for."""
        out = dict(call_open=self.call_open, call_close=self.call_close,
                   arguments_key=self.arguments_key)
        hermes = dict(call_open=CALL_OPEN, call_close=CALL_CLOSE, arguments_key="arguments")
        return {} if out == hermes else out


# the one registry of tool-call syntaxes (model.tool_format; `auto` detects one from the
# chat template): a new syntax is one TOOL_FORMATS.register call
TOOL_FORMATS = Registry("model.tool_format", "tool-call format")
TOOL_FORMATS.register("hermes", ToolFormat(
    "hermes", format_tool_call, parse_tool_calls, "tool", ("<tool_call>",),
    call_open=CALL_OPEN, call_close=CALL_CLOSE),
    doc="Hermes / Qwen: <tool_call>{json}</tool_call>, results in the tool role")
TOOL_FORMATS.register("llama3_json", ToolFormat(
    "llama3_json", _format_llama3, _parse_json_text, "ipython",
    ("<|python_tag|>", "ipython"), arguments_key="parameters"),
    doc="Llama 3.x: a bare JSON object with `parameters`, results in the ipython role")
TOOL_FORMATS.register("json_text", ToolFormat(
    "json_text", _format_json_text, _parse_json_text, "user", (), tools_in_system=True),
    doc="any model: tools described in the system prompt, a JSON object as the call")


def detect_tool_format(template: str) -> str:
    """The first registered format whose marks appear in the template; else json_text."""
    for fmt in TOOL_FORMATS.values():
        if fmt.detect_marks and any(m in template for m in fmt.detect_marks):
            return fmt.name
    return "json_text"

