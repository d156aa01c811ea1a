"""The output head on trained positions only (ablate/learners/head.py): loss, every
parameter gradient and the loss's metrics must equal the full-head computation within
1e-5 in float32, with and without the shared prefix, LoRA on and off, a reference model
(KL term), action masks on trained positions, several micro-batches, plain torch and
DeepSpeed ZeRO-3 learners."""
from __future__ import annotations

import pytest
import torch

from ablate.learners.head import head_rows, trained_positions
from test_learner_prefix import AGGS, P, capture_grads, make_loss, prefix_batch
from test_learners import learner, weights_dir  # noqa: F401  (fixture)


def test_selection_maps_targets_to_predicting_positions():
    mask = torch.tensor([[0, 0, 1, 1, 0, 1], [0, 0, 0, 1, 0, 0]], dtype=torch.float32)
    sel = trained_positions(mask)
    assert sel.rows.tolist() == [0, 0, 0, 1] and sel.cols.tolist() == [2, 3, 5, 3]
    assert sel.flat(6).tolist() == [1, 2, 4, 8]          # target t is predicted at t - 1
    after = trained_positions(mask, prefix=2)            # input starts at position 2
    assert after.cols.tolist() == [3, 5, 3] and after.flat(4).tolist() == [0, 2, 4]
    logits = torch.randn(len(sel), 7)
    ids = torch.randint(0, 7, (2, 6))
    lp, ent = sel.stats(logits, ids, 1.0, [None, {3: [ids[1, 3].item(), 0]}])
    want = torch.log_softmax(logits, -1)[torch.arange(4), ids[sel.rows, sel.cols]]
    want[3] = want[3] - torch.logsumexp(torch.log_softmax(logits[3], -1)[
        torch.tensor(sorted({ids[1, 3].item(), 0}))], 0)        # renormalised in the mask
    torch.testing.assert_close(lp[sel.rows, sel.cols], want)
    assert float(lp[mask == 0].abs().sum()) == 0 and float(ent[mask == 0].abs().sum()) == 0


def test_head_rows_gathers_the_heads_input():
    head = torch.nn.Linear(3, 5)
    h = torch.randn(2, 4, 3)
    with head_rows(head, torch.tensor([1, 6])):
        out = head(h)
    torch.testing.assert_close(out, head(h.reshape(-1, 3)[[1, 6]])[None])
    assert head(h).shape == (2, 4, 5)                    # the hook is gone afterwards


def run_heads(weights_dir, tmp_path, name, shared, lora):  # noqa: F811
    segs, adv = prefix_batch()
    out = {}
    for only in (False, True):
        lrn = learner(weights_dir, tmp_path / f"{name}{only}", name, lr=0.0, lora=lora,
                      ref=not lora, micro_batch_tokens=160, shared_prefix=shared)
        lrn.head_on_trained_only = only
        grads = capture_grads(lrn)
        out[only] = ([lrn.update(segs, adv, make_loss(agg)) for agg in AGGS], grads)
    return out


@pytest.mark.parametrize("name", ["torch", "deepspeed"])
@pytest.mark.parametrize("shared,lora", [(True, False), (False, False), (True, True)])
def test_loss_grads_and_metrics_equal_the_full_head(weights_dir, tmp_path, name, shared,  # noqa: F811
                                                    lora):
    out = run_heads(weights_dir, tmp_path, name, shared, lora)
    (s0, g0), (s1, g1) = out[False], out[True]
    for a, b, ga, gb in zip(s0, s1, g0, g1):
        assert a["micro_batches"] >= 2 and a["prefix_tokens"] == (P if shared else 0)
        assert {"loss", "pg_loss", "approx_kl", "clip_frac_low", "ratio_mean"} <= a.keys()
        for k, v in a.items():   # every metric but the timings
            if k not in ("seconds", "tokens_per_s"):
                assert b[k] == pytest.approx(v, abs=1e-5, rel=1e-5), k
        assert ga.keys() == gb.keys() and ga
        worst = max(float((ga[k] - gb[k]).abs().max()) for k in ga)
        assert worst < 1e-5, worst
        assert max(float(v.abs().max()) for v in ga.values()) > 1e-3   # not all ~0
