"""Shared-prefix learner: the tokens all segments share at the start are forwarded once and
their keys/values reused by every row. Loss, every parameter gradient, token logprobs and
the reference model's logprobs must equal the per-segment computation (shared_prefix off)
within 1e-5 in float32 (1e-10 in float64), for token-mean and seq-mean aggregation, LoRA
on and off, plain torch and DeepSpeed ZeRO-3 learners, over several micro-batches with
right padding and action masks on suffix positions."""
from __future__ import annotations

import math

import pytest
import torch
from deepspeed.utils import safe_get_full_grad
from transformers.models.qwen3 import modeling_qwen3

from ablate.algos import aggregate, entropy_bonus, kl_k3, policy_loss
from ablate.harness.episode import Segment
from ablate.learners.batching import pack
from ablate.learners.prefix import shared_prefix_len
from test_learners import VOCAB, learner, weights_dir  # noqa: F401  (fixture)

P = 30   # shared tokens: a "system prompt"


def prefix_batch(seed=0, lengths=(70, 52, 95, 47, 63, 88), prefix=P):
    """Segments that share `prefix` untrained tokens, then a per-segment question (mask 0),
    trained spans and a tool observation (mask 0). Row 0 is trained from position
    `prefix` on, under an action mask there: the shared part ends exactly at `prefix`."""
    g = torch.Generator().manual_seed(seed)
    system = torch.randint(0, VOCAB, (prefix,), generator=g).tolist()
    segs = []
    for r, L in enumerate(lengths):
        ids = system + torch.randint(0, VOCAB, (L - prefix,), generator=g).tolist()
        q = 0 if r == 0 else 6                          # question tokens after the prompt
        mask = [0] * (prefix + q) + [1] * (L - prefix - q)
        o = prefix + q + 5
        mask[o:o + 6] = [0] * len(mask[o:o + 6])        # a tool observation
        old = [(-math.log(VOCAB) + 0.3 * float(torch.randn(1, generator=g))) if m else 0.0
               for m in mask]
        segs.append(Segment(ids, mask, old))
    segs[0].allowed = {prefix: [segs[0].ids[prefix], 3, 7],      # the first suffix token
                       prefix + 3: [segs[0].ids[prefix + 3], 11]}
    segs[2].allowed = {prefix + 20: [segs[2].ids[prefix + 20]]}   # forced: logprob 0
    adv = torch.randn(len(lengths), generator=g).tolist()
    return segs, adv


def make_loss(agg):
    """Clipped surrogate with the given aggregation, an entropy bonus, and a k3 KL to the
    reference when the learner has one (ablate.algos' real functions)."""
    def loss_fn(li):
        counts = dict(num_tokens=li.num_tokens, num_seqs=li.num_seqs)
        loss, metrics = policy_loss(li.logprobs, li.old_logprobs, li.advantages, li.mask,
                                    eps_low=0.2, eps_high=0.28, agg=agg, **counts)
        loss = loss - entropy_bonus(li.entropy, li.mask, 0.01, agg, **counts)
        if li.ref_logprobs is not None:
            loss = loss + 0.05 * aggregate(kl_k3(li.logprobs, li.ref_logprobs), li.mask, agg,
                                           **counts)
        return loss, metrics
    return loss_fn


def capture_grads(lrn):
    """Wrap the learner's optimizer step: record every trainable parameter's full gradient
    just before it (accumulated over micro-batches and the prefix's backward)."""
    seen, step = [], lrn._step

    def full_grad(p):   # ZeRO-3: gathered from the partitions, before the step
        return safe_get_full_grad(p) if hasattr(p, "ds_id") else p.grad

    def wrapped():
        seen.append({n: full_grad(p).detach().double().clone()
                     for n, p in lrn.model.named_parameters() if p.requires_grad})
        return step()
    lrn._step = wrapped
    return seen


def run_pair(weights_dir, tmp_path, name, segs, adv, aggs, lora=False, ref=False,  # noqa: F811
             double=False, micro_batch_tokens=160):
    """Per-segment and shared-prefix learners on the same batch (lr 0: the weights stay
    put, so several losses can be compared on one pair); returns their stats and grads."""
    out = {}
    for shared in (False, True):
        lrn = learner(weights_dir, tmp_path / f"{name}{shared}", name, lr=0.0, lora=lora,
                      ref=ref, micro_batch_tokens=micro_batch_tokens,
                      shared_prefix=shared)
        if double:
            lrn.model.double()
        grads = capture_grads(lrn)
        stats = [lrn.update(segs, adv, make_loss(agg)) for agg in aggs]
        out[shared] = (stats, grads, lrn)
    return out


def assert_same(out, n_segs, tol):
    (s0, g0, _), (s1, g1, _) = out[False], out[True]
    for a, b, ga, gb in zip(s0, s1, g0, g1):
        assert a["prefix_tokens"] == 0 and a["forward_tokens"] == a["tokens"]
        assert b["prefix_tokens"] == P and b["forward_tokens"] == a["tokens"] - (n_segs - 1) * P
        assert a["train_tokens"] == b["train_tokens"]
        assert b["loss"] == pytest.approx(a["loss"], abs=tol, rel=0)
        assert ga.keys() == gb.keys() and ga
        worst = max(float((ga[k] - gb[k]).abs().max()) for k in ga)
        assert worst < tol, worst
        assert max(float(v.abs().max()) for v in ga.values()) > 100 * tol   # not all ~0


@pytest.fixture
def batch():
    return prefix_batch()


def test_shared_prefix_len_stops_at_trained_masked_or_differing_tokens(batch):
    segs, _ = batch
    assert shared_prefix_len(segs, 1) == P
    assert shared_prefix_len(segs, P + 1) == 0                 # shorter than the minimum
    segs[3].mask[12] = 1                                       # a trained token inside
    assert shared_prefix_len(segs, 1) == 12
    segs[3].mask[12] = 0
    segs[4].ids[5] = (segs[4].ids[5] + 1) % VOCAB              # a differing token
    assert shared_prefix_len(segs, 1) == 5
    segs[4].ids[5] = segs[0].ids[5]
    segs[1].allowed = {9: [segs[1].ids[9]]}                    # an action mask inside
    assert shared_prefix_len(segs, 1) == 9
    assert shared_prefix_len(segs[:1], 1) == 0                 # one segment: nothing shared
    same = [Segment([1, 2, 3], [0, 0, 0], [0.0] * 3), Segment([1, 2, 3], [0, 0, 0], [0.0] * 3)]
    assert shared_prefix_len(same, 1) == 2                     # each row keeps a token
    assert shared_prefix_len(same + [Segment([], [], [])], 1) == 0


def test_pack_budgets_suffix_tokens(batch):
    segs, _ = batch
    groups = pack(segs, 160, skip=P)
    for g in groups:
        assert len(g) == 1 or len(g) * (max(len(segs[i].ids) for i in g) - P) <= 160
    assert len(groups) < len(pack(segs, 160))


AGGS = ("token-mean", "seq-mean-token-mean")


@pytest.mark.parametrize("name", ["torch", "deepspeed"])
@pytest.mark.parametrize("lora", [False, True])
def test_loss_and_grads_equal_per_segment(weights_dir, tmp_path, batch, name, lora):  # noqa: F811
    segs, adv = batch
    out = run_pair(weights_dir, tmp_path, name, segs, adv, AGGS, lora=lora, ref=not lora)
    assert_same(out, len(segs), 1e-5)
    assert out[True][0][0]["micro_batches"] >= 2          # leaves shared across micro-batches
    # the no-grad path (and the reference model's, inside the loss above) agrees too
    for a, b in zip(out[False][2].logprobs(segs), out[True][2].logprobs(segs)):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", ["torch", "deepspeed"])
def test_one_micro_batch_accumulates_the_prefix_gradient(weights_dir, tmp_path, batch, name):  # noqa: F811
    """One micro-batch: its backward and the prefix's follow each other with no forward
    between (ZeRO-3 once copied instead of accumulating there, dropping most gradient)."""
    segs, adv = batch
    out = run_pair(weights_dir, tmp_path, name, segs, adv, ["token-mean"],
                   micro_batch_tokens=100_000)
    assert out[True][0][0]["micro_batches"] == 1
    assert_same(out, len(segs), 1e-5)
    assert out[True][0][0]["grad_norm"] == pytest.approx(out[False][0][0]["grad_norm"],
                                                         rel=1e-5)


def test_float64_equality_is_rounding_only(weights_dir, tmp_path, batch, monkeypatch):  # noqa: F811
    """In float64 the two computations agree to machine precision: the prefix's reuse is
    algebraically exact. (transformers' Qwen3RMSNorm computes in float32 whatever the
    model's dtype, which alone leaves ~1e-9 differences; it runs in float64 here.)"""
    def rms_norm(self, h):
        return self.weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True)
                                              + self.variance_epsilon))
    monkeypatch.setattr(modeling_qwen3.Qwen3RMSNorm, "forward", rms_norm)
    segs, adv = batch
    out = run_pair(weights_dir, tmp_path, "torch", segs, adv, AGGS, double=True)
    assert out[True][1][0]["model.layers.0.self_attn.k_proj.weight"].dtype == torch.float64
    assert_same(out, len(segs), 1e-13)


@pytest.mark.parametrize("name", ["torch", "deepspeed"])
def test_rank_without_a_prefix_runs_a_dummy_prefix_pass(weights_dir, tmp_path, name):  # noqa: F811
    """With several ranks, a rank whose segments share nothing still runs one prefix
    forward and backward when another rank has a prefix (ZeRO-3's collectives stay in
    step). In one process: the all-reduce reports another rank's prefix; the dummy pass
    must leave loss and gradients those of the plain computation."""
    from test_learners import make_batch
    segs, adv = make_batch()
    assert shared_prefix_len(segs, 1) == 0
    out, calls = {}, []
    for dummy in (False, True):
        lrn = learner(weights_dir, tmp_path / f"d{dummy}", name, lr=0.0, ref=True,
                      micro_batch_tokens=128)
        if dummy:
            reduce, prefix = lrn._all_reduce, lrn._prefix

            def other_rank_has_prefix(t, op="sum", reduce=reduce):
                t = reduce(t, op).clone()
                if op == "max":
                    t[1] = 1.0
                return t

            def counted(ids, **kw):
                calls.append(list(ids))
                return prefix(ids, **kw)
            lrn._all_reduce, lrn._prefix = other_rank_has_prefix, counted
        grads = capture_grads(lrn)
        out[dummy] = ([lrn.update(segs, adv, make_loss("token-mean"))], grads, lrn)
        assert len(lrn.logprobs(segs)) == len(segs)
    assert calls == [[0, 0], [0, 0], [0, 0]]   # policy + reference in update, logprobs
    (s0, g0, _), (s1, g1, _) = out[False], out[True]
    assert s1[0]["prefix_tokens"] == 0 and s1[0]["forward_tokens"] == s0[0]["tokens"]
    assert s1[0]["loss"] == pytest.approx(s0[0]["loss"], abs=1e-6, rel=0)
    assert max(float((g0[0][k] - g1[0][k]).abs().max()) for k in g0[0]) < 1e-6


@pytest.mark.parametrize("name", ["torch", "deepspeed"])
def test_bfloat16_with_prefix_tracks_per_segment(weights_dir, tmp_path, batch, name):  # noqa: F811
    """bf16 (autocast for torch, the engine's cast for ZeRO-3): the prefix's bf16 keys and
    values and its vector-Jacobian backward work; values agree to bf16 rounding."""
    segs, adv = batch
    out = {}
    for shared in (False, True):
        lrn = learner(weights_dir, tmp_path / f"b{shared}", name, dtype="bfloat16",
                      micro_batch_tokens=160, shared_prefix=shared)
        out[shared] = lrn.update(segs, adv, make_loss("token-mean"))
    assert out[True]["prefix_tokens"] == P
    assert math.isfinite(out[True]["grad_norm"]) and out[True]["grad_norm"] > 0
    assert out[True]["loss"] == pytest.approx(out[False]["loss"], abs=0.02)
    assert out[True]["grad_norm"] == pytest.approx(out[False]["grad_norm"], rel=0.05)
