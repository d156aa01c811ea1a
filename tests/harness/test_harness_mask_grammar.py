"""The action mask's grammar for tools with several arguments (docs/environments.md,
"Action masking"): a calendar world's `book(room, day, note)` where the room is an id
from the context, the day one of the answers and the note free text. Each tool's own
`after_id` / `after_answer` forces the keys between the values, so the model chooses
the values and never a key; a value no key constrains stays free."""
from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from ablate.harness.masking import ActionMask, token_bytes

TINY = "ablate/models/assets/tiny"
GRAMMAR = {"id_key": "room", "answer_key": "day",
           "after_name": {"book": ', "arguments": {"room": "',
                          "cancel": ', "arguments": {"room": "'},
           # per tool: what follows its id (book: two more arguments; cancel: the end)
           "after_id": {"book": ', "day": "', "cancel": "}}"},
           "after_answer": {"book": ', "note": "'}}
OPEN = '<tool_call>\n{"name": "'


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(TINY)


def forced_path(tok, mask: ActionMask, ids: list[int], limit=120) -> str:
    """Write while the mask constrains, one byte a token (a longer allowed token may run
    past a value into text no candidate has: the mask's documented residual hole); the
    text written until the mask lets go."""
    vb, text = mask.vocab, b""
    mask.replay(ids)
    for _ in range(limit):
        allowed = mask.allowed_next()
        if allowed is None:
            break
        t = min(allowed, key=lambda i: (len(vb.bytes[i]), i))
        ids.append(t)
        mask.replay(ids)
        text += vb.bytes[t]
    return text.decode()


def test_each_tool_forces_its_own_keys_between_values(tok):
    vb = token_bytes(tok)
    mask = ActionMask(vb, grammar=GRAMMAR, tool_names=["book"], ids=["r7"],
                      answers=["monday"])
    ids = tok.encode(OPEN, add_special_tokens=False)
    written = forced_path(tok, mask, ids)
    # the name, then the room (its only candidate), its key chain, the day, the note key
    assert written == 'book", "arguments": {"room": "r7", "day": "monday", "note": "'
    # the note is free: any text, then the model closes the call itself
    ids += tok.encode('window seat"}}\n</tool_call>', add_special_tokens=False)
    mask.replay(ids)
    assert mask.violations == 0 and mask.escaped == 0
    call = json.loads(tok.decode(ids).split("<tool_call>\n")[1].split("\n</tool_call>")[0])
    assert call == {"name": "book", "arguments": {"room": "r7", "day": "monday",
                                                  "note": "window seat"}}


def test_the_choice_of_values_stays_the_models(tok):
    """With two rooms and two days every combination is writable, and only those."""
    vb = token_bytes(tok)
    for room in ("r1", "r2"):
        for day in ("monday", "friday"):
            mask = ActionMask(vb, grammar=GRAMMAR, tool_names=["book", "cancel"],
                              ids=["r1", "r2"], answers=["monday", "friday"])
            text = (OPEN + f'book", "arguments": {{"room": "{room}", "day": "{day}", '
                    '"note": "x"}}\n</tool_call>')
            mask.replay(tok.encode(text, add_special_tokens=False))
            assert mask.violations == 0 and mask.escaped == 0, (room, day)
    mask = ActionMask(vb, grammar=GRAMMAR, tool_names=["book"], ids=["r1", "r2"],
                      answers=["monday", "friday"])
    bad = OPEN + 'book", "arguments": {"room": "r3", "day": "monday"}}'
    mask.replay(tok.encode(bad, add_special_tokens=False))
    assert mask.violations > 0                 # r3 is no room of the context


def test_a_tool_without_its_own_entry_ends_at_its_id(tok):
    """`cancel` names `}}` as what follows its room: the call ends there."""
    vb = token_bytes(tok)
    mask = ActionMask(vb, grammar=GRAMMAR, tool_names=["cancel"], ids=["r7"])
    written = forced_path(tok, mask, tok.encode(OPEN, add_special_tokens=False))
    assert written == 'cancel", "arguments": {"room": "r7"}}'


def test_a_string_after_id_still_applies_to_every_tool(tok):
    """The one-string form (the email and key-value worlds) is unchanged."""
    vb = token_bytes(tok)
    grammar = {**GRAMMAR, "after_id": "}}", "after_answer": "}}"}
    mask = ActionMask(vb, grammar=grammar, tool_names=["book"], ids=["r7"],
                      answers=["monday"])
    written = forced_path(tok, mask, tok.encode(OPEN, add_special_tokens=False))
    assert written == 'book", "arguments": {"room": "r7"}}'


def test_the_leak_issue_63_met_is_a_token_run_past_the_forced_text(tok):
    """docs/environments.md, "When a value mask leaks", cause (3): the text a tool name
    forces ends at the value's opening quote, and the mask allows there any token that
    ends it and runs on (the tiny vocabulary's `",`), without checking the run-on against
    the value's candidates; the value is then free: `"value": ", "capacity"]}}`."""
    vb = token_bytes(tok)
    grammar = {"answer_key": "value", "after_name": {"answer": ', "arguments": {"value": "'},
               "after_answer": "}}"}
    mask = ActionMask(vb, grammar=grammar, tool_names=["answer"], answers=["417"])
    ids = tok.encode(OPEN + 'answer", "arguments": {"value', add_special_tokens=False)
    ids += [vb.by_bytes[b][0] for b in (b'":', b' ')]     # a lone space before the quote
    mask.replay(ids)
    offered = {vb.bytes[i] for i in mask.allowed_next()}
    assert {b'"', b'",', b'"]', b'"}}'} <= offered       # the quote, and tokens past it
    ids += [vb.by_bytes[b'",'][0]] + tok.encode(' "capacity"]}}', add_special_tokens=False)
    mask.replay(ids)
    assert mask.violations == 0 and mask.escaped == 1
    assert tok.decode(ids).endswith('{"name": "answer", "arguments": {"value": ", '
                                    '"capacity"]}}')
    # the canonical path (`":` then ` "`) ends exactly at the quote: the value is masked
    mask = ActionMask(vb, grammar=grammar, tool_names=["answer"], answers=["417"])
    mask.replay(tok.encode(OPEN + 'answer", "arguments": {"value": "', add_special_tokens=False))
    assert {vb.bytes[i] for i in mask.allowed_next()} == {b"4"}
