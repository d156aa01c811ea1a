"""The formula zoo (RLOO, REINFORCE++-baseline, GSPO, CISPO, GAE, the clipped value loss,
rollout-correction weights, episode-level aggregation) against plain re-implementations of
the published formulas written here (python floats / loops, or the sequence-level form with
true autograd), values and gradients to 1e-6 in float64, with edge cases."""
from __future__ import annotations

import math

import pytest
import torch

from ablate.algos import (ADVANTAGE_ESTIMATORS, POLICY_LOSSES, aggregate, correction_weights,
                          gae, value_loss)

TOL = 1e-6


def rand(seed, *shape, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64) * scale


def rand_mask(seed, b, t, p=0.7):
    g = torch.Generator().manual_seed(seed + 1000)
    m = (torch.rand(b, t, generator=g) < p).long()
    m[0, 1] = 1
    return m


GROUPS = [0, 0, 0, 1, 1, 2, 3, 3, 3, 3]          # a group of one (2), sizes 3, 2, 4


# --- advantage estimators -----------------------------------------------------------------

def ref_rloo(r, groups):
    """arXiv:2402.14740 eq. 6: r_i minus the mean of the other rewards of its group."""
    out = []
    for i, g in enumerate(groups):
        others = [r[j] for j, h in enumerate(groups) if h == g and j != i]
        out.append(r[i] - sum(others) / len(others) if others else 0.0)
    return out


def ref_reinforce_pp(r, groups, eps):
    """arXiv:2501.03262 §3.2: group mean subtracted, then divided by the batch std."""
    a = []
    for i, g in enumerate(groups):
        xs = [r[j] for j, h in enumerate(groups) if h == g]
        a.append(r[i] - sum(xs) / len(xs) if len(xs) > 1 else 0.0)
    mean = sum(a) / len(a)
    std = math.sqrt(sum((x - mean) ** 2 for x in a) / (len(a) - 1))
    return [x / (std + eps) if std > 0 else 0.0 for x in a]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rloo_and_reinforce_pp_match_reference(seed):
    r = rand(seed, len(GROUPS)).tolist()
    got = ADVANTAGE_ESTIMATORS["rloo"](r, GROUPS, norm_std=True, eps=1e-6)
    assert got.tolist() == pytest.approx(ref_rloo(r, GROUPS), abs=TOL)
    got = ADVANTAGE_ESTIMATORS["reinforce_pp_baseline"](r, GROUPS, eps=1e-6)
    assert got.tolist() == pytest.approx(ref_reinforce_pp(r, GROUPS, 1e-6), abs=TOL)


def test_rloo_is_grpo_centring_scaled_by_g_over_g_minus_1():
    r, groups = [1.0, 0.0, 0.0, 1.0], [0, 0, 0, 0]
    rloo = ADVANTAGE_ESTIMATORS["rloo"](r, groups)
    centred = ADVANTAGE_ESTIMATORS["dr_grpo"](r, groups)
    assert torch.allclose(rloo, centred * 4 / 3)


@pytest.mark.parametrize("name", ["rloo", "reinforce_pp_baseline"])
def test_estimator_edges_give_exact_zero(name):
    fn = ADVANTAGE_ESTIMATORS[name]
    assert fn([0.7], [0]).tolist() == [0.0]                          # a group of one
    assert fn([0.3, 0.3, 0.3, 1.0], [0, 0, 0, 1]).tolist() == [0.0] * 4   # all equal / single
    assert fn([0.1] * 6, [0, 0, 0, 1, 1, 1]).tolist() == [0.0] * 6
    with pytest.raises(ValueError):
        fn([1.0, float("nan")], [0, 0])
    with pytest.raises(ValueError):
        fn([1.0, 2.0], [0])


# --- GSPO and CISPO -----------------------------------------------------------------------

def ref_gspo(lp, old, adv, mask, eps_low, eps_high):
    """arXiv:2507.18071 eq. 5 (sequence objective, true gradient through s_i), minimised:
    -1/G Σ_i min(s_i A_i, clip(s_i, 1-eps_low, 1+eps_high) A_i), s_i = exp(mean log ratio)."""
    terms = []
    for i in range(lp.shape[0]):
        m = mask[i].bool()
        if not m.any():
            continue
        s = torch.exp((lp[i][m] - old[i][m]).mean())
        a = adv[i]
        terms.append(-torch.minimum(s * a, s.clamp(1 - eps_low, 1 + eps_high) * a))
    return torch.stack(terms).mean()


def ref_cispo(lp, old, adv, mask, eps_low, eps_high):
    """arXiv:2506.13585 eq. 4 written per token, token-mean over the batch."""
    total, n = 0.0, 0
    for i in range(lp.shape[0]):
        for t in range(lp.shape[1]):
            if mask[i, t]:
                r = math.exp(float(lp[i, t].detach() - old[i, t]))
                w = min(max(r, 1 - eps_low), 1 + eps_high)
                total = total - w * float(adv[i]) * lp[i, t]
                n += 1
    return total / n


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("eps", [(3e-4, 4e-4), (0.2, 0.28)])
def test_gspo_matches_sequence_objective_values_and_gradients(seed, eps):
    b, t = 6, 8
    old = -rand(seed, b, t).abs()
    lp = (old + rand(seed + 5, b, t, scale=0.02)).requires_grad_()
    mask = rand_mask(seed, b, t)
    mask[3] = 0                                               # an empty row
    adv = rand(seed + 9, b)
    loss, m = POLICY_LOSSES["gspo"](lp, old, adv, mask, agg="seq-mean-token-mean",
                                    eps_low=eps[0], eps_high=eps[1])
    g, = torch.autograd.grad(loss, lp)
    lp2 = lp.detach().clone().requires_grad_()
    ref = ref_gspo(lp2, old, adv, mask, *eps)
    g2, = torch.autograd.grad(ref, lp2)
    assert float(loss.detach()) == pytest.approx(float(ref.detach()), abs=TOL)
    assert torch.allclose(g, g2, atol=TOL)
    assert torch.isfinite(g).all() and 0 <= m["clip_frac_low"] + m["clip_frac_high"] <= 1


@pytest.mark.parametrize("seed", [0, 1])
def test_cispo_matches_reference_values_and_gradients(seed):
    b, t = 5, 7
    old = -rand(seed, b, t).abs()
    lp = (old + rand(seed + 3, b, t, scale=0.5)).requires_grad_()
    mask, adv = rand_mask(seed, b, t), rand(seed + 7, b)
    loss, m = POLICY_LOSSES["cispo"](lp, old, adv, mask, agg="token-mean", eps_low=0.2,
                                     eps_high=0.28)
    g, = torch.autograd.grad(loss, lp)
    lp2 = lp.detach().clone().requires_grad_()
    g2, = torch.autograd.grad(ref_cispo(lp2, old, adv, mask, 0.2, 0.28), lp2)
    assert float(loss) == pytest.approx(float(ref_cispo(lp.detach(), old, adv, mask, 0.2, 0.28)),
                                        abs=TOL)
    assert torch.allclose(g, g2, atol=TOL)
    # CISPO never zeroes a policy token's gradient (unlike clip), even where clipped
    on = mask.bool() & (adv.unsqueeze(-1) != 0)
    assert (g[on] != 0).all() and m["clip_frac_high"] + m["clip_frac_low"] > 0


@pytest.mark.parametrize("name", ["clip", "gspo", "cispo"])
def test_losses_survive_empty_masks_and_padding_nan(name):
    lp = torch.full((2, 4), float("nan"), dtype=torch.float64, requires_grad=True)
    old = torch.zeros(2, 4, dtype=torch.float64)
    loss, m = POLICY_LOSSES[name](lp, old, torch.ones(2, dtype=torch.float64),
                                  torch.zeros(2, 4), agg="token-mean", eps_low=0.2,
                                  eps_high=0.2)
    g, = torch.autograd.grad(loss, lp)
    assert float(loss) == 0.0 and torch.equal(g, torch.zeros_like(g)) and m["tokens"] == 0


# --- GAE and the value loss --------------------------------------------------------------

def ref_gae(rewards, values, mask, gamma, lam):
    """arXiv:1506.02438 eqs. 11-16 over the policy tokens only (observations skipped)."""
    adv = [[0.0] * len(r) for r in rewards]
    ret = [[0.0] * len(r) for r in rewards]
    for i in range(len(rewards)):
        pos = [t for t in range(len(rewards[i])) if mask[i][t]]
        running, next_v = 0.0, 0.0
        for t in reversed(pos):
            delta = rewards[i][t] + gamma * next_v - values[i][t]
            running = delta + gamma * lam * running
            adv[i][t], ret[i][t] = running, running + values[i][t]
            next_v = values[i][t]
    return adv, ret


@pytest.mark.parametrize("gamma,lam", [(1.0, 1.0), (0.99, 0.95), (0.9, 0.0)])
def test_gae_matches_reference_with_observation_tokens(gamma, lam):
    b, t = 4, 12
    rewards, values = rand(1, b, t), rand(2, b, t)
    mask = torch.ones(b, t, dtype=torch.long)
    mask[0, 4:7] = 0          # an observation inside the response
    mask[1, :3] = 0           # a prompt
    mask[2] = 0               # nothing to train on
    mask[3, -2:] = 0          # trailing observation
    adv, ret = gae(rewards, values, mask, gamma=gamma, lam=lam)
    ra, rr = ref_gae(rewards.tolist(), values.tolist(), mask.tolist(), gamma, lam)
    assert torch.allclose(adv, torch.tensor(ra, dtype=torch.float64), atol=TOL)
    assert torch.allclose(ret, torch.tensor(rr, dtype=torch.float64), atol=TOL)
    assert adv[2].abs().sum() == 0 and ret[2].abs().sum() == 0


def test_gae_ignores_values_and_rewards_on_observation_tokens():
    rewards, values = rand(3, 1, 10), rand(4, 1, 10)
    mask = torch.ones(1, 10, dtype=torch.long)
    mask[0, 3:6] = 0
    a1, r1 = gae(rewards, values, mask, gamma=0.95, lam=0.9)
    rewards[0, 3:6], values[0, 3:6] = 100.0, -100.0
    a2, r2 = gae(rewards, values, mask, gamma=0.95, lam=0.9)
    assert torch.equal(a1, a2) and torch.equal(r1, r2)
    # γ = λ = 1: the advantage is the return-to-go minus the value
    a, _ = gae(rewards, values, mask, gamma=1.0, lam=1.0)
    on = mask[0].bool()
    togo = rewards[0][on].flip(0).cumsum(0).flip(0)
    assert torch.allclose(a[0][on], togo - values[0][on], atol=TOL)


def ref_value_loss(v, old, ret, mask, c):
    """PPO value loss with the ppo2 value clip, token mean, x0.5."""
    total, n = 0.0, 0
    for i in range(v.shape[0]):
        for t in range(v.shape[1]):
            if mask[i, t]:
                vc = old[i, t] + (v[i, t] - old[i, t]).clamp(-c, c) if c else v[i, t]
                total = total + 0.5 * torch.maximum((v[i, t] - ret[i, t]) ** 2,
                                                    (vc - ret[i, t]) ** 2)
                n += 1
    return total / n


@pytest.mark.parametrize("clip_range", [0.2, None])
def test_value_loss_matches_reference_values_and_gradients(clip_range):
    old, ret = rand(5, 3, 6), rand(6, 3, 6)
    v = (old + rand(7, 3, 6, scale=0.5)).requires_grad_()
    mask = rand_mask(2, 3, 6)
    loss = value_loss(v, old, ret, mask, clip_range=clip_range, agg="token-mean")
    g, = torch.autograd.grad(loss, v)
    v2 = v.detach().clone().requires_grad_()
    ref = ref_value_loss(v2, old, ret, mask, clip_range)
    g2, = torch.autograd.grad(ref, v2)
    assert float(loss) == pytest.approx(float(ref), abs=TOL)
    assert torch.allclose(g, g2, atol=TOL)
    empty = value_loss(v, old, ret, torch.zeros(3, 6), clip_range=clip_range)
    assert float(empty) == 0.0


# --- rollout correction -------------------------------------------------------------------

def correction_case():
    """Three segments: episode 0 has two (thinking mode), episode 1 one; logprobs aligned
    to ids, position 0 never a policy token."""
    sampler = [rand(10, 6) - 2, rand(11, 4) - 2, rand(12, 5) - 2]
    learner = [s + rand(20 + i, s.numel(), scale=0.6) for i, s in enumerate(sampler)]
    mask = [[0, 1, 1, 0, 1, 1], [0, 1, 1, 1], [1, 1, 0, 1, 1]]
    return learner, sampler, mask, [0, 0, 1]


@pytest.mark.parametrize("name", ["token-tis", "seq-tis", "token-mask", "seq-mask"])
def test_correction_weights_match_reference(name):
    learner, sampler, mask, episode_of = correction_case()
    cap = 1.5
    w, metrics = correction_weights(name, learner, sampler, mask, episode_of, cap=cap)
    on = [[bool(m) and t > 0 for t, m in enumerate(ms)] for ms in mask]
    logr = [[float(lo[t] - ls[t]) for t in range(len(ms))]
            for lo, ls, ms in zip(learner, sampler, mask)]
    per_ep, count = {}, {}
    for s, e in enumerate(episode_of):
        per_ep[e] = per_ep.get(e, 0.0) + sum(x for x, o in zip(logr[s], on[s]) if o)
        count[e] = count.get(e, 0) + sum(on[s])
    for s, e in enumerate(episode_of):
        for t, o in enumerate(on[s]):
            if not o:
                continue
            r = math.exp(logr[s][t])
            expect = {"token-tis": min(r, cap),
                      "seq-tis": min(math.exp(per_ep[e]), cap),
                      "token-mask": float(1 / cap <= r <= cap),
                      "seq-mask": float(abs(per_ep[e] / count[e]) <= math.log(cap))}[name]
            assert float(w[s][t]) == pytest.approx(expect, abs=TOL), (s, t)
    ratios = [math.exp(x) for s in range(3) for x, o in zip(logr[s], on[s]) if o]
    assert metrics["rollout_correction/ratio_mean"] == pytest.approx(sum(ratios) / len(ratios))
    assert metrics["rollout_correction/ratio_max"] == pytest.approx(max(ratios))
    ws = [float(w[s][t]) for s in range(3) for t, o in enumerate(on[s]) if o]
    clipped = sum(1 for x in ws if x == 0 or x >= cap) / len(ws)
    assert metrics["rollout_correction/clipped_frac"] == pytest.approx(clipped)
    assert 0 < clipped < 1 or name.startswith("seq")


def test_no_mismatch_means_unit_weights_and_zero_kl():
    lp = [rand(1, 6), rand(2, 4)]
    w, m = correction_weights("token-tis", lp, lp, [[0, 1, 1, 1, 1, 1], [0, 1, 1, 1]], [0, 1],
                              cap=2.0)
    assert all(torch.equal(x, torch.ones_like(x)) for x in w)
    assert m["rollout_correction/kl"] == 0.0 and m["rollout_correction/clipped_frac"] == 0.0
    with pytest.raises(ValueError, match="correction_cap"):
        correction_weights("token-tis", lp, lp, [[1] * 6, [1] * 4], [0, 1], cap=1.0)


@pytest.mark.parametrize("name", ["clip", "cispo"])
def test_correction_weights_scale_each_token_loss(name):
    old = -rand(3, 3, 5).abs()
    lp = (old + rand(4, 3, 5, scale=0.1)).requires_grad_()
    mask, adv = rand_mask(3, 3, 5), rand(5, 3)
    w = torch.rand(3, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    kw = dict(agg="token-mean", eps_low=0.2, eps_high=0.28)
    weighted, _ = POLICY_LOSSES[name](lp, old, adv, mask, is_weights=w, **kw)
    # per token: the weighted loss is Σ w_t l_t; recover each l_t from unit weights
    parts = []
    for i in range(3):
        for t in range(5):
            e = torch.zeros(3, 5, dtype=torch.float64)
            e[i, t] = 1.0
            parts.append(float(w[i, t]) * float(POLICY_LOSSES[name](lp, old, adv, mask,
                                                                    is_weights=e, **kw)[0]))
    assert float(weighted) == pytest.approx(sum(parts), abs=TOL)


# --- episode-level aggregation -----------------------------------------------------------

@pytest.mark.parametrize("agg", ["seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_episode_level_aggregation_counts_episodes_not_rows(agg):
    """Rows 0-3 are one episode (4 turns), row 4 another: each episode weighs 1/2 in
    seq-mean-token-mean; Dr.GRPO divides by 2 episodes x max_len."""
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 1, 0], [1, 1, 0]])
    values = rand(8, 5, 3).requires_grad_()
    episode_tokens = torch.tensor([7.0, 7.0, 7.0, 7.0, 2.0])
    loss = aggregate(values, mask, agg, max_len=10, num_seqs=2, row_tokens=episode_tokens)
    g, = torch.autograd.grad(loss, values)
    ep0, ep1 = g[:4][mask[:4].bool()], g[4][mask[4].bool()]
    if agg == "seq-mean-token-mean":
        assert float(ep0.sum()) == pytest.approx(0.5) and float(ep1.sum()) == pytest.approx(0.5)
    else:
        assert torch.allclose(g[mask.bool()], torch.full_like(g[mask.bool()], 1 / 20))
