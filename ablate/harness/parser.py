"""Reading a turn's actions: tool calls under a parser strictness (`harness.parser`) and
the world-model predictions that go with them (`harness.predict`, docs/rewards.md).

Parsers (PARSERS, an ablate.core.registry.Registry: the single source of `harness.parser`
names; `@PARSERS.register("name")` adds one, from a `plugins` module too):

* `strict` (default): exactly ablate.harness.chat.parse_tool_calls. A call is a
  `<tool_call>` block closed by `</tool_call>` whose body (surrounding whitespace allowed)
  is one JSON object with a non-empty "name" and an "arguments" object (or "parameters",
  or arguments as a JSON string of an object). Text outside the blocks is ignored.
* `lenient`: first the strict reading of each piece; where it fails, these repairs, each
  giving the canonical call that the strict parser then reads (same shape rules):
    1. text before or after the object inside the block is ignored (the first `{` that
       starts a complete object: a code fence, a trailing remark);
    2. a Python-literal object is accepted: single quotes, True/False/None;
    3. an unclosed `<tool_call>` block (no `</tool_call>`) is read as if closed;
    4. a turn with no `<tool_call>` at all: the first object in the text (JSON or Python
       literal) that has a "name" key is the (single) call.
  Bounded work: at most MAX_TRIES opening and MAX_TRIES closing braces are tried.
  A call that needed a repair is flagged `repaired` (logged as `parser_repairs`); an
  object read by a repair but of the wrong shape reports that shape error.

Predictions: `<predict>LABEL</predict>` written in the same turn right after a call's
`</tool_call>` (the call is written, its result not yet shown: a prediction of the
consequence of that exact action), outside the think block. A call's prediction is the
first tag between its end and the next call's start (none: no prediction). Labels are
compared lower-cased and stripped.
"""
from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any, Optional, Protocol, runtime_checkable

from ablate.core.registry import Registry
from ablate.harness.chat import CALL_CLOSE, CALL_OPEN, ParsedCall, parse_tool_calls

PREDICT_OPEN, PREDICT_CLOSE = "<predict>", "</predict>"
_PREDICT = re.compile(re.escape(PREDICT_OPEN) + r"(.*?)" + re.escape(PREDICT_CLOSE), re.S)
MAX_TRIES = 16          # lenient: `{` starts, and `}` ends per start, tried at most


@dataclass
class Action:
    """One parsed call with where it starts and ends in the text, and its prediction."""
    call: ParsedCall
    start: int
    end: int
    repaired: bool = False
    prediction: Optional[str] = None


def _blocks(text: str):
    """(start, end, body, closed) of each <tool_call> block, left to right, with the
    same rule as chat.parse_tool_calls: a block runs to the first closing tag after it."""
    pos = 0
    while (start := text.find(CALL_OPEN, pos)) >= 0:
        body = start + len(CALL_OPEN)
        close = text.find(CALL_CLOSE, body)
        if close < 0:
            yield start, len(text), text[body:], False
            return
        pos = close + len(CALL_CLOSE)
        yield start, pos, text[body:close], True


def _strict_one(body: str, closed: bool) -> ParsedCall:
    """chat.parse_tool_calls' reading of one block (an unclosed one is its error)."""
    return parse_tool_calls(CALL_OPEN + body + (CALL_CLOSE if closed else ""))[0]


def _object_at(text: str, i: int) -> tuple[Optional[dict], int]:
    """(the object starting at text[i], its end) as JSON, else as a Python literal (up to
    the last `}`); (None, i) when neither reads."""
    try:
        obj, end = json.JSONDecoder().raw_decode(text, i)
        return (obj, end) if isinstance(obj, dict) else (None, i)
    except (json.JSONDecodeError, RecursionError):
        pass
    j, tries = text.rfind("}"), 0
    while j > i and tries < MAX_TRIES:
        tries += 1
        try:
            obj = ast.literal_eval(text[i:j + 1])
            return (obj, j + 1) if isinstance(obj, dict) else (None, i)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            j = text.rfind("}", i, j)
    return None, i


def _first_object(text: str, need_name: bool = False) -> tuple[Optional[dict], int, int]:
    """(object, start, end) of the first object in `text` (with a "name" key if asked)."""
    i, tries = text.find("{"), 0
    while i >= 0 and tries < MAX_TRIES:
        tries += 1
        obj, end = _object_at(text, i)
        if obj is not None and (not need_name or "name" in obj):
            return obj, i, end
        i = text.find("{", i + 1)
    return None, -1, -1


def _canonical(obj: dict, raw: str) -> ParsedCall:
    """The strict reading of `obj` written canonically; `raw` kept as the model wrote it."""
    try:
        body = json.dumps(obj, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return ParsedCall("", None, "Error: unreadable tool call.", raw)
    call = _strict_one(body, True)
    call.raw = raw
    return call


def _repair(body: str) -> Optional[ParsedCall]:
    """Repairs 1-2 of one block's body; None when nothing reads."""
    obj, _, _ = _first_object(body)
    return None if obj is None else _canonical(obj, body)


# name -> fn(turn text) -> list[Action]: the single source of `harness.parser`
PARSERS = Registry("harness.parser", "parser")


@PARSERS.register("strict")
def parse_strict(text: str) -> list[Action]:
    """chat.parse_tool_calls, with each call's place in the text."""
    found = list(_blocks(text))
    if not found:
        return [Action(parse_tool_calls(text)[0], 0, 0)]
    return [Action(_strict_one(body, closed), s, e) for s, e, body, closed in found]


@PARSERS.register("lenient")
def parse_lenient(text: str) -> list[Action]:
    """The strict reading, repaired where it fails (module docstring, repairs 1-4)."""
    found = list(_blocks(text))
    if not found:
        obj, s, e = _first_object(text, need_name=True)
        if obj is None:
            return [Action(parse_tool_calls(text)[0], 0, 0)]
        call = _canonical(obj, text[s:e])
        return [Action(call, s, e, repaired=call.error is None)]
    out = []
    for s, e, body, closed in found:
        call = _strict_one(body, closed)
        fixed = _repair(body) if call.error is not None else None
        if fixed is not None:     # read: its shape error (if any) is the clearer one
            out.append(Action(fixed, s, e, repaired=fixed.error is None))
        else:
            out.append(Action(call, s, e))
    return out




def parse_actions(text: str, parser: str = "strict", predict: bool = False) -> list[Action]:
    """The calls of a turn's text (think block already removed) under `parser`; with
    `predict`, each with its <predict> label. Never raises on model text; never []."""
    read = PARSERS.get_checked(parser)
    text = "" if text is None else str(text)
    try:
        actions = read(text)
    except Exception as exc:   # defensive: the harness must never die on text
        actions = [Action(ParsedCall("", None, "Error: unreadable tool call "
                                     f"({type(exc).__name__}).", text[:1000]), 0, 0)]
    if predict:
        for a, nxt in zip(actions, actions[1:] + [None]):
            a.prediction = prediction_between(text, a.end, len(text) if nxt is None
                                              else max(a.end, nxt.start))
    return actions


@runtime_checkable
class Predictable(Protocol):
    """A world whose call results an agent may predict (world-model reward,
    docs/rewards.md): per tool {label: what it means}, and which label a call produced
    (read after the call on the episode's state; None: not predictable)."""

    def outcome_labels(self) -> dict[str, dict[str, str]]: ...

    def outcome_label(self, state: Any, result: Any) -> Optional[str]: ...


def outcome_labels(env: Any) -> dict[str, dict[str, str]]:
    """A Predictable world's labels; {} for a world with nothing to predict."""
    return dict(env.outcome_labels()) if isinstance(env, Predictable) else {}


def prediction_between(text: str, lo: int, hi: int) -> Optional[str]:
    """The label of the first complete <predict> tag inside text[lo:hi], normalised."""
    tag = _PREDICT.search(text, lo, hi)
    return tag.group(1).strip().lower() if tag else None


def prediction_instructions(labels: dict[str, dict[str, str]]) -> str:
    """The system-prompt paragraph that asks for predictions, from the environment's
    outcome_labels() (tool -> {label: what it means})."""
    lines = [f"After each tool call, predict its result: write {PREDICT_OPEN}LABEL"
             f"{PREDICT_CLOSE} right after </tool_call>, in the same message. Labels:"]
    for tool, meanings in labels.items():
        opts = "; ".join(f"{lab} = {what}" for lab, what in meanings.items())
        lines.append(f"- {tool}: {opts}.")
    return "\n".join(lines)


def annotate(result, action: Action, predict: bool, env, state) -> None:
    """Record on the call's ToolResult what the parser saw: `parser_repaired` (lenient
    repairs), and with `predict` the `prediction` and the environment's `outcome` label."""
    if action.repaired:
        result.extra["parser_repaired"] = True
    if predict:
        result.extra["prediction"] = action.prediction
        result.extra["outcome"] = (env.outcome_label(state, result)
                                   if isinstance(env, Predictable) else None)


def prediction_counts(episode) -> tuple[int, int, int]:
    """(right, predictable, made) over the episode's calls: predictable = the environment
    gave an outcome label; made = a prediction was written; right = it equals the label
    (a missing prediction is wrong)."""
    right = predictable = made = 0
    for c in episode.calls:
        outcome = c.extra.get("outcome")
        if outcome is None:
            continue
        predictable += 1
        pred = c.extra.get("prediction")
        made += pred is not None
        right += pred == outcome
    return right, predictable, made


def retries_used(episode) -> int:
    """Turns with a malformed call after which the episode went on (on_malformed=continue
    within max_malformed): the retries the harness granted."""
    bad = sum(1 for t in episode.turns if any(c.error is not None for c in t.calls))
    return bad - (1 if bad and episode.end_reason == "malformed" else 0)


def episode_metrics(episode, predict: bool = False) -> dict:
    """Per-episode harness metrics (merged into its behaviour): retries used, lenient
    repairs, and with `predict` the prediction counts (prediction_counts)."""
    out = {"retries_used": retries_used(episode),
           "parser_repairs": sum(1 for c in episode.calls if c.extra.get("parser_repaired"))}
    if predict:
        right, predictable, made = prediction_counts(episode)
        out.update(predictions_right=right, predictable_calls=predictable,
                   predictions_made=made)
    return out


def step_metrics(episodes, predict: bool = False) -> dict:
    """A training step's row: per-episode means harness/malformed_calls,
    harness/retries_used, harness/parser_repairs; with `predict`, pooled over the step's
    calls world_model/accuracy (right / predictable; 0 when none), world_model/predicted
    (made / predictable) and world_model/predictable (per episode)."""
    eps = list(episodes)
    n = max(len(eps), 1)
    row = {"harness/malformed_calls": sum(sum(c.error is not None for c in e.calls)
                                          for e in eps) / n,
           "harness/retries_used": sum(retries_used(e) for e in eps) / n,
           "harness/parser_repairs": sum(sum(bool(c.extra.get("parser_repaired"))
                                             for c in e.calls) for e in eps) / n}
    if predict:
        right, predictable, made = (sum(x) for x in zip((0, 0, 0),
                                                         *map(prediction_counts, eps)))
        row.update({"world_model/accuracy": right / predictable if predictable else 0.0,
                    "world_model/predicted": made / predictable if predictable else 0.0,
                    "world_model/predictable": predictable / n})
    return row
