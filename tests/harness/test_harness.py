"""Harness: tokenizer, chat conventions, rollout rules (scripted sampler), masking, and
token exactness of real sampled episodes (random tiny Qwen3 + HFSampler)."""
from __future__ import annotations

import json
import re

import pytest
import torch

from ablate.harness import chat
from ablate.harness.chat import format_tool_call as call
from ablate.harness.config import HarnessConfig, ModeConfig
from ablate.harness.masking import IDK, ActionMask, answer_spans, token_bytes
from ablate.harness.rollout import rollout
from ablate.models.tokenizer import MARKER_TOKENS, SPECIAL_TOKENS, build_tokenizer
from ablate.samplers.hf import HFSampler

from ablate.envs.email.tools import SYSTEM_PROMPT  # noqa: E402
from ablate.envs.email.masking import GRAMMAR  # noqa: E402
import test_harness_util as U
from test_harness_util import db, tok  # noqa: F401  (fixtures)

INSTRUCT = ModeConfig()
THINKING = ModeConfig(name="thinking", enable_thinking=True, max_think_tokens=16)
ANSWER = call("return_final_answer", {"answer": "$5,000", "sources": ["m0"]})
SEARCH = call("search_inbox", {"keywords": ["budget"]})


def run(tok, db, script, harness=None, mode=INSTRUCT, max_turns=5, tasks=None, group=1):
    sampler = U.ScriptedSampler(tok, script)
    eps = rollout(tasks or U.TASKS[:1], group_size=group, sampler=sampler, tokenizer=tok,
                  env=U.email_env(db), harness_cfg=harness or HarnessConfig(),
                  mode_cfg=mode, max_turns=max_turns, temperature=1.0, seed=0)
    return eps, sampler


# ------------------------------------------------------------------ tokenizer
def test_tokenizer_special_tokens_template_and_determinism(tok):
    for t in SPECIAL_TOKENS + MARKER_TOKENS + ["m0", "m5"]:
        assert len(tok.encode(t, add_special_tokens=False)) == 1, t
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    assert "<|im_end|>" in tok.all_special_tokens and "<think>" not in tok.all_special_tokens
    again = build_tokenizer(U.corpus_texts(), 600, extra_tokens=[e["message_id"]
                                                                for e in U.EMAILS])
    assert again.backend_tokenizer.to_str() == tok.backend_tokenizer.to_str()
    msgs = [{"role": "user", "content": "q"},
            {"role": "assistant", "content": "<think>\nsecret plan\n</think>\n\nact 1"},
            {"role": "tool", "content": "obs"},
            {"role": "assistant", "content": "<think>\nlast plan\n</think>\n\nact 2"}]
    text = tok.apply_chat_template(msgs, tokenize=False)
    assert "secret plan" not in text and "act 1" in text and "last plan" in text
    assert "<|im_start|>user\n<tool_response>\nobs\n</tool_response><|im_end|>" in text
    gen = tok.apply_chat_template(msgs[:1], tokenize=False, add_generation_prompt=True,
                                  enable_thinking=False)
    assert gen.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    gen = tok.apply_chat_template(msgs[:1], tokenize=False, add_generation_prompt=True,
                                  enable_thinking=True)
    assert gen.endswith("<|im_start|>assistant\n")


# ------------------------------------------------------------------ chat
def test_prompt_states_inbox_and_date_and_tools(tok):
    text = tok.decode(chat.render_prompt(tok, U.TASKS[0], _schemas(), INSTRUCT, SYSTEM_PROMPT))
    assert U.INBOX in text and "Today's date is 2001-12-01." in text
    assert '"name": "search_inbox"' in text and text.endswith(chat.EMPTY_THINK)
    text = tok.decode(chat.render_prompt(tok, U.TASKS[0], _schemas(), THINKING, SYSTEM_PROMPT))
    assert text.endswith("<|im_start|>assistant\n")


def _schemas():
    from ablate.envs.email.tools import TOOL_SCHEMAS
    return TOOL_SCHEMAS


def test_format_and_parse_roundtrip():
    args = {"answer": 'He said "hi" — ok', "sources": ["m1", "m2"]}
    text = call("return_final_answer", args)
    assert text == ('<tool_call>\n{"name": "return_final_answer", "arguments": {"answer": '
                    '"He said \\"hi\\" — ok", "sources": ["m1", "m2"]}}\n</tool_call>')
    [p] = chat.parse_tool_calls("some words " + text + " trailing")
    assert (p.name, p.arguments, p.error) == ("return_final_answer", args, None)
    two = chat.parse_tool_calls(SEARCH + "\n" + ANSWER)
    assert [c.name for c in two] == ["search_inbox", "return_final_answer"]


@pytest.mark.parametrize("text,needle", [
    ("no call here", "no tool call"),
    ("<tool_call>\n{\"name\": \"read_email\", \"arguments\": {\n</tool_call>", "not valid JSON"),
    ("<tool_call>\n[1, 2]\n</tool_call>", "JSON object"),
    ("<tool_call>\n{\"arguments\": {}}\n</tool_call>", 'no "name"'),
    ("<tool_call>\n{\"name\": \"read_email\", \"arguments\": [\"m1\"]}\n</tool_call>",
     "must be a JSON object"),
    ("<tool_call>\n{\"name\": \"read_email\"", "not closed"),
    ("<tool_call>" + "[" * 100000 + "</tool_call>", ""),
])
def test_parse_malformed_never_raises(text, needle):
    calls = chat.parse_tool_calls(text)
    assert calls and calls[-1].error is not None and calls[-1].arguments is None
    assert needle in calls[-1].error


def test_split_thinking():
    assert chat.split_thinking("<think>\nplan\n</think>\n\nact") == ("plan", "act")
    assert chat.split_thinking("act") == ("", "act")
    assert chat.split_thinking("<think>\nunfinished") == ("unfinished", "")
    assert chat.split_thinking("implicit\n</think>\n\nact") == ("implicit", "act")


def test_observation_ids(tok):
    text = tok.decode(chat.observation_ids(tok, ["A", "B"], INSTRUCT))
    assert text == ("\n<|im_start|>user\n<tool_response>\nA\n</tool_response>\n"
                    "<tool_response>\nB\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
                    "<think>\n\n</think>\n\n")
    text = tok.decode(chat.observation_ids(tok, ["A"], THINKING, turn_closed=False))
    assert text.startswith("<|im_end|>\n") and text.endswith("<|im_start|>assistant\n")


# ------------------------------------------------------------------ demonstrations = rollout
STEPS = [(SEARCH, None), (call("read_email", {"message_id": "m0"}), None), (ANSWER, None)]


def _script_from(steps):
    return lambda prompt, turn: steps[turn][0]


def _demo_steps(eps):
    return [(t.text.replace("<|im_end|>", ""), [c.observation for c in t.calls])
            for t in eps[0].turns]


@pytest.mark.parametrize("mode", [INSTRUCT, THINKING], ids=["instruct", "thinking"])
def test_demonstration_is_token_identical_to_rollout(tok, db, mode):
    steps = STEPS if mode is INSTRUCT else [
        (f"<think>\nplan {k}\n</think>\n\n{t}", o) for k, (t, o) in enumerate(STEPS)]
    eps, _ = run(tok, db, _script_from(steps), mode=mode)
    ep = eps[0]
    assert ep.end_reason == "answer" and ep.final_answer == "$5,000" and ep.sources == ["m0"]
    segs = chat.render_demonstration_segments(tok, ep.task, _demo_steps(eps), mode,
                                              _schemas(), SYSTEM_PROMPT)
    assert [(s.ids, s.mask) for s in ep.segments] == segs
    if mode is INSTRUCT:
        ids, mask = chat.render_demonstration(tok, ep.task, _demo_steps(eps), mode, _schemas(),
                                              SYSTEM_PROMPT)
        trained = tok.decode([i for i, m in zip(ids, mask) if m])
        assert trained == "".join(t + "<|im_end|>" for t, _ in steps)
    else:
        with pytest.raises(ValueError, match="render_demonstration_segments"):
            chat.render_demonstration(tok, ep.task, _demo_steps(eps), mode, _schemas(),
                                              SYSTEM_PROMPT)


# ------------------------------------------------------------------ rollout rules
def test_instruct_episode_is_one_segment_masked_on_generated_ids(tok, db):
    eps, _ = run(tok, db, _script_from(STEPS))
    ep = eps[0]
    [seg] = ep.segments
    gen = [i for i, m in zip(seg.ids, seg.mask) if m]
    assert tok.decode(gen) == "".join(t + "<|im_end|>" for t, _ in STEPS)
    assert all((lp == -1.0) == bool(m) for lp, m in zip(seg.logprobs, seg.mask))
    assert [c.name for c in ep.calls] == ["search_inbox", "read_email", "return_final_answer"]
    assert ep.calls[0].extra["hits"] and ep.calls[1].extra["read_id"] == "m0"
    assert ep.calls[1].extra["new_read"] and ep.calls[1].state_changed
    b = ep.behaviour()
    assert b["searches"] == 1 and b["reads"] == 1 and b["read_after_hit"]
    assert b["fabricated_sources"] == 0 and b["evidence_read"] == 1 and b["turns"] == 3
    assert seg.allowed is None


def test_thinking_strips_past_think_and_instruct_never_opens(tok, db):
    steps = [(f"<think>\nsecret-{k}\n</think>\n\n{t}", o) for k, (t, o) in enumerate(STEPS)]
    eps, sampler = run(tok, db, _script_from(steps), mode=THINKING)
    ep = eps[0]
    assert len(ep.segments) == 3 and ep.end_reason == "answer"
    for k, prompt in enumerate(sampler.prompts):
        for j in range(3):
            assert (f"secret-{j}" in prompt) is False   # never in any prompt
        assert prompt.count("<tool_call>") == k + 2      # (+2: the tools header)
    assert [t.think_tokens for t in ep.turns] == [
        len(tok.encode(f"<think>\nsecret-{k}\n</think>", add_special_tokens=False))
        for k in range(3)]
    for seg in ep.segments:                              # each turn's think is trained
        assert "secret" in tok.decode([i for i, m in zip(seg.ids, seg.mask) if m])
    eps, sampler = run(tok, db, _script_from(STEPS), mode=INSTRUCT)
    for prompt in sampler.prompts:
        assert prompt.count("<think>") == prompt.count(chat.EMPTY_THINK) >= 1
    assert all(t.think_tokens == 0 for t in eps[0].turns)


@pytest.mark.parametrize("bad,err", [
    ("I think the answer is 5.", "no tool call"),
    ("<tool_call>\n{\"name\": \"search_inbox\", \"arguments\": {\"keywords\": [\"x\"]\n"
     "</tool_call>", "not valid JSON"),
    (call("delete_inbox", {"all": True}), "unknown tool"),
    (call("search_inbox", {"keywords": "budget"}), "keywords"),
    (call("read_email", {"message_id": 7}), "message_id"),
])
def test_malformed_continue_then_end(tok, db, bad, err):
    eps, sampler = run(tok, db, lambda p, t: bad if t == 0 else ANSWER)
    ep = eps[0]
    assert ep.end_reason == "answer" and ep.turns[0].calls[0].error
    assert err in ep.turns[0].calls[0].error
    assert ep.turns[0].calls[0].error.split(".")[0] in sampler.prompts[1]   # model sees it
    assert ep.behaviour()["malformed_calls"] == 1
    eps, _ = run(tok, db, lambda p, t: bad, harness=HarnessConfig(on_malformed="end"))
    assert eps[0].end_reason == "malformed" and eps[0].num_turns == 1
    eps, _ = run(tok, db, lambda p, t: bad, harness=HarnessConfig(max_malformed=2),
                 max_turns=10)
    assert eps[0].end_reason == "malformed" and eps[0].num_turns == 3


def test_missing_email_is_not_malformed(tok, db):
    eps, _ = run(tok, db, lambda p, t: call("read_email", {"message_id": "nope"})
                 if t == 0 else ANSWER)
    c = eps[0].turns[0].calls[0]
    assert c.error is None and c.extra["read_id"] is None and "not found" in c.observation


def test_calls_after_answer_and_calls_per_turn(tok, db):
    text = ANSWER + "\n" + SEARCH + " and more text"
    eps, _ = run(tok, db, lambda p, t: text, harness=HarnessConfig(calls_per_turn="all"))
    assert eps[0].end_reason == "answer" and [c.name for c in eps[0].calls] == [
        "return_final_answer"]
    two = SEARCH + "\n" + call("read_email", {"message_id": "m0"})
    eps, sampler = run(tok, db, lambda p, t: two if t == 0 else ANSWER,
                       harness=HarnessConfig(calls_per_turn="all"))
    assert [c.name for c in eps[0].turns[0].calls] == ["search_inbox", "read_email"]
    assert sampler.prompts[1].count("<tool_response>") == 2
    eps, sampler = run(tok, db, lambda p, t: two if t == 0 else ANSWER,
                       harness=HarnessConfig(calls_per_turn="first"))
    assert [c.name for c in eps[0].turns[0].calls] == ["search_inbox"]
    assert sampler.prompts[1].count("<tool_response>") == 1


def test_endless_text_and_token_budgets(tok, db):
    eps, _ = run(tok, db, lambda p, t: "endless")
    ep = eps[0]
    assert ep.end_reason == "max_tokens" and ep.num_turns == 1
    assert ep.turns[0].completion_tokens == HarnessConfig().max_new_tokens_per_turn
    h = HarnessConfig(max_new_tokens_per_turn=40, max_tokens_per_episode=70)
    eps, _ = run(tok, db, lambda p, t: SEARCH, harness=h, max_turns=10)
    ep = eps[0]
    assert ep.end_reason == "max_tokens" and ep.response_tokens == 70
    assert sum(ep.segments[0].mask) == 70
    eps, _ = run(tok, db, lambda p, t: SEARCH, max_turns=3)
    assert eps[0].end_reason == "max_turns" and eps[0].num_turns == 3


def test_groups_and_samples(tok, db):
    eps, _ = run(tok, db, _script_from(STEPS), tasks=U.TASKS, group=3)
    assert [(e.group, e.sample, e.task.id) for e in eps] == [
        (g, k, t.id) for g, t in enumerate(U.TASKS) for k in range(3)]


def test_render_episode_text(tok, db):
    eps, _ = run(tok, db, _script_from(STEPS))
    eps[0].correct = True
    text = chat.render_episode_text(eps[0], {"correctness": 1.07, "process": 0.15})
    for needle in ("Q: What is the Q3 budget", "call search_inbox", "info hits=[",
                   "read_id=m0 new_read=True", "[state changed]", "'$5,000'", "CORRECT",
                   "correctness=1.07"):
        assert needle in text, needle


# ------------------------------------------------------------------ masking
def test_answer_spans():
    spans = answer_spans(["The Q3 budget is $5,000."])
    assert "$5,000" in spans and "budget is $5,000" in spans and "The" in spans
    assert all(len(s.split()) <= 3 for s in spans)


def test_mask_allows_exactly_candidates(tok):
    vb = token_bytes(tok)
    m = ActionMask(vb, grammar=GRAMMAR, tool_names=["search_inbox", "read_email"], ids=["m2", "m3"],
                   answers=["Maria Lopez", IDK])
    text = call("return_final_answer", {"answer": "Maria Lopez", "sources": ["m3", "m2"]})
    ids = tok.encode(text, add_special_tokens=False)
    allowed = m.replay(ids)
    assert m.violations == 1          # return_final_answer was not among the tool names
    def strings(pos):
        return {tok.decode([i]) for i in allowed[pos]}
    first_id = ids.index(tok.convert_tokens_to_ids("m3"))
    assert strings(first_id) == {"m", "m2", "m3"}
    for pos, a in allowed.items():    # never a special token at a constrained position
        assert not set(a) & set(tok.all_special_ids)


def test_think_budget_forces_close(tok):
    vb = token_bytes(tok)
    m = ActionMask(vb, grammar=GRAMMAR, max_think_tokens=3)
    ids = tok.encode("<think>\na b c d e\n</think>", add_special_tokens=False)
    allowed = m.replay(ids)
    close = tok.convert_tokens_to_ids("</think>")
    assert allowed and all(a == [close] for a in allowed.values())
    assert min(allowed) == 4          # <think> + 3 thinking tokens, then forced


# ------------------------------------------------------------------ real sampling
def _hf_episodes(tok, db, harness, mode=INSTRUCT, seed=0, temperature=1.0, group=4,
                 max_turns=4):
    model = U.tiny_model(tok, seed=1)
    sampler = HFSampler(model, tok)
    eps = rollout(U.TASKS, group_size=group, sampler=sampler, tokenizer=tok,
                  env=U.email_env(db), harness_cfg=harness, mode_cfg=mode,
                  max_turns=max_turns, temperature=temperature, seed=seed)
    return eps, model


def _recompute(model, seg, temperature):
    """The learner's view: plain forward, logits / T, the recorded mask, log_softmax."""
    ids = torch.tensor([seg.ids])
    with torch.no_grad():
        logits = model(ids).logits[0, :-1].float() / temperature
    if seg.allowed:
        for pos, allowed in seg.allowed.items():
            row = torch.full_like(logits[pos - 1], float("-inf"))
            row[allowed] = logits[pos - 1, allowed]
            logits[pos - 1] = row
    lp = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:].view(-1, 1)).view(-1)
    return torch.cat([torch.zeros(1), lp])


@pytest.mark.parametrize("masking,mode", [(False, INSTRUCT), (True, INSTRUCT),
                                          (True, THINKING)],
                         ids=["plain", "masked", "masked-thinking"])
def test_token_exactness_of_sampled_episodes(tok, db, masking, mode):
    h = HarnessConfig(max_new_tokens_per_turn=48, action_masking=masking,
                      answer_masking=masking)
    eps, model = _hf_episodes(tok, db, h, mode=mode, temperature=0.8)
    n_gen = 0
    for ep in eps:
        assert len(ep.segments) == (ep.num_turns if mode.enable_thinking else 1)
        gen_total = 0
        for seg in ep.segments:
            lp = _recompute(model, seg, 0.8)
            m = torch.tensor(seg.mask, dtype=torch.bool)
            assert torch.allclose(lp[m], torch.tensor(seg.logprobs)[m], atol=1e-4)
            assert all(v == 0.0 for v, k in zip(seg.logprobs, seg.mask) if not k)
            gen_total += int(m.sum())
        assert gen_total == ep.response_tokens      # masked tokens = the generated ones
        n_gen += gen_total
    assert n_gen > 100


def test_same_seed_same_episodes(tok, db):
    h = HarnessConfig(max_new_tokens_per_turn=32, action_masking=True)
    a, _ = _hf_episodes(tok, db, h, seed=5, group=2, max_turns=3)
    b, _ = _hf_episodes(tok, db, h, seed=5, group=2, max_turns=3)
    c, _ = _hf_episodes(tok, db, h, seed=6, group=2, max_turns=3)
    key = lambda eps: [(s.ids, s.logprobs) for e in eps for s in e.segments]  # noqa: E731
    assert key(a) == key(b) and key(a) != key(c)


def test_masked_random_model_emits_only_known_tools_and_context_ids(tok, db):
    # drive the model through call openings: the script-free way is a prompt suffix, so
    # here a scripted prefix opens each call and the random model completes it
    from ablate.envs.email.tools import TOOL_NAMES
    vb = token_bytes(tok)
    model = U.tiny_model(tok, seed=3)
    sampler = HFSampler(model, tok)
    context_ids = ["m0", "m4"]
    prefixes = ['<tool_call>\n{"name": "', '<tool_call>\n{"name": "read_email", '
                '"arguments": {"message_id": "', '<tool_call>\n{"name": '
                '"return_final_answer", "arguments": {"answer": "x", "sources": [']
    base = chat.render_prompt(tok, U.TASKS[0], _schemas(), INSTRUCT, SYSTEM_PROMPT)
    names, ids_seen = set(), []
    for prefix in prefixes:
        pre = tok.encode(prefix, add_special_tokens=False)
        masks = [ActionMask(vb, grammar=GRAMMAR, tool_names=list(TOOL_NAMES), ids=context_ids)
                 for _ in range(24)]
        for m in masks:
            m.replay(pre)             # the mask has seen the prefix as generated text
        class Shift:                  # present generated ids to the mask with the prefix
            def __init__(self, m):
                self.m = m
            def __call__(self, gen, logits):
                return self.m(pre + list(gen), logits)
        outs = sampler.generate([base + pre] * 24, max_new_tokens=12, temperature=1.5,
                                logits_processors=[Shift(m) for m in masks], seed=11)
        for m, o in zip(masks, outs):
            m.replay(pre + o.ids)     # the last token was never shown to the processor
            assert m.violations == 0 and m.escaped == 0
            # exactness under the mask: a plain forward restricted to the recorded sets
            n0 = len(base) + len(pre)
            seg_allowed = {n0 + p - len(pre): a for p, a in m.allowed.items() if p >= len(pre)}
            assert seg_allowed and min(seg_allowed) == n0
            from ablate.harness.episode import Segment
            seg = Segment(ids=base + pre + o.ids, mask=[0] * n0 + [1] * len(o.ids),
                          logprobs=[0.0] * n0 + o.logprobs, allowed=seg_allowed)
            lp = _recompute(model, seg, 1.5)[n0:]
            assert torch.allclose(lp, torch.tensor(o.logprobs), atol=1e-4)
            text = prefix + tok.decode(o.ids)
            if prefix.endswith('"name": "'):
                names.add(text[len(prefix):].split('"')[0])
            else:
                tail = text[len(prefix):]
                if prefix.endswith("["):
                    # the complete quoted ids (12 tokens may stop inside the list)
                    got = re.findall(r'"([^"]*)"', tail.split("]")[0])
                else:
                    got = [tail.split('"')[0]]
                ids_seen += got
    assert names <= set(TOOL_NAMES) and len(names) >= 2
    assert ids_seen and set(ids_seen) <= set(context_ids)


def test_masked_rollout_ids_come_from_context(tok, db):
    h = HarnessConfig(max_new_tokens_per_turn=48, action_masking=True, answer_masking=True)
    eps, _ = _hf_episodes(tok, db, h, temperature=1.0, group=6, max_turns=4)
    for ep in eps:
        seen: set[str] = set()
        for c in ep.calls:
            if c.arguments and "message_id" in c.arguments and c.error is None:
                assert c.arguments["message_id"] in seen
            if c.name and c.error is None:
                assert c.name in {"search_inbox", "read_email", "return_final_answer"}
            seen |= set(c.extra.get("hits", []))
        assert set(ep.sources) <= seen


@pytest.mark.heavy
def test_primed_model_masked_episodes_are_token_exact(tok, db):
    """A tiny model fitted on scripted episodes really opens calls, so its masked
    rollouts reach constrained values and forced </think>; logprobs stay exact."""
    model, _ = U.primed_model(tok, db, steps=80)
    for mode in (INSTRUCT, ModeConfig(name="thinking", enable_thinking=True,
                                      max_think_tokens=2)):
        eps = rollout(U.TASKS, group_size=4, sampler=HFSampler(model, tok), tokenizer=tok,
                      env=U.compact_env(db),
                      harness_cfg=HarnessConfig(max_new_tokens_per_turn=64,
                                                action_masking=True, answer_masking=True),
                      mode_cfg=mode, max_turns=4, temperature=1.0, seed=0)
        n_allowed = 0
        for ep in eps:
            for seg in ep.segments:
                n_allowed += len(seg.allowed or {})
                lp = _recompute(model, seg, 1.0)
                m = torch.tensor(seg.mask, dtype=torch.bool)
                assert torch.allclose(lp[m], torch.tensor(seg.logprobs)[m], atol=1e-4)
                for pos in (seg.allowed or {}):
                    assert seg.mask[pos] == 1 and seg.ids[pos] in seg.allowed[pos]
            for c in ep.calls:
                if c.error is None:
                    assert c.name in {"search_inbox", "read_email", "return_final_answer"}
        assert n_allowed > 20


def test_mask_forces_canonical_keys_between_values(tok):
    """After a constrained value the call's canonical continuation is forced: a model
    cannot write an invented key (seen: `"answer": "x", "arguments": [` then spaces)."""
    vb = token_bytes(tok)
    m = ActionMask(vb, grammar=GRAMMAR, tool_names=["search_inbox", "read_email", "return_final_answer"],
                   ids=["m0", "m4"], answers=["Phoenix"])
    pre = '<tool_call>\n{"name": "return_final_answer", "arguments": {"answer": "Phoenix"'
    m.replay(tok.encode(pre, add_special_tokens=False))
    want = b', "sources": ['
    allowed = m.allowed_next()
    assert allowed
    for t in allowed:
        b = vb.bytes[t]
        assert want.startswith(b) or b.startswith(want), b
    # and a read_email name forces its one argument key, then the id, then `}}`
    m2 = ActionMask(vb, grammar=GRAMMAR, tool_names=["read_email"], ids=["m0", "m4"])
    text = b""
    ids = tok.encode('<tool_call>\n{"name": "', add_special_tokens=False)
    m2.replay(ids)
    for _ in range(40):   # always take the longest allowed token: the forced path
        allowed = m2.allowed_next()
        if allowed is None:
            break
        t = max(allowed, key=lambda i: (len(vb.bytes[i]), -i))
        ids.append(t)
        m2.replay(ids)
        text += vb.bytes[t]
    s = text.decode()
    assert s in ('read_email", "arguments": {"message_id": "m0"}}',
                 'read_email", "arguments": {"message_id": "m4"}}'), s
