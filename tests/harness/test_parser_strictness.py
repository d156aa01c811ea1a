"""harness.parser strict|lenient on hand-made strings, and the retry knobs
(harness.on_malformed / max_malformed) logged per episode and per step."""
from __future__ import annotations

import json
import time

import pytest

from ablate.apps.cli import compose_config
from ablate.loop.config import ConfigError, validate
from ablate.harness import chat
from ablate.harness.chat import format_tool_call as call
from ablate.harness.config import HarnessConfig, ModeConfig
from ablate.harness.parser import PARSERS, parse_actions, retries_used, step_metrics
from ablate.harness.rollout import rollout
import test_harness_util as U
from test_harness_util import db, tok  # noqa: F401  (fixtures)

SEARCH = call("search_inbox", {"keywords": ["budget"]})
ANSWER = call("return_final_answer", {"answer": "$5,000", "sources": ["m0"]})
GOOD = {"name": "search_inbox", "arguments": {"keywords": ["budget"]}}

# text -> what the lenient parser repairs it to (the strict parser refuses every one)
REPAIRABLE = [
    ("<tool_call>{'name': 'search_inbox', 'arguments': {'keywords': ['budget']}}</tool_call>",
     "single quotes"),
    ("<tool_call>\n```json\n" + json.dumps(GOOD) + "\n```\n</tool_call>", "code fence"),
    ("<tool_call>" + json.dumps(GOOD) + " I hope this works.</tool_call>", "trailing text"),
    ("<tool_call>\n" + json.dumps(GOOD) + "\nthen I will read it", "unclosed block"),
    ("Let me search. " + json.dumps(GOOD) + " ok", "no tags"),
    ("no tags, Python: {'name': 'search_inbox', 'arguments': {'keywords': ['budget']}}",
     "no tags, single quotes"),
]


def test_registry_is_the_source_of_names():
    assert set(PARSERS) == {"strict", "lenient"}
    with pytest.raises(ValueError, match=r"harness.parser='loose' is not one of"):
        parse_actions(SEARCH, "loose")
    cfg = compose_config(["harness.parser=loose"])
    with pytest.raises(ConfigError, match=r"harness.parser='loose' is not one of "
                                          r"\['strict', 'lenient'\]"):
        validate(cfg)


@pytest.mark.parametrize("text", [
    SEARCH, SEARCH + "\n" + ANSWER, "prose " + SEARCH + " more prose", "", "hello",
    "<tool_call>not json</tool_call>", "<tool_call>[1, 2]</tool_call>",
    '<tool_call>{"arguments": {}}</tool_call>', '<tool_call>{"name": "x"}</tool_call>',
    '<tool_call>{"name": "x", "arguments": "{\\"a\\": 1}"}</tool_call>',
    '<tool_call>{"name": "x", "parameters": {"a": 1}}</tool_call>',
    REPAIRABLE[0][0], REPAIRABLE[3][0], "<tool_call><tool_call>" + json.dumps(GOOD),
])
def test_strict_is_exactly_the_chat_parser(text):
    got = [a.call for a in parse_actions(text, "strict")]
    assert got == chat.parse_tool_calls(text)
    assert not any(a.repaired for a in parse_actions(text, "strict"))


@pytest.mark.parametrize("text,what", REPAIRABLE)
def test_lenient_repairs_and_flags(text, what):
    strict = parse_actions(text, "strict")
    assert strict[0].call.error is not None, what
    lenient = parse_actions(text, "lenient")
    assert len(lenient) == 1 and lenient[0].repaired, what
    c = lenient[0].call
    assert (c.name, c.arguments, c.error) == ("search_inbox", {"keywords": ["budget"]}, None)


@pytest.mark.parametrize("text", [
    SEARCH, SEARCH + "\n" + ANSWER, '<tool_call>{"name": "x", "parameters": {"a": 1}}</tool_call>'])
def test_lenient_equals_strict_on_well_formed_calls(text):
    s, l_ = parse_actions(text, "strict"), parse_actions(text, "lenient")
    assert [a.call for a in s] == [a.call for a in l_] and not any(a.repaired for a in l_)


@pytest.mark.parametrize("text,err", [
    ("I think the answer is 5.", "no tool call"),
    ("{'keywords': ['budget']}", "no tool call"),              # an object without "name"
    ("<tool_call>{'name': 'x', 'arguments': [1]}</tool_call>", "must be a JSON object"),
    ("<tool_call>{'name': ''}</tool_call>", 'no "name"'),
    ("<tool_call>search budget</tool_call>", "not valid JSON"),
    ("<tool_call>{'name': __import__('os')}</tool_call>", "not valid JSON"),   # no eval
])
def test_lenient_still_refuses_what_it_cannot_read(text, err):
    a = parse_actions(text, "lenient")
    assert a[0].call.error is not None and err in a[0].call.error and not a[0].repaired


def test_lenient_work_is_bounded_on_adversarial_text():
    text = ("{'name': [" * 3000) + ("}" * 3000) + "{" * 20000
    t0 = time.perf_counter()
    out = parse_actions(text, "lenient")
    assert time.perf_counter() - t0 < 10.0 and out[0].call.error is not None
    blocks = "<tool_call>" + "{" * 5000 + "</tool_call>"
    assert parse_actions(blocks * 20, "lenient")[0].call.error is not None


# ------------------------------------------------------------------ in the rollout


def run(tok, db, script, max_turns=6, **harness):
    sampler = U.ScriptedSampler(tok, script)
    return rollout(U.TASKS[:1], group_size=1, sampler=sampler, tokenizer=tok,
                   env=U.email_env(db), harness_cfg=HarnessConfig(**harness),
                   mode_cfg=ModeConfig(), max_turns=max_turns, temperature=1.0, seed=0)[0]


def test_parser_strictness_in_the_rollout(tok, db):
    quoted = REPAIRABLE[0][0]
    strict = run(tok, db, lambda p, t: quoted if t == 0 else ANSWER)
    lenient = run(tok, db, lambda p, t: quoted if t == 0 else ANSWER, parser="lenient")
    assert strict.calls[0].error and strict.behaviour()["malformed_calls"] == 1
    assert strict.behaviour()["parser_repairs"] == 0 and strict.behaviour()["retries_used"] == 1
    c = lenient.calls[0]
    assert c.error is None and c.name == "search_inbox" and "m0" in c.extra["hits"]
    assert c.extra["parser_repaired"] is True
    b = lenient.behaviour()
    assert (b["malformed_calls"], b["parser_repairs"], b["retries_used"]) == (0, 1, 0)
    assert lenient.end_reason == strict.end_reason == "answer"


@pytest.mark.parametrize("max_malformed,on_malformed,turns,end,retries", [
    (0, "continue", 1, "malformed", 0),
    (1, "continue", 2, "malformed", 1),
    (3, "continue", 3, "answer", 2),      # two bad turns retried, then the answer
    (3, "end", 1, "malformed", 0),
])
def test_retries_axis(tok, db, max_malformed, on_malformed, turns, end, retries):
    ep = run(tok, db, lambda p, t: "no call here" if t < 2 else ANSWER,
             max_malformed=max_malformed, on_malformed=on_malformed)
    assert (ep.num_turns, ep.end_reason) == (turns, end)
    assert retries_used(ep) == ep.behaviour()["retries_used"] == retries


def test_step_metrics_are_per_episode_means(tok, db):
    a = run(tok, db, lambda p, t: "no call" if t < 2 else ANSWER)               # 2 bad, 2 retries
    b = run(tok, db, lambda p, t: REPAIRABLE[1][0] if t == 0 else ANSWER, parser="lenient")
    row = step_metrics([a, b])
    assert row == {"harness/malformed_calls": 1.0, "harness/retries_used": 1.0,
                   "harness/parser_repairs": 0.5}
