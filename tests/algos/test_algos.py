"""The objectives against independent, plainly written re-implementations of the published
formulas (python floats and loops, no torch), on random tensors, plus edge cases."""
from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from ablate.algos import (ADVANTAGE_ESTIMATORS, LOSS_AGGREGATIONS, DynamicSampler, aggregate,
                          batch_counts, build_objective, compute_advantages,
                          dynamic_sampling_filter, entropy_bonus, kl_k3, overlong_penalty,
                          policy_loss, token_entropy)
from ablate.algos.config import AlgoConfig

AGGS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")
CONF = Path(__file__).resolve().parents[2] / "conf" / "algo"
TOL = 1e-6


# --- reference implementations (published formulas, written out) -------------------------

def ref_advantages(rewards, groups, norm_std, eps):
    """GRPO (DeepSeekMath §4.1.2) / Dr.GRPO (arXiv:2503.20783 §3.2), group by group."""
    out = [0.0] * len(rewards)
    for g in set(groups):
        idx = [i for i, x in enumerate(groups) if x == g]
        xs = [rewards[i] for i in idx]
        if len(xs) < 2 or all(x == xs[0] for x in xs):
            continue
        mean = sum(xs) / len(xs)
        std = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))
        for i in idx:
            out[i] = (rewards[i] - mean) / (std + eps) if norm_std else rewards[i] - mean
    return out


def ref_token_loss(lp, old, a, eps_low, eps_high, clip_c):
    """PPO clipped surrogate with asymmetric clip (DAPO §3.1) and dual-clip (Ye et al.)."""
    r = math.exp(lp - old)
    loss = max(-a * r, -a * min(max(r, 1 - eps_low), 1 + eps_high))
    if clip_c is not None and a < 0:
        loss = min(loss, -a * clip_c)
    return loss


def ref_aggregate(values, mask, agg, max_len=None):
    """values, mask: lists of rows of python numbers."""
    rows = [[v for v, m in zip(vr, mr) if m] for vr, mr in zip(values, mask)]
    rows = [r for r in rows if r]
    if agg == "token-mean":
        n = sum(len(r) for r in rows)
        return sum(sum(r) for r in rows) / n
    if agg == "seq-mean-token-mean":
        return sum(sum(r) / len(r) for r in rows) / len(rows)
    if agg == "seq-mean-token-sum-norm":
        return sum(sum(r) for r in rows) / (len(rows) * max_len)
    raise AssertionError(agg)


def ref_overlong(length, max_len, cache_len, factor):
    """DAPO eq. 13."""
    if length <= max_len - cache_len:
        return 0.0
    if length <= max_len:
        return (max_len - cache_len - length) / cache_len * factor
    return -factor


def ref_k3(lp, ref):
    return math.exp(ref - lp) - (ref - lp) - 1


def ref_entropy(logits):
    z = max(logits)
    ps = [math.exp(x - z) for x in logits]
    s = sum(ps)
    return -sum(p / s * math.log(p / s) for p in ps)


def random_batch(seed, b=7, t=9, spread=0.6, token_adv=False):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(b, t, generator=g, dtype=torch.float64) * 3
    lp = old + torch.randn(b, t, generator=g, dtype=torch.float64) * spread
    mask = (torch.rand(b, t, generator=g) < 0.7).long()
    mask[2] = 0                                     # a fully masked sequence
    mask[0, 0] = 1
    shape = (b, t) if token_adv else (b,)
    adv = torch.randn(*shape, generator=g, dtype=torch.float64)
    if not token_adv:   # both signs present, so both clip sides are exercised
        adv = adv.abs() * torch.tensor([(-1.0) ** i for i in range(b)], dtype=torch.float64)
    return lp, old, adv, mask


def token_adv(adv, i, j):
    return float(adv[i, j]) if adv.dim() == 2 else float(adv[i])


# --- advantages ---------------------------------------------------------------------------

@pytest.mark.parametrize("norm_std", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_advantages_match_reference(norm_std, seed):
    rng = random.Random(seed)
    groups = [g for g in range(6) for _ in range(rng.choice([1, 2, 4, 8]))]
    rewards = [rng.choice([0.0, 1.0, 0.35, 1.23]) for _ in groups]
    rewards[-3:] = [0.5] * 3 if groups[-3:] == [5] * 3 else rewards[-3:]
    got = compute_advantages(rewards, groups, norm_std=norm_std, eps=1e-6)
    want = ref_advantages(rewards, groups, norm_std, 1e-6)
    assert got.dtype == torch.float32 and got.shape == (len(rewards),)
    assert max(abs(a - b) for a, b in zip(got.tolist(), want)) <= TOL


def test_advantages_equal_torch_std_formula():
    r = torch.tensor([0.0, 1.0, 1.0, 0.2, 0.9])
    got = compute_advantages(r, [7] * 5, eps=1e-4)
    want = (r - r.mean()) / (r.std() + 1e-4)
    assert torch.allclose(got, want, atol=1e-6)


def test_all_equal_and_singleton_groups_get_exact_zero():
    # 0.1 * 3 has no exact float mean: a std-based test would leak ~1e-3 advantage
    rewards = [0.1, 0.1, 0.1, 1.35, 0.0, 1.0]
    groups = ["a", "a", "a", "solo", "b", "b"]
    for est in ADVANTAGE_ESTIMATORS.values():
        adv = est(rewards, groups, norm_std=est is ADVANTAGE_ESTIMATORS["grpo"], eps=1e-6)
        assert not torch.isnan(adv).any()
        assert adv[:4].tolist() == [0.0, 0.0, 0.0, 0.0]
        assert adv[4] < 0 < adv[5]


def test_dr_grpo_is_mean_centred_only():
    adv = ADVANTAGE_ESTIMATORS["dr_grpo"]([1.0, 0.0, 0.0, 0.0], [0, 0, 0, 0])
    assert adv.tolist() == pytest.approx([0.75, -0.25, -0.25, -0.25], abs=1e-7)
    with pytest.raises(ValueError, match="norm_std"):
        ADVANTAGE_ESTIMATORS["dr_grpo"]([1.0, 0.0], [0, 0], norm_std=True)


def test_advantages_reject_bad_input():
    with pytest.raises(ValueError, match="group ids"):
        compute_advantages([1.0, 0.0], [0])
    with pytest.raises(ValueError, match="finite"):
        compute_advantages([float("nan"), 0.0], [0, 0])


# --- policy loss --------------------------------------------------------------------------

@pytest.mark.parametrize("agg", AGGS)
@pytest.mark.parametrize("clip_c", [None, 3.0])
@pytest.mark.parametrize("tok_adv", [False, True])
def test_policy_loss_matches_reference(agg, clip_c, tok_adv):
    lp, old, adv, mask = random_batch(AGGS.index(agg) + 10 * (clip_c is None) + 100 * tok_adv,
                                      spread=1.5,
                                      token_adv=tok_adv)
    eps_low, eps_high, max_len = 0.2, 0.28, 16
    loss, metrics = policy_loss(lp, old, adv, mask, eps_low=eps_low, eps_high=eps_high,
                                clip_c=clip_c, agg=agg, max_len=max_len)
    b, t = lp.shape
    per_tok = [[ref_token_loss(float(lp[i, j]), float(old[i, j]), token_adv(adv, i, j),
                               eps_low, eps_high, clip_c) for j in range(t)] for i in range(b)]
    want = ref_aggregate(per_tok, mask.tolist(), agg, max_len)
    assert abs(float(loss) - want) <= TOL
    assert metrics["pg_loss"] == pytest.approx(float(loss))

    # diagnostics, counted by hand over masked tokens
    toks = [(i, j) for i in range(b) for j in range(t) if mask[i, j]]
    ratios = [math.exp(float(lp[i, j] - old[i, j])) for i, j in toks]
    advs = [token_adv(adv, i, j) for i, j in toks]
    n = len(toks)
    assert metrics["tokens"] == n
    assert metrics["clip_frac_high"] == pytest.approx(
        sum(a > 0 and r > 1 + eps_high for a, r in zip(advs, ratios)) / n)
    assert metrics["clip_frac_low"] == pytest.approx(
        sum(a < 0 and r < 1 - eps_low for a, r in zip(advs, ratios)) / n)
    dual = sum(a < 0 and r > clip_c for a, r in zip(advs, ratios)) / n if clip_c else 0.0
    assert metrics["clip_frac_dual"] == pytest.approx(dual)
    assert metrics["clip_frac_high"] > 0 and metrics["clip_frac_low"] > 0
    assert metrics["ratio_mean"] == pytest.approx(sum(ratios) / n)
    assert metrics["ratio_max"] == pytest.approx(max(ratios))
    assert metrics["ratio_min"] == pytest.approx(min(ratios))
    kl = [ref_k3(float(old[i, j]), float(lp[i, j])) for i, j in toks]
    assert metrics["approx_kl"] == pytest.approx(sum(kl) / n)


def test_float32_inputs_stay_close_to_reference():
    lp, old, adv, mask = random_batch(5)
    loss64, _ = policy_loss(lp, old, adv, mask, eps_low=0.2, eps_high=0.2)
    loss32, _ = policy_loss(lp.float(), old.float(), adv.float(), mask, eps_low=0.2,
                            eps_high=0.2)
    assert loss32.dtype == torch.float32
    assert abs(float(loss32) - float(loss64)) <= 1e-5


def test_gradient_is_zero_exactly_where_clipped():
    eps_low, eps_high, c = 0.2, 0.28, 3.0
    # per token: (log ratio, advantage, gradient expected nonzero?)
    cases = [(2.0, 1.0, False),    # A>0, r=7.4 > 1+eps_high: clipped
             (-2.0, -1.0, False),  # A<0, r=0.14 < 1-eps_low: clipped
             (-2.0, 1.0, True),    # A>0, r small: pessimistic unclipped branch, gradient flows
             (0.5, -1.0, True),    # A<0, 1+eps_high < r=1.65 < c: gradient flows
             (2.0, -1.0, False),   # A<0, r=7.4 > c: dual-clipped
             (0.1, 1.0, True)]     # inside the trust region
    old = torch.zeros(1, len(cases), dtype=torch.float64)
    lp = torch.tensor([[x for x, _, _ in cases]], dtype=torch.float64, requires_grad=True)
    adv = torch.tensor([[a for _, a, _ in cases]], dtype=torch.float64)
    mask = torch.ones(1, len(cases))
    loss, m = policy_loss(lp, old, adv, mask, eps_low=eps_low, eps_high=eps_high, clip_c=c)
    loss.backward()
    for k, (x, a, flows) in enumerate(cases):
        g = float(lp.grad[0, k])
        if flows:  # d/dlp of -A·e^lp / N
            assert g == pytest.approx(-a * math.exp(x) / len(cases))
        else:
            assert g == 0.0
    assert (m["clip_frac_high"], m["clip_frac_low"], m["clip_frac_dual"]) == \
        pytest.approx((1 / 6, 1 / 6, 1 / 6))
    # the dual-clipped token's loss is bounded by -A·c instead of -A·r = 7.39
    per_tok, _ = policy_loss(lp[:, 4:5].detach(), old[:, 4:5], adv[:, 4:5], mask[:, 4:5],
                             eps_low=eps_low, eps_high=eps_high, clip_c=c)
    no_dual, _ = policy_loss(lp[:, 4:5].detach(), old[:, 4:5], adv[:, 4:5], mask[:, 4:5],
                             eps_low=eps_low, eps_high=eps_high)
    assert float(per_tok) == pytest.approx(3.0)
    assert float(no_dual) == pytest.approx(math.exp(2.0))


@pytest.mark.parametrize("agg", AGGS)
def test_micro_batch_shares_sum_to_full_batch(agg):
    lp, old, adv, mask = random_batch(11, b=9, t=6, spread=0.8)
    mask[5] = 0                                      # a second empty row, in another chunk
    kw = dict(eps_low=0.2, eps_high=0.28, clip_c=3.0, agg=agg, max_len=12)
    lp_full = lp.clone().requires_grad_(True)
    full, _ = policy_loss(lp_full, old, adv, mask, **kw)
    full.backward()

    chunks = [slice(0, 2), slice(2, 3), slice(3, 7), slice(7, 9)]
    counts = [batch_counts(mask[s]) for s in chunks]
    num_tokens = sum(c[0] for c in counts)
    num_seqs = sum(c[1] for c in counts)
    assert (num_tokens, num_seqs) == batch_counts(mask)
    lp_mb = lp.clone().requires_grad_(True)
    total = 0.0
    for s in chunks:
        part, _ = policy_loss(lp_mb[s], old[s], adv[s], mask[s], num_tokens=num_tokens,
                              num_seqs=num_seqs, **kw)
        part.backward()
        total += float(part.detach())
    assert abs(total - float(full.detach())) <= 1e-12
    assert torch.allclose(lp_mb.grad, lp_full.grad, atol=1e-12)
    # without the global counts the micro-batch losses do NOT add up (so the test can fail)
    naive = sum(float(policy_loss(lp[s], old[s], adv[s], mask[s], **kw)[0]) for s in chunks)
    assert abs(naive - float(full.detach())) > 1e-3


def test_fully_masked_rows_and_batches_never_nan():
    lp, old, adv, mask = random_batch(3)
    lp = lp.masked_fill(mask == 0, float("-inf"))    # padding logprobs may be -inf
    lp.requires_grad_(True)
    for agg in AGGS:
        loss, m = policy_loss(lp, old, adv, mask, eps_low=0.2, eps_high=0.2, agg=agg,
                              max_len=9)
        loss.backward()
        assert math.isfinite(float(loss.detach())) and torch.isfinite(lp.grad).all()
        assert float(lp.grad[2].abs().sum()) == 0.0      # the empty row gets no gradient
        lp.grad = None
    empty = torch.zeros_like(mask)
    loss, m = policy_loss(lp.detach(), old, adv, empty, eps_low=0.2, eps_high=0.2,
                          agg="seq-mean-token-mean")
    assert float(loss) == 0.0 and m["tokens"] == 0 and m["clip_frac_high"] == 0.0
    assert all(math.isfinite(v) for v in m.values())
    assert "ratio_max" not in m       # no fake 1.0 to corrupt a max over micro-batches


def test_seq_mean_excludes_empty_rows_from_the_mean():
    values = torch.tensor([[1.0, 3.0], [5.0, 5.0], [9.0, 9.0]])
    mask = torch.tensor([[1, 1], [0, 0], [1, 0]])
    assert float(aggregate(values, mask, "seq-mean-token-mean")) == pytest.approx((2 + 9) / 2)
    assert float(aggregate(values, mask, "token-mean")) == pytest.approx(13 / 3)
    assert float(aggregate(values, mask, "seq-mean-token-sum-norm", max_len=4)) == \
        pytest.approx(13 / (2 * 4))


def test_aggregation_argument_errors():
    v, m = torch.ones(2, 3), torch.ones(2, 3)
    with pytest.raises(ValueError, match="max_len"):
        aggregate(v, m, "seq-mean-token-sum-norm")
    with pytest.raises(ValueError, match="loss_agg"):
        aggregate(v, m, "sum")
    with pytest.raises(ValueError, match="clip_c"):
        policy_loss(v, v, torch.ones(2), m, eps_low=0.2, eps_high=0.2, clip_c=1.0)
    assert set(LOSS_AGGREGATIONS) == set(AGGS)


# --- entropy, KL, overlong ----------------------------------------------------------------

def test_kl_k3_and_entropy_match_reference():
    g = torch.Generator().manual_seed(4)
    lp = -torch.rand(3, 5, generator=g, dtype=torch.float64) * 4
    ref = -torch.rand(3, 5, generator=g, dtype=torch.float64) * 4
    k3 = kl_k3(lp, ref)
    for i in range(3):
        for j in range(5):
            assert float(k3[i, j]) == pytest.approx(ref_k3(float(lp[i, j]), float(ref[i, j])),
                                                    abs=1e-12)
    assert (k3 >= 0).all() and float(kl_k3(lp, lp).abs().max()) == 0.0

    logits = torch.randn(2, 3, 11, generator=g, dtype=torch.float64) * 3
    ent = token_entropy(logits)
    for i in range(2):
        for j in range(3):
            assert float(ent[i, j]) == pytest.approx(ref_entropy(logits[i, j].tolist()),
                                                     abs=1e-10)
    mask = torch.tensor([[1, 1, 0], [0, 1, 1]])
    bonus = entropy_bonus(ent, mask, 0.01, "token-mean")
    want = 0.01 * sum(float(ent[i, j]) for i in range(2) for j in range(3) if mask[i, j]) / 4
    assert float(bonus) == pytest.approx(want, abs=1e-12)


@pytest.mark.parametrize("max_len,cache_len,factor", [(100, 20, 1.0), (1024, 256, 0.5)])
def test_overlong_penalty_matches_reference(max_len, cache_len, factor):
    e = max_len - cache_len
    lengths = [0, e - 1, e, e + 1, e + cache_len // 2, max_len - 1, max_len, max_len + 1,
               5 * max_len]
    got = overlong_penalty(lengths, max_len, cache_len, factor).tolist()
    want = [ref_overlong(n, max_len, cache_len, factor) for n in lengths]
    assert got == pytest.approx(want, abs=1e-7)
    assert got[4] == pytest.approx(-factor / 2) and got[6] == pytest.approx(-factor)


def test_overlong_penalty_edges():
    assert overlong_penalty([10, 11], 10, 0, 1.0).tolist() == [0.0, -1.0]   # empty buffer
    with pytest.raises(ValueError):
        overlong_penalty([-1], 10, 2, 1.0)
    with pytest.raises(ValueError):
        overlong_penalty([5], 10, 10, 1.0)


# --- dynamic sampling ---------------------------------------------------------------------

def test_dynamic_sampling_filter_keeps_groups_with_spread():
    rewards = [1, 0, 1, 1, 0.5, 0.2, 0.2, 0.7]
    groups = [0, 0, 1, 1, 2, 3, 3, 3]
    kept, mask = dynamic_sampling_filter(rewards, groups)
    assert kept == [0, 3]
    assert mask.tolist() == [True, True, False, False, False, True, True, True]


def test_dynamic_sampler_refills_truncates_and_logs():
    s = DynamicSampler(target_groups=3, max_batches=2)
    assert s.add([1, 0, 1, 1, 0, 0, 0, 1], [0, 0, 1, 1, 2, 2, 3, 3], list("abcdefgh")) == 2
    assert not s.done
    assert s.add([1, 1, 0, 1, 1, 0], [0, 0, 1, 1, 2, 2], list("ijklmn")) == 2
    assert s.done
    items, rewards, groups = s.batch()
    assert items == list("abghkl") and groups == [0, 0, 1, 1, 2, 2]
    assert rewards.tolist() == [1, 0, 0, 1, 0, 1]
    m = s.metrics()
    assert m["dynamic_sampling/kept_fraction"] == pytest.approx(4 / 7)
    assert m["dynamic_sampling/rounds"] == 2 and m["dynamic_sampling/kept_groups"] == 3
    with pytest.raises(RuntimeError):
        s.add([1, 0], [0, 0])


def test_dynamic_sampler_gives_up_after_max_batches():
    s = DynamicSampler(target_groups=4, max_batches=1)
    s.add([1, 1], [0, 0])
    assert not s.done
    s.add([0, 1, 0, 0], [0, 0, 1, 1])
    assert s.done and s.kept_groups == 1
    items, _, groups = s.batch()
    assert items == [(1, 0), (1, 1)] and groups == [0, 0]


# --- the config-driven objective ----------------------------------------------------------

def preset(name: str):
    return OmegaConf.merge(OmegaConf.structured(AlgoConfig), OmegaConf.load(CONF / f"{name}.yaml"))


def test_presets_build_the_published_recipes():
    grpo, dapo, dr, tcr = (build_objective(preset(n)) for n in
                           ("grpo", "dapo", "dr_grpo", "grpo_tcr"))
    assert (grpo.norm_std, grpo.eps_high, grpo.loss_agg) == (True, 0.2, "seq-mean-token-mean")
    assert (dapo.eps_low, dapo.eps_high, dapo.loss_agg, dapo.overlong.enable) == \
        (0.2, 0.28, "token-mean", True)
    assert preset("dapo").dynamic_sampling.enable is True
    assert (dr.adv_estimator, dr.norm_std, dr.loss_agg) == \
        ("dr_grpo", False, "seq-mean-token-sum-norm")
    assert (tcr.eps_high, tcr.loss_agg, tcr.overlong.enable) == (0.315, "token-mean", True)
    assert not any(o.needs_reference for o in (grpo, dapo, dr, tcr))
    assert dr.describe()["std_eps"] == 1e-6


def test_objective_applies_entropy_and_kl_terms():
    cfg = preset("dapo")
    cfg.entropy_coef, cfg.kl_coef, cfg.clip_c = 0.01, 0.05, 3.0
    obj = build_objective(cfg)
    assert obj.needs_reference and obj.needs_entropy
    lp, old, adv, mask = random_batch(21)
    g = torch.Generator().manual_seed(0)
    ent = torch.rand(lp.shape, generator=g, dtype=torch.float64) * 2
    ref = old + 0.1 * torch.randn(lp.shape, generator=g, dtype=torch.float64)
    loss, m = obj.loss(lp, old, adv, mask, entropy=ent, ref_logprobs=ref)
    b, t = lp.shape
    pg = ref_aggregate([[ref_token_loss(float(lp[i, j]), float(old[i, j]), float(adv[i]),
                                        0.2, 0.28, 3.0) for j in range(t)] for i in range(b)],
                       mask.tolist(), "token-mean")
    h = ref_aggregate(ent.tolist(), mask.tolist(), "token-mean")
    kl = ref_aggregate([[ref_k3(float(lp[i, j]), float(ref[i, j])) for j in range(t)]
                        for i in range(b)], mask.tolist(), "token-mean")
    assert abs(float(loss) - (pg - 0.01 * h + 0.05 * kl)) <= TOL
    assert m["entropy"] == pytest.approx(h) and m["kl"] == pytest.approx(kl)
    with pytest.raises(ValueError, match="reference"):
        obj.loss(lp, old, adv, mask, entropy=ent)
    with pytest.raises(ValueError, match="entropy"):
        obj.loss(lp, old, adv, mask, ref_logprobs=ref)


def test_objective_shapes_rewards_and_estimates_advantages():
    obj = build_objective(preset("dapo"))     # overlong: L_max 1024, cache 256, factor 1
    shaped = obj.shape_rewards([1.0, 1.0, 0.0], [100, 768 + 128, 2000])
    assert shaped.tolist() == pytest.approx([1.0, 0.5, -1.0])
    adv = obj.advantages(shaped, [0, 0, 0])
    assert adv.tolist() == pytest.approx(ref_advantages(shaped.tolist(), [0, 0, 0], True, 1e-6),
                                         abs=TOL)
    plain = build_objective(preset("grpo"))
    assert plain.shape_rewards([1.0], [5000]).tolist() == [1.0]


def test_objective_rejects_contradictory_knobs():
    cfg = preset("dr_grpo")
    cfg.norm_std = True
    with pytest.raises(ValueError, match="norm_std"):
        build_objective(cfg)
    cfg = preset("grpo")
    cfg.loss_agg = "token-sum"
    with pytest.raises(ValueError, match="loss_agg"):
        build_objective(cfg)
