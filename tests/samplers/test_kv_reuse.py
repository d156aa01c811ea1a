"""Incremental decoding: the HF sampler's KV store (reuse across turns, the shared prefix)
gives the same episodes as re-encoding every prompt from token 0, with logprobs equal to
the learner's recompute; tokens encoded per episode; caches freed; the context cap."""
from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch

from ablate.envs.email.tools import SYSTEM_PROMPT, TOOL_SCHEMAS
from ablate.harness import chat
from ablate.harness.config import HarnessConfig, ModeConfig
from ablate.harness.rollout import rollout
from ablate.samplers.hf import HFSampler

import test_harness_util as U

INSTRUCT = ModeConfig()
THINKING = ModeConfig(name="thinking", enable_thinking=True, max_think_tokens=8)
MASKED = HarnessConfig(action_masking=True, answer_masking=True, keyword_masking=True)
ATOL = 1e-5                                    # float32
MODES = pytest.mark.parametrize("mode", [INSTRUCT, THINKING], ids=["instruct", "thinking"])


@pytest.fixture(scope="module")
def tok():
    return U.tokenizer()


@pytest.fixture(scope="module")
def tiny():
    """The shipped warm-started tiny model: with the real system prompt and tool schemas
    it calls tools for several turns (a random model rarely ends a turn)."""
    from ablate.models.tiny import load_tiny
    return load_tiny(SimpleNamespace(path=None, dtype="float32"))


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    from ablate.envs.email import synthetic
    from ablate.envs.email.data import read_tasks
    from ablate.envs.email.db import EmailDB
    d = tmp_path_factory.mktemp("kvenv")
    p = synthetic.generate(d, seed=123, num_inboxes=2, emails_per_inbox=60, train_tasks=2,
                           test_tasks=2, max_hops=2)
    return EmailDB.build(p["emails"], d / "db.sqlite"), read_tasks(p["test_tasks"])


@pytest.fixture(scope="module")
def runs(tiny, env):
    """(mode, temperature, kv_reuse) -> (episodes, sampler), each rollout run once."""
    cache = {}

    def get(mode, temperature, kv_reuse):
        key = (mode.name, temperature, kv_reuse)
        if key not in cache:
            cache[key] = _episodes(tiny, env, mode, temperature, kv_reuse)
        return cache[key]
    return get


def _episodes(tiny, env, mode, temperature, kv_reuse, sampler=None):
    from ablate.envs.email import EmailEnv
    model, tok = tiny
    db, tasks = env
    s = sampler or HFSampler(model, tok, kv_reuse=kv_reuse)
    eps = rollout(tasks, group_size=2, sampler=s, tokenizer=tok,
                  env=EmailEnv.over_db(db),
                  harness_cfg=MASKED, mode_cfg=mode, max_turns=5, temperature=temperature,
                  seed=3)
    return eps, s


def _own_length(tok, ep, thinking: bool) -> int:
    """Tokens the episode itself holds: its prompt, every generated id and observation
    (thinking: the last segment plus the thinking stripped from earlier turns)."""
    last = ep.segments[-1]
    if not thinking:
        return len(last.ids)
    stripped = 0
    for seg in ep.segments[:-1]:
        gen = [t for t, m in zip(seg.ids, seg.mask) if m]
        stripped += len(gen) - len(chat.strip_thinking_ids(tok, gen))
    return len(last.ids) + stripped


@MODES
def test_greedy_episodes_identical_to_full_recompute(tiny, runs, mode):
    full, s_full = runs(mode, 0.0, False)
    inc, s_inc = runs(mode, 0.0, True)
    assert max(e.num_turns for e in inc) >= 3              # turns really extend a cache
    assert s_full.stats["reused_tokens"] == 0 < s_inc.stats["reused_tokens"]
    # every call after the first turn's shares the system prompt: cascade attention
    assert s_full.stats["cascade_rows"] == 0 < s_inc.stats["cascade_rows"]
    for a, b in zip(full, inc):
        assert [s.ids for s in a.segments] == [s.ids for s in b.segments]
        assert [s.allowed for s in a.segments] == [s.allowed for s in b.segments]
        assert (a.end_reason, a.final_answer) == (b.end_reason, b.final_answer)
        for sa, sb in zip(a.segments, b.segments):
            assert torch.allclose(torch.tensor(sa.logprobs), torch.tensor(sb.logprobs),
                                  atol=ATOL)


@MODES
def test_sampled_logprobs_equal_learner_recompute(tiny, runs, mode):
    eps, _ = runs(mode, 1.0, True)
    full, _ = runs(mode, 1.0, False)
    assert [[x.ids for x in e.segments] for e in eps] == \
        [[x.ids for x in e.segments] for e in full]          # same seed, same samples
    n_masked = 0
    for ep in eps:
        for seg in ep.segments:
            lp = U.masked_logprobs(tiny[0], seg, 1.0)
            m = torch.tensor(seg.mask, dtype=torch.bool)
            assert torch.allclose(lp[m], torch.tensor(seg.logprobs)[m], atol=ATOL)
            n_masked += len(seg.allowed or {})
    assert n_masked > 0 and max(e.num_turns for e in eps) >= 3


@MODES
def test_tokens_encoded_per_episode(tiny, runs, mode):
    """Target: <= 1.2x the episode's own length (re-encoding every turn: several x)."""
    ratios = {}
    for reuse in (False, True):
        eps, s = runs(mode, 1.0, reuse)
        own = [_own_length(tiny[1], e, mode.enable_thinking) for e in eps]
        ratios[reuse] = s.stats["encoded_tokens"] / sum(own)
        # the per-episode counts add up to the sampler's (shared prefix included)
        assert sum(e.encoded_tokens for e in eps) == pytest.approx(s.stats["encoded_tokens"])
        if reuse:
            assert all(e.encoded_tokens <= 1.2 * n for e, n in zip(eps, own))
    assert ratios[True] <= 1.2 < 2.0 < ratios[False], ratios
    assert s._entries == [] and s._pinned is not None   # episodes freed, the prefix kept


def test_rows_with_different_cached_lengths(tok):
    """One batch: a row extending its kept sequence, one diverging inside it (as a
    stripped thinking turn does), one shorter than it, one with nothing kept."""
    model = U.tiny_model(tok, seed=5)
    inc, ref = HFSampler(model, tok), HFSampler(model, tok, kv_reuse=False)
    first = [list(range(5, 30)), list(range(40, 49)), list(range(60, 100))]
    kw = dict(max_new_tokens=[7, 12, 5], temperature=0.0, seed=0)
    a = inc.generate(first, **kw)
    assert [o.ids for o in a] == [o.ids for o in ref.generate(first, **kw)]
    assert inc.stats["reused_tokens"] == 0 and len(inc._entries) == 3
    second = [first[0] + a[0].ids + [70, 71, 72],            # extends: 3 + 1 new ids
              first[2][:20] + [11, 12],                       # diverges after 20 ids
              first[1][:6],                                   # a prefix of a kept one
              [200, 201, 202, 203]]                           # nothing kept
    before = dict(inc.stats)
    kw = dict(max_new_tokens=[9, 4, 6, 3], temperature=0.0, seed=0)
    b, r = inc.generate(second, **kw), ref.generate(second, **kw)
    assert [o.ids for o in b] == [o.ids for o in r]
    for p, o in zip(second, b):
        full = torch.tensor([p + o.ids])
        with torch.no_grad():
            lg = model(full).logits[0, len(p) - 1:-1].float()
        want = torch.log_softmax(lg, -1).gather(-1, torch.tensor(o.ids).view(-1, 1)).view(-1)
        assert torch.allclose(want, torch.tensor(o.logprobs), atol=ATOL)
    reused = (len(first[0]) + len(a[0].ids) - 1) + 20 + 5 + 0
    assert inc.stats["reused_tokens"] - before["reused_tokens"] == reused
    decode = sum(len(o.ids) - 1 for o in b)                   # the last id is never fed
    assert inc.stats["encoded_tokens"] - before["encoded_tokens"] == \
        sum(map(len, second)) - reused + decode


def test_equal_prompts_are_encoded_once(tok):
    """A group's first turn: equal prompts share one encoding, and sample as if each had
    its own (the same ids and logprobs as the old engine's)."""
    model = U.tiny_model(tok, seed=8)
    s, ref = HFSampler(model, tok), HFSampler(model, tok, kv_reuse=False)
    prefix = list(range(5, 45))
    prompts = [prefix + [50, 51, 52]] * 3 + [prefix + [60, 61]]
    for x in (s, ref):
        x.share_prefix(prefix)
    before = s.stats["encoded_tokens"]
    kw = dict(max_new_tokens=6, temperature=1.0, seed=4)
    out, want = s.generate(prompts, **kw), ref.generate(prompts, **kw)
    assert [o.ids for o in out] == [o.ids for o in want]
    for x, y in zip(out, want):
        assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=ATOL)
    assert s.stats["cascade_rows"] == 4 and len({tuple(o.ids) for o in out[:3]}) > 1
    decode = sum(len(o.ids) - 1 for o in out)
    assert s.stats["encoded_tokens"] - before == 3 + 2 + decode    # each prompt once
    assert [o.extra["encoded_tokens"] - len(o.ids) + 1 for o in out] == [3, 0, 0, 2]


def test_shared_prefix_once_per_weight_version_and_caches_freed(tok):
    model = U.tiny_model(tok, seed=6)
    s = HFSampler(copy.deepcopy(model), tok)
    prefix = list(range(5, 65))
    prompts = [prefix + [100 + i, 101 + i] for i in range(3)]
    s.share_prefix(prefix)
    s.share_prefix(prefix)
    assert s.stats["encoded_tokens"] == len(prefix)            # encoded once
    out = s.generate(prompts, max_new_tokens=4, temperature=1.0, seed=1)
    assert s.stats["reused_tokens"] == 3 * len(prefix)
    assert s.stats["cascade_rows"] == 3 and len(s._entries) == 3
    assert all(e.offset == len(prefix) for e in s._entries)    # the prefix not copied
    assert s.model.config._attn_implementation == "sdpa"       # restored after the call
    s.generate(prompts[:1], max_new_tokens=2, temperature=1.0, seed=1)
    assert len(s._entries) == 1                               # ended rows are freed
    # a weight push drops every kept key/value: the new policy never sees stale ones
    other = U.tiny_model(tok, seed=7)
    s.load_weights({k: v for k, v in other.state_dict().items() if k != "lm_head.weight"})
    assert s._pinned is None and s._entries == []
    before = s.stats["encoded_tokens"]
    s.share_prefix(prefix)
    assert s.stats["encoded_tokens"] - before == len(prefix)  # re-encoded, once
    pushed = s.generate(prompts, max_new_tokens=6, temperature=1.0, seed=2)
    fresh = HFSampler(other, tok, kv_reuse=False).generate(prompts, max_new_tokens=6,
                                                           temperature=1.0, seed=2)
    assert [o.ids for o in pushed] == [o.ids for o in fresh] != [o.ids for o in out]
    for x, y in zip(pushed, fresh):
        assert torch.allclose(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=ATOL)


# ------------------------------------------------------------------ the context cap
class _Capped(HFSampler):
    """The tiny model's sampler with a short context (max_position_embeddings)."""

    def __init__(self, model, tok, cap):
        super().__init__(model, tok)
        self.cap, self.fed = cap, []

    @property
    def max_context(self):
        return self.cap

    def generate(self, prompts, **kw):
        outs = super().generate(prompts, **kw)
        self.fed += [len(p) + len(o.ids) for p, o in zip(prompts, outs)]
        return outs


@MODES
def test_never_more_than_the_context(tiny, env, mode):
    model, tok = tiny
    first = len(chat.render_prompt(tok, env[1][0], TOOL_SCHEMAS, mode, SYSTEM_PROMPT))
    s = _Capped(model, tok, first + 150)
    eps, _ = _episodes(tiny, env, mode, 1.0, True, sampler=s)
    assert s.fed and max(s.fed) <= s.cap
    assert all(len(seg.ids) <= s.cap for e in eps for seg in e.segments)
    assert "max_context" in {e.end_reason for e in eps}


def test_first_prompt_over_the_context_ends_before_generating(tok, tmp_path):
    db = U.make_db(tmp_path)

    class Tiny(U.ScriptedSampler):
        max_context = 10
    s = Tiny(tok, lambda text, turn: "never asked")
    eps = rollout(U.TASKS, group_size=2, sampler=s, tokenizer=tok,
                  env=U.email_env(db), harness_cfg=HarnessConfig(),
                  mode_cfg=INSTRUCT, max_turns=3, temperature=1.0, seed=0)
    assert s.prompts == []
    assert all(e.end_reason == "max_context" and not e.segments and not e.turns
               for e in eps)
