"""Trajectory DPO (ablate.algos.dpo): the loss equals the closed form of Rafailov et al.
(2023, eq. 7) on hand-built pairs (values and gradients) and through the learner
(micro-batched, with and without the shared prefix, against plain forwards of the policy
and a separately configured reference); a pair is never split across micro-batches;
pair rules; the learner's packing keys."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import transformers

import test_harness_util as U
import test_learners as L
from ablate.algos import DPO
from ablate.algos.dpo import PairBatch, all_pairs, extreme_pairs, first_pairs, group_pairs
from ablate.harness.episode import Episode
from ablate.learners import LossInputs
from ablate.learners.batching import pack
from test_learner_prefix import prefix_batch

torch.set_num_threads(1)


def closed_form(pw, pl, rw, rl, beta):
    return -F.logsigmoid(beta * ((pw - rw) - (pl - rl))).mean()


def episodes_from(segments, layout, correct):
    """layout: per episode, the positions of its segments; groups: pairs of episodes."""
    return [Episode(task=U.TASKS[0], group=k // 2, sample=k % 2,
                    segments=[segments[i] for i in idx], correct=c)
            for k, (idx, c) in enumerate(zip(layout, correct))]


# --- the loss on hand-built pairs -----------------------------------------------------------

@pytest.mark.parametrize("beta", [0.1, 0.5])
def test_loss_equals_closed_form_values_and_gradients(beta):
    g = torch.Generator().manual_seed(0)
    lp = (-torch.rand(5, 9, generator=g, dtype=torch.float64)).requires_grad_()
    mask = (torch.rand(5, 9, generator=g) > 0.3).double()
    mask[:, 0] = 0
    episode_of = [0, 0, 1, 2, 3]             # episode 0 spans two rows
    ref = torch.tensor([-3.0, -2.5, -4.0, -1.0], dtype=torch.float64)
    pairs = [(0, 1), (3, 2)]
    batch = PairBatch([None] * 5, torch.zeros(5), episode_of, [1, 1, 1, 1], pairs=pairs,
                      ref_logps=ref, pack_keys=[0, 0, 0, 1, 1])
    dpo = DPO(torch.nn.Linear(1, 1), beta=beta)
    x = LossInputs(lp, lp.detach(), torch.zeros(5), mask, lp.detach(), None, num_tokens=1,
                   num_seqs=5, index=[0, 1, 2, 3, 4])
    loss, metrics = dpo.loss_fn(batch)(x)
    (grad,) = torch.autograd.grad(loss, lp)
    seq = (lp * mask).sum(-1)
    expect = closed_form(torch.stack([seq[0] + seq[1], seq[4]]), torch.stack([seq[2], seq[3]]),
                         ref[[0, 3]], ref[[1, 2]], beta)
    (grad_expect,) = torch.autograd.grad(expect, lp)
    assert float(loss.detach()) == pytest.approx(float(expect.detach()), rel=1e-12)
    assert torch.allclose(grad, grad_expect, rtol=1e-10, atol=1e-12)
    assert metrics["pairs"] == 2
    # a micro-batch holding one segment of a two-segment episode refuses to compute
    part = LossInputs(lp[:1], lp[:1].detach(), torch.zeros(1), mask[:1], lp[:1].detach(),
                      None, num_tokens=1, num_seqs=1, index=[0])
    with pytest.raises(RuntimeError, match="split across micro-batches"):
        dpo.loss_fn(batch)(part)


def test_pair_rules_skip_ties_and_all_equal_groups():
    assert first_pairs([True, False, True, False, False], None) == [(0, 1), (2, 3)]
    assert all_pairs([True, False, True], None) == [(0, 1), (2, 1)]
    assert first_pairs([True, True], None) == [] == first_pairs([False, False], None)
    assert extreme_pairs(None, [0.2, 0.9, 0.1]) == [(1, 2)]
    assert extreme_pairs(None, [0.5, 0.5]) == []
    eps = [Episode(task=U.TASKS[0], group=0, sample=i, correct=c)
           for i, c in enumerate([True, False, False, False, True, True])]
    assert group_pairs(eps, [1, 0, 0, 0, 1, 1], [0, 0, 1, 1, 2, 2], "first") == [(0, 1)]
    with pytest.raises(ValueError, match="algo.dpo.pairs='best'"):
        group_pairs(eps, [0] * 6, [0] * 6, "best")


def test_packing_keys_keep_units_together():
    segs, _ = L.make_batch(seed=1)
    keys = [0, 1, 0, 2, 1, 2]
    groups = pack(segs, 64, keys=keys)
    for g in groups:
        for k in {keys[i] for i in g}:
            assert {i for i in range(6) if keys[i] == k} <= set(g)
    assert sorted(i for g in groups for i in g) == list(range(6))
    assert pack(segs, 64) == pack(segs, 64, keys=None)


# --- through the learner -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    dirs = []
    for seed in (1234, 99):   # the policy, and a different model as the reference
        torch.manual_seed(seed)
        model = transformers.AutoModelForCausalLM.from_config(L.tiny_config())
        d = tmp_path_factory.mktemp(f"tiny_{seed}")
        model.save_pretrained(d)
        dirs.append(str(d))
    return dirs


def plain_logp(model, seg, temperature) -> float:
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([seg.ids])).logits[0, :-1].double() / temperature
    for t, allowed in (seg.allowed or {}).items():
        keep = torch.zeros(logits.shape[-1], dtype=torch.bool)
        keep[list(allowed)] = True
        logits[t - 1] = logits[t - 1].masked_fill(~keep, float("-inf"))
    lp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(seg.ids[1:])[:, None])[:, 0]
    m = torch.tensor(seg.mask[1:], dtype=torch.bool)
    return float(lp[m].sum())


@pytest.mark.parametrize("shared_prefix,beta", [(False, 0.1), (True, 0.1), (True, 1.0)])
def test_learner_loss_is_closed_form_and_pairs_stay_whole(weights, tmp_path, shared_prefix,
                                                          beta):
    policy_dir, ref_dir = weights
    segs, _ = prefix_batch(seed=2)
    layout = [[0, 1], [2], [3], [4, 5]]          # episodes 0 and 3 span two segments
    eps = episodes_from(segs, layout, [True, False, False, True])
    temperature = 0.8
    dpo = DPO(transformers.AutoModelForCausalLM.from_pretrained(ref_dir), beta=beta,
              temperature=temperature, micro_batch_tokens=128)
    kept, rewards, groups, metrics = dpo.augment(eps, [1.0, 0.0, 0.0, 1.0], [0, 0, 1, 1], None)
    assert metrics["dpo/pairs"] == 2 and len(kept) == 4
    batch = dpo.prepare(kept, rewards, groups, None)
    lrn = L.learner(policy_dir, tmp_path, "torch", temperature=temperature,
                    micro_batch_tokens=128, shared_prefix=shared_prefix)
    loss_fn, calls = dpo.loss_fn(batch), []

    def spy(x):
        calls.append(list(x.index))
        return loss_fn(x)
    spy.pack_keys, spy.sum_metrics = loss_fn.pack_keys, loss_fn.sum_metrics
    policy, ref = L.load(policy_dir), transformers.AutoModelForCausalLM.from_pretrained(ref_dir)
    seq = {name: torch.tensor([sum(plain_logp(m, segs[i], temperature) for i in idx)
                               for idx in layout], dtype=torch.float64)
           for name, m in (("policy", policy), ("ref", ref))}
    stats = lrn.update(batch.segments, batch.advantages, spy)
    assert len(calls) > 1                                  # really micro-batched
    assert (stats["prefix_tokens"] > 0) == shared_prefix
    for idx in ([0, 1, 2], [3, 4, 5]):                     # both episodes of each pair
        assert sum(set(idx) <= set(c) for c in calls) == 1
    assert torch.allclose(batch.ref_logps, seq["ref"], rtol=1e-5)
    expect = closed_form(seq["policy"][[0, 3]], seq["policy"][[1, 2]], seq["ref"][[0, 3]],
                         seq["ref"][[1, 2]], beta)
    assert stats["loss"] == pytest.approx(float(expect), rel=1e-4)
    assert stats["pairs"] == 2


def test_reference_initial_is_the_starting_policy(tmp_path):
    from ablate.apps.cli import compose_config, normalise_overrides
    cfg = compose_config(normalise_overrides(["+algo=dpo", "algo.dpo.beta=0.3"]))
    dpo = DPO.from_config(cfg.algo, cfg=cfg)
    assert dpo.beta == 0.3 and dpo.describe()["reference"] == "initial"
    from ablate.models.loading import load_policy
    start, _ = load_policy(cfg.model)
    for (k, a), (_, b) in zip(start.state_dict().items(), dpo.reference.state_dict().items()):
        assert torch.equal(a, b), k
    assert not any(p.requires_grad for p in dpo.reference.parameters())
    cfg.algo.dpo.reference = str(tmp_path / "missing")
    with pytest.raises(ValueError, match="algo.dpo.reference="):
        DPO.from_config(cfg.algo, cfg=cfg)
