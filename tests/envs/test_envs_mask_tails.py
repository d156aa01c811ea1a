"""docs/environments.md's `tails` example (issue 63 item 3): a warehouse world's
`move(item, bin, qty)`, each item to the bins that take it, an integer count among them:
the mask forces the whole call after the item, integer included, and one of the item's
own tails only."""
from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from ablate.harness.masking import ActionMask, token_bytes

TINY = "ablate/models/assets/tiny"
OPEN = '<tool_call>\n{"name": "'


def move_tails(bins: dict[str, list[tuple[str, int]]]) -> dict:
    """As in docs/environments.md: item -> the rest of each allowed call after it."""
    return {"move": {item: [', "bin": ' + json.dumps(b) + ', "qty": ' + str(q) + "}}"
                            for b, q in allowed] for item, allowed in bins.items()}}


GRAMMAR = {"id_key": "item", "after_name": {"move": ', "arguments": {"item": "'}}


def written(tok, mask: ActionMask) -> str:
    """The text the mask forces, choosing the shortest allowed token each time."""
    ids = tok.encode(OPEN, add_special_tokens=False)
    vb, text = mask.vocab, b""
    mask.replay(ids)
    for _ in range(80):
        allowed = mask.allowed_next()
        if allowed is None:
            break
        t = min(allowed, key=lambda i: (len(vb.bytes[i]), i))
        ids.append(t)
        mask.replay(ids)
        text += vb.bytes[t]
    return text.decode()


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(TINY)


def test_a_tail_forces_the_rest_of_the_call_integer_included(tok):
    mask = ActionMask(token_bytes(tok), tool_names=["move"], ids=["crate"], grammar=GRAMMAR,
                      tails=move_tails({"crate": [("b2", 3)]}))
    text = written(tok, mask)
    assert text == 'move", "arguments": {"item": "crate", "bin": "b2", "qty": 3}}'
    assert json.loads('{"name": "' + text) == {
        "name": "move", "arguments": {"item": "crate", "bin": "b2", "qty": 3}}


def test_only_the_items_own_tails_are_offered(tok):
    vb = token_bytes(tok)
    tails = move_tails({"crate": [("b2", 3)], "drum": [("b9", 1)]})
    mask = ActionMask(vb, tool_names=["move"], ids=["crate", "drum"], grammar=GRAMMAR,
                      tails=tails)
    good = tok.encode(OPEN + 'move", "arguments": {"item": "drum", "bin": "b9", "qty": 1}}',
                      add_special_tokens=False)
    mask.replay(good)
    assert mask.violations == 0
    bad = tok.encode(OPEN + 'move", "arguments": {"item": "drum", "bin": "b2", "qty": 3}}',
                     add_special_tokens=False)
    mask = ActionMask(vb, tool_names=["move"], ids=["crate", "drum"], grammar=GRAMMAR,
                      tails=tails)
    mask.replay(bad)
    assert mask.violations > 0
