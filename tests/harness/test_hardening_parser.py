"""The model's text -> tool calls -> tools path under arbitrary input: never raises, runs
in time linear in the input, never shows mail of another inbox or after the query date."""
from __future__ import annotations

import json
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ablate.envs.email import Email, EmailDB, ToolBox, write_jsonl
from ablate.harness.chat import CALL_CLOSE, CALL_OPEN, ParsedCall, parse_tool_calls

ALICE, BOB, EVE = "alice@enron.com", "bob@enron.com", "eve@enron.com"
QUERY_DATE = "2001-03-10 00:00:00"
EMAILS = [
    Email("<a1>", "Raptor budget", ALICE, [BOB], [], [], "2001-03-01 09:00:00", "raptor gas"),
    Email("<a2>", "Raptor later", BOB, [ALICE], [], [], "2001-03-20 10:00:00", "raptor gas"),
    Email("<e1>", "Eve raptor", EVE, [BOB], [], [], "2001-03-03 10:00:00", "raptor gas"),
    Email("<e2>", "Eve budget", EVE, ["frank@aep.com"], [], [], "2001-01-03 10:00:00",
          "budget gas raptor"),
]
VISIBLE = {"<a1>"}          # Alice's mail dated before the query date

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                    | st.text(max_size=20),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c,
                                                                        max_size=4),
                    max_leaves=12)
TOOL_NAMES = st.sampled_from(["search_inbox", "read_email", "return_final_answer", "", "x"])
WORDS = st.sampled_from(["raptor", "gas", "budget", "eve", "<e1>", "<a2>", "<a1>", "<e2>",
                         '"', "*", "NEAR(", "subject:", "\x00", "\ud800", "OR", "^"])


@st.composite
def calls(draw):
    """A plausible or hostile tool-call body: JSON with a name and arguments."""
    name = draw(TOOL_NAMES)
    args = draw(st.one_of(
        st.fixed_dictionaries({"keywords": st.lists(WORDS, max_size=4)}),
        st.fixed_dictionaries({"message_id": WORDS}),
        st.fixed_dictionaries({"answer": st.text(max_size=10), "sources": st.lists(WORDS)}),
        JSON))
    return json.dumps({"name": name, "arguments": args})


FRAGMENTS = st.one_of(st.text(max_size=30), st.just(CALL_OPEN), st.just(CALL_CLOSE),
                      st.just("<tool_call"), st.just("{"), calls())
TEXTS = st.lists(FRAGMENTS, max_size=12).map("".join)


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    d = tmp_path_factory.mktemp("parser")
    write_jsonl(d / "emails.jsonl", EMAILS)
    database = EmailDB.build(d / "emails.jsonl", d / "emails.sqlite")
    yield database
    database.close()


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=400) | TEXTS)
def test_parser_never_raises_and_never_returns_nothing(text):
    out = parse_tool_calls(text)
    assert out and all(isinstance(c, ParsedCall) for c in out)
    for c in out:
        assert (c.error is None) == isinstance(c.arguments, dict)
        assert c.error is not None or (isinstance(c.name, str) and c.name.strip())


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=TEXTS)
def test_text_to_tools_never_raises_or_leaks(db, text):
    box = ToolBox(db, ALICE, QUERY_DATE)
    for call in parse_tool_calls(text):
        if call.error:
            continue
        result = box.call(call.name, call.arguments)
        assert set(result.hits) <= VISIBLE, result
        if result.read_id is not None:
            assert result.read_id in VISIBLE
        for foreign in ("<a2>", "<e1>", "<e2>", "Eve raptor", "Raptor later", "Eve budget"):
            if foreign.startswith("<") and result.name == "read_email":
                assert f"Message-ID: {foreign}" not in result.observation
            elif not foreign.startswith("<"):
                assert foreign not in result.observation


@settings(max_examples=100, deadline=None)
@given(body=JSON)
def test_any_json_inside_tags_is_handled(body):
    for text in (CALL_OPEN + json.dumps(body) + CALL_CLOSE,
                 CALL_OPEN + json.dumps({"name": "read_email", "arguments": body}) + CALL_CLOSE):
        [call] = parse_tool_calls(text)
        assert call.error is None or call.arguments is None


def _seconds(text: str) -> float:
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        parse_tool_calls(text)
        best = min(best, time.perf_counter() - t0)
    return best


def test_hundred_thousand_unclosed_tags_parse_in_under_a_second():
    t0 = time.perf_counter()
    out = parse_tool_calls(CALL_OPEN * 100_000)
    assert time.perf_counter() - t0 < 1.0
    assert len(out) == 1 and "not closed" in out[0].error


@pytest.mark.parametrize("unit", [CALL_OPEN, CALL_OPEN + "{" + CALL_CLOSE, "<tool_call",
                                  CALL_OPEN + '{"name": "x", "arguments": {}}' + CALL_CLOSE])
def test_parse_time_grows_linearly(unit):
    small, big = unit * 10_000, unit * 100_000
    ratio = _seconds(big) / max(_seconds(small), 1e-6)
    assert ratio < 25, ratio          # linear: ~10; quadratic: ~100
