"""Keyword masking (HarnessConfig.keyword_masking): inside `"keywords": [` each keyword is
one of the episode's candidate keywords (words of the question, of the search results
seen and of the emails read), 1..max_masked_keywords of them, the list always closable.
Scripted grammar checks, escaping, spec round trip, and a random tiny Qwen3 sampled
through HFSampler (directly, and inside rollout) under the mask."""
from __future__ import annotations

import json

import pytest
import torch

from ablate.harness import chat
from ablate.harness.chat import format_tool_call as call
from ablate.harness.config import HarnessConfig, ModeConfig
from ablate.envs.email.tools import ToolCall as BoxCall
from ablate.envs.email.env import tool_result
from ablate.envs.email.masking import episode_candidates
from ablate.harness.episode import Segment
from ablate.harness.masking import ActionMask, keyword_candidates, token_bytes
from ablate.harness.rollout import rollout
from ablate.samplers.hf import HFSampler

from ablate.envs.email.tools import SYSTEM_PROMPT  # noqa: E402
from ablate.envs.email.masking import GRAMMAR  # noqa: E402
import test_harness_util as U
from test_harness_util import db, tok  # noqa: F401  (fixtures)


def ToolCall(*args, **kw):
    return tool_result(BoxCall(*args, **kw))
from test_harness import _recompute, _schemas

INSTRUCT = ModeConfig()
SEARCH_PREFIX = '<tool_call>\n{"name": "search_inbox", "arguments": {"keywords": ['
CALL_SUFFIX = '}}\n</tool_call>'


def _kw_list(text_after_bracket: str):
    """The keyword list the model wrote (text after `"keywords": [`), or None."""
    try:
        lst, _ = json.JSONDecoder().raw_decode("[" + text_after_bracket)
    except ValueError:
        return None
    return lst


# ------------------------------------------------------------------ candidates
def test_keyword_candidates_normalisation():
    kws = keyword_candidates(['Who leads "Project Falcon"? Ask Maria (bob@corp.com).',
                              "Luigi's budget: $5,000 -- ok", "Falcon again"])
    assert kws == ["Who", "leads", "Project", "Falcon", "Ask", "Maria", "bob@corp.com",
                   "Luigi's", "budget", "5,000", "ok", "again"]      # '--' has no letter
    two = keyword_candidates(["Maria Lopez leads."], max_words=2)
    assert two == ["Maria", "Maria Lopez", "Lopez", "Lopez leads", "leads"]
    assert keyword_candidates(["x" * 300 + " y"]) == ["y"]             # tool's char limit


def test_episode_candidates_grow_with_results_and_reads():
    hits = [{"message_id": "m2", "subject": "Project Falcon", "date": "2001-03-12",
             "snippet": "Falcon lead is Maria Lopez."}]
    search = ToolCall(name="search_inbox", arguments={"keywords": ["Falcon"]},
                      observation=json.dumps(hits), hits=["m2"])
    read = ToolCall(name="read_email", arguments={"message_id": "m4"},
                    observation="Message-ID: m4\nFrom: bob@corp.com\nTo: ann@corp.com\n"
                    "Date: 2001-05-14\nSubject: Travel\n\nFlight to Denver booked.",
                    read_id="m4")
    miss = ToolCall(name="search_inbox", arguments={"keywords": ["zzz"]},
                    observation="No results: no email in this inbox contains all of "
                    '["zzz"]. Try fewer or other keywords.')
    q = "Who leads project Falcon?"
    assert episode_candidates([], answer_masking=False, keyword_masking=True,
                              question=q)["keywords"] == ["Who", "leads", "project", "Falcon"]
    got = episode_candidates([search, miss, read], answer_masking=False,
                             keyword_masking=True, question=q)["keywords"]
    assert got == ["Who", "leads", "project", "Falcon", "Project", "lead", "is", "Maria",
                   "Lopez", "Travel", "Flight", "to", "Denver", "booked"]
    # headers that search cannot match (ids, addresses, dates) are not offered
    assert "bob@corp.com" not in got and "m4" not in got and "zzz" not in got
    assert "keywords" not in episode_candidates([search], answer_masking=False)


# ------------------------------------------------------------------ grammar (scripted)
KWS = ["What", "is", "the", "Q3", "budget", "Houston", "office", "Q3 budget"]


def _replay(tok, kws, text, max_keywords=3):
    m = ActionMask(token_bytes(tok), grammar=GRAMMAR, tool_names=["search_inbox", "return_final_answer"],
                   keywords=kws, max_keywords=max_keywords)
    ids = tok.encode(text, add_special_tokens=False)
    return m, m.replay(ids), ids


@pytest.mark.parametrize("keywords,max_kw,ok", [
    (["budget"], 3, True),
    (["Q3", "Houston", "budget"], 3, True),
    (["Q3 budget"], 3, True),                  # a candidate phrase
    (["Q3", "budget", "office"], 2, False),    # over the limit: only `]` after 2
    (["Q3", "budget"], 1, False),
    (["Houston", "Dallas"], 3, False),         # not a candidate
    (["budge"], 3, False),                     # a candidate's prefix is not closed there
    ([], 3, False),                            # never an empty list
])
def test_keyword_grammar(tok, keywords, max_kw, ok):
    m, allowed, ids = _replay(tok, KWS, call("search_inbox", {"keywords": keywords}), max_kw)
    assert (m.violations == 0) is ok, (keywords, m.violations)
    if ok:
        assert m.escaped == 0
        for pos, a in allowed.items():         # the sampled id is always in the recorded set
            assert ids[pos] in a and not set(a) & set(tok.all_special_ids)


def test_keyword_list_closes_only_after_one_and_must_close_at_limit(tok):
    vb = token_bytes(tok)
    prefix = tok.encode(SEARCH_PREFIX, add_special_tokens=False)
    m = ActionMask(vb, grammar=GRAMMAR, tool_names=["search_inbox"], keywords=KWS, max_keywords=2)
    m.replay(prefix)
    first = {vb.bytes[i] for i in m.allowed_next()}
    assert first and all(b.startswith(b'"') for b in first)    # no `]`: >= 1 keyword
    m.replay(prefix + tok.encode('"Q3", "budget', add_special_tokens=False))
    nxt = {vb.bytes[i] for i in m.allowed_next()}
    assert b'"' in nxt and b'",' not in nxt                    # 2 = limit: only `"]...`
    assert all(b == b'"' or b.startswith(b'"]') for b in nxt)
    m = ActionMask(vb, grammar=GRAMMAR, tool_names=["search_inbox"], keywords=KWS, max_keywords=3)
    m.replay(prefix + tok.encode('"Q3"', add_special_tokens=False))
    nxt = {vb.bytes[i] for i in m.allowed_next()}
    assert any(b.startswith(b"]") for b in nxt) and any(b.startswith(b",") for b in nxt)
    with pytest.raises(ValueError):
        ActionMask(vb, grammar=GRAMMAR, keywords=KWS, max_keywords=0)


def test_quote_and_backslash_keywords_are_offered_escaped(tok):
    """Design choice: such keywords are kept, written JSON-escaped (as format_tool_call
    writes them), and parse back to the original; the raw form is refused."""
    kws = keyword_candidates(['He said "stop" then typed say"hi at C:\\temp\\x'])
    assert 'say"hi' in kws and "C:\\temp\\x" in kws and "stop" in kws
    for kw in ('say"hi', "C:\\temp\\x"):
        text = call("search_inbox", {"keywords": [kw, "stop"]})
        assert '\\"' in text or "\\\\" in text
        m, allowed, ids = _replay(tok, kws, text)
        assert m.violations == 0 and m.escaped == 0
        [p] = chat.parse_tool_calls(text)
        assert p.error is None and p.arguments["keywords"] == [kw, "stop"]
    raw = SEARCH_PREFIX + '"say"hi"]' + CALL_SUFFIX            # unescaped: broken JSON
    m, _, _ = _replay(tok, kws, raw)
    assert m.violations >= 1
    raw = SEARCH_PREFIX + '"C:\\temp\\x"]' + CALL_SUFFIX       # single backslashes
    m, _, _ = _replay(tok, kws, raw)
    assert m.violations >= 1


def test_spec_round_trip(tok):
    vb = token_bytes(tok)
    m = ActionMask(vb, grammar=GRAMMAR, tool_names=["search_inbox", "read_email"], ids=["m0"],
                   answers=["x"],
                   keywords=KWS + ['a"b'], max_keywords=2)
    spec = json.loads(json.dumps(m.spec()))                  # travels as JSON (vLLM)
    assert spec["keywords"] == KWS + ['a"b'] and spec["max_keywords"] == 2
    m2 = ActionMask.from_spec(vb, spec)
    assert m2.spec() == m.spec()
    ids = tok.encode(call("search_inbox", {"keywords": ["Q3", 'a"b']}) +
                     call("read_email", {"message_id": "m0"}), add_special_tokens=False)
    assert m.replay(ids) == m2.replay(ids) and m.violations == m2.violations == 0
    # without keyword masking the spec is what it was before (no new keys)
    assert "keywords" not in ActionMask(vb, grammar=GRAMMAR, tool_names=["search_inbox"]).spec()


# ------------------------------------------------------------------ a random model
def test_random_model_under_keyword_mask(tok):
    """The random model completes `"keywords": [` under the mask (rebuilt from its JSON
    spec, as the vLLM engine does): only candidates, 1..max of them, the list parses,
    every sampled id is in its recorded set and the learner's masked log-probs match."""
    vb = token_bytes(tok)
    model = U.tiny_model(tok, seed=3)
    sampler = HFSampler(model, tok)
    kws = keyword_candidates([U.TASKS[0].question, U.EMAILS[0]["body"]], max_words=2)
    base = chat.render_prompt(tok, U.TASKS[0], _schemas(), INSTRUCT, SYSTEM_PROMPT)
    pre = tok.encode(SEARCH_PREFIX, add_special_tokens=False)
    n = 24
    spec = json.loads(json.dumps(ActionMask(vb, grammar=GRAMMAR, tool_names=["search_inbox"], keywords=kws,
                                            max_keywords=3).spec()))
    masks = [ActionMask.from_spec(vb, spec) for _ in range(n)]
    for m in masks:
        m.replay(pre)

    class Shift:                      # the mask sees the prefix as generated text
        def __init__(self, m):
            self.m = m

        def __call__(self, gen, logits):
            return self.m(pre + list(gen), logits)

    outs = sampler.generate([base + pre] * n, max_new_tokens=40, temperature=1.5,
                            logits_processors=[Shift(m) for m in masks], seed=7)
    counts = []
    for m, o in zip(masks, outs):
        m.replay(pre + o.ids)
        assert m.violations == 0 and m.escaped == 0
        n0 = len(base) + len(pre)
        allowed = {n0 + p - len(pre): a for p, a in m.allowed.items() if p >= len(pre)}
        ids = base + pre + o.ids
        for pos, a in allowed.items():
            assert ids[pos] in a
        seg = Segment(ids=ids, mask=[0] * n0 + [1] * len(o.ids),
                      logprobs=[0.0] * n0 + o.logprobs, allowed=allowed)
        lp = _recompute(model, seg, 1.5)[n0:]
        assert torch.allclose(lp, torch.tensor(o.logprobs), atol=1e-4)
        lst = _kw_list(tok.decode(o.ids))
        if lst is None:               # cut by max_new_tokens inside the list
            assert m._kind in ("keywords", "kwmore", "kwend")
            continue
        assert 1 <= len(lst) <= 3 and set(lst) <= set(kws), lst
        counts.append(len(lst))
    assert len(counts) >= n // 2 and len(set(counts)) >= 2, counts


class PrefixSampler:
    """HFSampler whose every turn starts with a forced search-call opening, and, once
    the model has closed the keyword list, a forced `}}\\n</tool_call><|im_end|>`. The
    model itself writes the keywords, under the rollout's own masks. `forced` counts the
    forced positions per call (the learner check skips them: they are the test's, not
    the harness's)."""

    def __init__(self, model, tok):
        self.inner, self.tok = HFSampler(model, tok), tok
        self.pre = tok.encode(SEARCH_PREFIX, add_special_tokens=False)
        self.im_end = tok.convert_tokens_to_ids("<|im_end|>")
        self.forced: list[list[set[int]]] = []

    def generate(self, prompts, *, logits_processors=None, **kw):
        procs = logits_processors or [None] * len(prompts)
        forced = [set() for _ in prompts]
        self.forced.append(forced)
        wrapped = [self._wrap(p, f) for p, f in zip(procs, forced)]
        return self.inner.generate(prompts, logits_processors=wrapped, **kw)

    def _wrap(self, proc, forced):
        def force(gen, logits, tid):
            forced.add(len(gen))
            out = torch.full_like(logits, float("-inf"))
            out[tid] = 0.0
            return out

        def fn(gen, logits):
            gen = list(gen)
            if len(gen) < len(self.pre):
                if proc is not None:
                    proc(gen, logits)          # keep the mask in step
                return force(gen, logits, self.pre[len(gen)])
            text = self.tok.decode(gen[len(self.pre):])
            try:
                _, end = json.JSONDecoder().raw_decode("[" + text)
            except ValueError:
                return proc(gen, logits) if proc is not None else logits
            rest = text[end - 1:]
            if CALL_SUFFIX.startswith(rest):
                need = self.tok.encode(CALL_SUFFIX[len(rest):], add_special_tokens=False)
                return force(gen, logits, need[0] if need else self.im_end)
            return force(gen, logits, self.im_end)   # ran past `]` otherwise: end turn
        return fn


def test_rollout_with_keyword_masking_random_model(tok, db):
    h = HarnessConfig(max_new_tokens_per_turn=64, action_masking=True,
                      answer_masking=True, keyword_masking=True, max_masked_keywords=3)
    model = U.tiny_model(tok, seed=1)
    sampler = PrefixSampler(model, tok)
    eps = rollout(U.TASKS, group_size=3, sampler=sampler, tokenizer=tok,
                  env=U.email_env(db), harness_cfg=h, mode_cfg=INSTRUCT,
                  max_turns=3, temperature=1.0, seed=2)
    n_search, n_kw_pos, later_words = 0, 0, 0
    for ep in eps:
        for k, c in enumerate(ep.calls):
            if c.name != "search_inbox":
                continue
            cands = episode_candidates(ep.calls[:k], answer_masking=False,
                                       keyword_masking=True,
                                       question=ep.task.question)["keywords"]
            assert c.error is None, c.observation
            kws = c.arguments["keywords"]
            assert 1 <= len(kws) <= 3 and set(kws) <= set(cands), (kws, cands)
            q = set(keyword_candidates([ep.task.question]))
            later_words += len(set(kws) - q)
            n_search += 1
        [seg] = ep.segments
        lp = _recompute(model, seg, 1.0)
        gen_pos = [p for p, m in enumerate(seg.mask) if m]
        turn_starts = [p for p in gen_pos if not seg.mask[p - 1]]
        skip = set()
        for t, start in enumerate(turn_starts):       # positions the test forced
            f = sampler.forced[t][eps.index(ep) - sum(
                1 for e in eps[:eps.index(ep)] if e.num_turns <= t)]
            skip |= {start + i for i in f}
        for pos, a in seg.allowed.items():
            assert seg.mask[pos] == 1 and seg.ids[pos] in a
            n_kw_pos += pos not in skip
        free = [p for p in gen_pos if p not in skip]
        assert torch.allclose(lp[free], torch.tensor(seg.logprobs)[free], atol=1e-4)
    assert n_search >= len(eps) and n_kw_pos > 20
    assert later_words > 0          # words first seen in results were searched for


def test_config_needs_action_masking():
    from ablate.apps.cli import compose_config
    from ablate.loop.config import ConfigError, validate
    cfg = compose_config(["harness.action_masking=false", "harness.answer_masking=false",
                          "harness.keyword_masking=true"])
    assert cfg.harness.max_masked_keywords == 3 and not cfg.harness.action_masking
    with pytest.raises(ConfigError, match="keyword_masking"):
        validate(cfg)
    cfg.harness.action_masking = True
    validate(cfg)
