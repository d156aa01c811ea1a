"""ToolBox: schemas, bound inbox and date, never-raising argument handling, hit/read
bookkeeping (issue 2 item 2, and the property tests over tool-call arguments)."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ablate.envs.email import TOOL_SCHEMAS, Email, EmailDB, ToolBox, write_jsonl
from ablate.envs.email.tools import ToolCall

ALICE, BOB, EVE = "alice@enron.com", "bob@enron.com", "eve@enron.com"
QUERY_DATE = "2001-03-10 00:00:00"
EMAILS = [
    Email("<a1>", "Raptor budget", ALICE, [BOB], ["carol@enron.com"], [], "2001-03-01 09:00:00",
          "The Raptor budget is $4.2M."),
    Email("<a2>", "Re: Raptor budget", BOB, [ALICE], [], [EVE], "2001-03-02 10:00:00",
          "Approved. Raptor goes ahead."),
    Email("<a3>", "Raptor, later", BOB, [ALICE], [], [], "2001-03-20 10:00:00",
          "Raptor news after the question date."),
    Email("<e1>", "Eve's raptor", EVE, ["frank@aep.com"], [], [], "2001-03-03 10:00:00",
          "Raptor notes Alice never received."),
] + [Email(f"<n{i}>", f"Note {i}", ALICE, [BOB], [], [], f"2001-02-{1 + i:02d} 08:00:00",
           f"weekly note number {i} about gas") for i in range(15)]


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    d = tmp_path_factory.mktemp("tools")
    write_jsonl(d / "emails.jsonl", EMAILS)
    database = EmailDB.build(d / "emails.jsonl", d / "emails.sqlite")
    yield database
    database.close()


@pytest.fixture
def box(db):
    return ToolBox(db, ALICE, QUERY_DATE)


def test_schemas_are_openai_function_tools():
    names = [s["function"]["name"] for s in TOOL_SCHEMAS]
    assert names == ["search_inbox", "read_email", "return_final_answer"]
    for s in TOOL_SCHEMAS:
        assert s["type"] == "function" and s["function"]["parameters"]["type"] == "object"
        json.dumps(s)   # serialisable as sent to a chat template
    params = {s["function"]["name"]: s["function"]["parameters"] for s in TOOL_SCHEMAS}
    assert params["search_inbox"]["required"] == ["keywords"]
    assert params["search_inbox"]["properties"]["keywords"]["items"] == {"type": "string"}
    assert params["read_email"]["required"] == ["message_id"]
    assert params["return_final_answer"]["required"] == ["answer", "sources"]


def test_search_returns_compact_json_and_counts_new_hits(box):
    c = box.call("search_inbox", {"keywords": ["raptor"]})
    assert c.error is None and c.hits == ["<a2>", "<a1>"] and c.new_hits == 2
    assert json.loads(c.observation) == [
        {"message_id": "<a2>", "subject": "Re: Raptor budget", "date": "2001-03-02 10:00:00",
         "snippet": "Approved. Raptor goes ahead."},
        {"message_id": "<a1>", "subject": "Raptor budget", "date": "2001-03-01 09:00:00",
         "snippet": "The Raptor budget is $4.2M."}]
    again = box.call("search_inbox", '{"keywords": ["budget", "raptor"]}')   # JSON string
    assert again.hits == ["<a2>", "<a1>"] and again.new_hits == 0
    assert again.arguments == {"keywords": ["budget", "raptor"]}


def test_search_is_bound_to_inbox_date_and_max_results(db):
    box = ToolBox(db, ALICE, QUERY_DATE, max_results=3)
    c = box.call("search_inbox", {"keywords": ["note"]})
    assert c.hits == ["<n14>", "<n13>", "<n12>"]
    # <a3> is after the query date, <e1> is Eve's: neither reachable
    assert "<a3>" not in box.call("search_inbox", {"keywords": ["later"]}).observation
    assert box.call("search_inbox", {"keywords": ["never", "received"]}).hits == []


def test_zero_hits_is_a_readable_result_not_an_error(box):
    c = box.call("search_inbox", {"keywords": ["raptor", "zeppelin"]})
    assert c.error is None and c.hits == [] and c.new_hits == 0
    assert c.observation.startswith("No results") and '"zeppelin"' in c.observation


def test_read_renders_headers_and_tracks_new_reads(box):
    c = box.call("read_email", {"message_id": "<a1>"})
    assert c.error is None and c.read_id == "<a1>" and c.new_read
    assert c.observation == ("Message-ID: <a1>\nFrom: alice@enron.com\nTo: bob@enron.com\n"
                             "Cc: carol@enron.com\nDate: 2001-03-01 09:00:00\n"
                             "Subject: Raptor budget\n\nThe Raptor budget is $4.2M.")
    again = box.call("read_email", {"message_id": " <a1> "})
    assert again.read_id == "<a1>" and not again.new_read


def test_read_outside_inbox_or_after_date_looks_missing(box):
    outs = {mid: box.call("read_email", {"message_id": mid}) for mid in ("<e1>", "<a3>", "<zz>")}
    for mid, c in outs.items():
        assert c.error is None and c.read_id is None and not c.new_read
        assert c.observation.replace(mid, "ID").startswith("Email not found")
    norm = {c.observation.replace(mid, "ID") for mid, c in outs.items()}
    assert len(norm) == 1                           # indistinguishable


def test_read_truncates_long_bodies_when_asked(db):
    c = ToolBox(db, ALICE, QUERY_DATE, max_read_chars=5).call("read_email",
                                                              {"message_id": "<a1>"})
    assert c.observation.endswith("The R\n[… body truncated: 22 more characters]")


def test_final_answer_is_validated(box):
    ok = box.call("return_final_answer", {"answer": "$4.2M", "sources": ["<a1>"]})
    assert ok.error is None and ok.observation == "" and ok.arguments["answer"] == "$4.2M"
    assert box.call("return_final_answer", {"answer": "", "sources": []}).error is None
    for bad in ({"answer": 4.2, "sources": []}, {"sources": ["<a1>"]},
                {"answer": "x", "sources": "<a1>"}, {"answer": "x"},
                {"answer": "x", "sources": [1]}):
        c = box.call("return_final_answer", bad)
        assert c.error and c.observation.startswith("Error: return_final_answer needs")


@pytest.mark.parametrize("name,args,expect", [
    ("search_inbox", {}, 'needs "keywords": a non-empty list of strings'),
    ("search_inbox", {"keywords": []}, "got an empty list"),
    ("search_inbox", {"keywords": "raptor"}, 'got "raptor"'),
    ("search_inbox", {"keywords": ["raptor", 3]}, "3 is not a string"),
    ("search_inbox", {"keywords": ["raptor", "  "]}, "must not be empty"),
    ("search_inbox", {"keywords": ["k"] * 11}, "at most 10 keywords; got 11"),
    ("search_inbox", {"keywords": ["x" * 201]}, "at most 200 characters"),
    ("search_inbox", {"keywords": ["raptor"], "inbox": BOB}, 'unexpected argument(s) "inbox"'),
    ("search_inbox", {"keywords": ["raptor"], "sent_before": "2002"}, "unexpected argument"),
    ("search_inbox", ["raptor"], "must be a JSON object"),
    ("search_inbox", '{"keywords": ["raptor"', "must be a JSON object"),
    ("search_inbox", 42, "must be a JSON object"),
    ("read_email", {}, 'needs "message_id"'),
    ("read_email", {"message_id": 7}, "; got 7."),
    ("read_email", {"message_id": "x" * 501}, "at most 500 characters"),
    ("send_email", {"to": BOB}, 'unknown tool "send_email". Available tools: search_inbox'),
    ("", {}, "unknown tool (none)"),
    (None, {}, "unknown tool (none)"),
    (["search_inbox"], {}, "unknown tool"),
])
def test_malformed_calls_become_error_observations(box, name, args, expect):
    c = box.call(name, args)
    assert isinstance(c, ToolCall) and c.error and c.observation == c.error
    assert c.observation.startswith("Error:") and expect in c.observation, c.observation
    assert c.hits == [] and c.read_id is None


def test_toolbox_refuses_bad_bindings(db):
    with pytest.raises(ValueError, match="no emails"):
        ToolBox(db, "nobody@nowhere.org", QUERY_DATE)
    with pytest.raises(ValueError, match="query_date='soon'"):
        ToolBox(db, ALICE, "soon")
    with pytest.raises(ValueError, match="max_results=0"):
        ToolBox(db, ALICE, QUERY_DATE, max_results=0)


def test_internal_failure_is_reported_not_raised(db, tmp_path):
    d = tmp_path / "x"
    d.mkdir()
    write_jsonl(d / "e.jsonl", EMAILS[:2])
    other = EmailDB.build(d / "e.jsonl", d / "e.sqlite")
    box = ToolBox(other, ALICE, QUERY_DATE)
    other.close()                                     # a broken database under the box
    c = box.call("search_inbox", {"keywords": ["raptor"]})
    assert c.error.startswith("internal: ProgrammingError")
    assert c.observation == "Error: search_inbox failed inside the environment."


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                max_size=4),
    max_leaves=12)
NAMES = st.sampled_from(["search_inbox", "read_email", "return_final_answer", "SEARCH_INBOX",
                         "", "search", "read_email "]) | st.text(max_size=15) | st.none()
ARGS = (JSONISH | st.fixed_dictionaries({"keywords": st.lists(st.text(max_size=40), max_size=12)})
        | st.fixed_dictionaries({"message_id": st.text(max_size=20)})
        | st.fixed_dictionaries({"answer": JSONISH, "sources": JSONISH})
        | JSONISH.map(lambda v: json.dumps(v)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=NAMES, args=ARGS)
def test_any_call_returns_a_toolcall_and_never_leaks(db, name, args):
    box = ToolBox(db, ALICE, QUERY_DATE)
    c = box.call(name, args)
    assert isinstance(c, ToolCall) and isinstance(c.observation, str)
    assert c.arguments is None or isinstance(c.arguments, dict)
    if c.error is not None:
        assert c.observation.startswith("Error:") and not c.error.startswith("internal")
        assert c.hits == [] and c.read_id is None
    allowed = {e.message_id for e in EMAILS
               if e.date < QUERY_DATE and ALICE in (e.from_address, *e.to_addresses)}
    assert set(c.hits) <= allowed and c.new_hits == len(c.hits)
    assert c.read_id is None or c.read_id in allowed
