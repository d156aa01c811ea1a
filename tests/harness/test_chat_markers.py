"""Markers that are no single token of a vocabulary (SmolLM2's 49k BPE writes <think>,
</think> and <tool_call> as plain text pieces) are found in the bytes, never mapped to
the unknown token's id 0; the action mask follows the model's tool-call syntax
(ablate.harness.chat.ToolFormat.mask_spec)."""
from __future__ import annotations

import json

import pytest

from ablate.harness.chat import strip_thinking_ids
from ablate.harness.masking import ActionMask, TokenBytes, marker_positions, strip_thinking
from ablate.harness.chat import TOOL_FORMATS, ChatConventions, marker_id

from test_templates import smollm, tiny  # noqa: F401  (fixtures)
GRAMMAR = {"id_key": "message_id", "after_name": {"read_email": ', "arguments": {"message_id": "'},
           "after_id": "}}"}


def test_marker_ids_never_the_unknown_token(tiny, smollm):
    assert smollm.convert_tokens_to_ids("<think>") == smollm.unk_token_id == 0  # the trap
    assert marker_id(smollm, "<think>") is None and marker_id(smollm, "<|im_end|>") == 2
    assert marker_id(tiny, "<think>") == tiny.convert_tokens_to_ids("<think>") > 0
    vocab = TokenBytes(smollm)
    assert vocab.think_open is None and vocab.think_close is None
    assert len(vocab.think_close_ids) > 1 and smollm.decode(vocab.think_close_ids) == "</think>"
    conv = ChatConventions.from_tokenizer(smollm)
    assert conv.think_ids == (None, None) and not conv.opens_think
    assert smollm.convert_ids_to_tokens(0) == "<|endoftext|>"     # a real token there
    assert conv.stop_ids == [2, 0]


def test_marker_positions_in_bpe_pieces(smollm):
    vocab = TokenBytes(smollm)
    ids = smollm.encode("Plan:<think>find it</think>\nThe call", add_special_tokens=False)
    (o0, o1), = marker_positions(vocab, ids, "<think>")
    (c0, c1), = marker_positions(vocab, ids, "</think>")
    assert "<think>" in smollm.decode(ids[o0:o1]) and "<think>" not in smollm.decode(ids[o0 + 1:o1])
    assert "</think>" in smollm.decode(ids[c0:c1]) and o1 <= c0 + 1
    assert smollm.decode(strip_thinking(smollm, vocab, ids + [2])) == "The call<|im_end|>"


def test_strip_thinking_single_token_path_unchanged(tiny):
    vocab = TokenBytes(tiny)
    ids = tiny.encode("<think>\nplan\n</think>\n\nanswer", add_special_tokens=False)
    assert strip_thinking(tiny, vocab, ids) == strip_thinking_ids(tiny, ids)


def test_think_budget_forces_a_multi_token_close(smollm):
    vocab = TokenBytes(smollm)
    mask = ActionMask(vocab, think_open=True, max_think_tokens=2)
    filler = smollm.encode(" hmm so", add_special_tokens=False)[:2]
    for t in filler:
        assert mask.allowed_next() is None
        mask.advance(t)
    forced = []
    for _ in vocab.think_close_ids:
        (t,) = mask.allowed_next()
        forced.append(t)
        mask.advance(t)
    assert forced == vocab.think_close_ids and mask.allowed_next() is None
    assert not mask._think_open and mask.violations == 0


@pytest.mark.parametrize("fmt", ["json_text", "llama3_json"])
def test_mask_constrains_bare_json_calls(smollm, fmt):
    """Without <tool_call> delimiters the name and id values are still constrained, and
    the forced continuation writes the format's own arguments key."""
    f = TOOL_FORMATS[fmt]
    vocab = TokenBytes(smollm)
    kw = dict(tool_names=["read_email", "search_inbox"], ids=["<a1.x@enron>"], grammar=GRAMMAR)
    mask = ActionMask(vocab, **kw, **f.mask_spec())
    text = "Let me read it. " + f.format_call("read_email", {"message_id": "<a1.x@enron>"})
    ids = smollm.encode(text, add_special_tokens=False)
    allowed = mask.replay(ids)
    assert mask.violations == 0 and mask.escaped == 0 and len(allowed) >= 3
    assert all(len(a) < 1000 for a in allowed.values())
    key = f'"{f.arguments_key}": {{"message_id": "'.encode()
    assert [c.endswith(key) for c in mask.cands["name"]] == [True, False]
    wrong = smollm.encode('{"name": "delete_all"', add_special_tokens=False)
    bad = ActionMask(vocab, **kw, **f.mask_spec())
    bad.replay(wrong)
    assert bad.violations > 0                       # an unknown tool name is masked out
    hermes = ActionMask(vocab, **kw)                # hermes: only inside <tool_call>
    hermes.replay(wrong)
    assert hermes.allowed == {}


def test_mask_spec_round_trips_the_syntax(smollm):
    vocab = TokenBytes(smollm)
    for f in TOOL_FORMATS.values():
        m = ActionMask(vocab, tool_names=["read_email"], **f.mask_spec())
        again = ActionMask.from_spec(vocab, json.loads(json.dumps(m.spec())))
        assert again.spec() == m.spec()
    assert TOOL_FORMATS["hermes"].mask_spec() == {}
    assert TOOL_FORMATS["llama3_json"].mask_spec()["arguments_key"] == "parameters"
