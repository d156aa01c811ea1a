"""A batched pack's joint update (ablate/learners/packed.py): the updates of several LoRA
cells over ONE base run as one forward and one backward per micro-batch index, each row
through its own cell's adapter. Each cell's loss, metrics and every adapter gradient must
equal its solo update's within 1e-5 (float32), with different batches, prefix lengths,
losses, a reference model on one cell and none on another; a cell whose loss raises fails
alone and leaves the others' gradients untouched."""
from __future__ import annotations

import pytest
import torch

from ablate.apps.pack_turns import take_turns
from ablate.learners import make_learner
from ablate.learners.packed import UpdateEngine, concat
from ablate.models.loading import sharing_copy
from test_learner_prefix import capture_grads, make_loss, prefix_batch
from test_learners import lcfg, load, weights_dir  # noqa: F401  (fixture)

# per cell: its batch (seed, row lengths, shared prefix length), loss aggregation, a ref
CELLS = [dict(batch=(0, (70, 52, 95, 47), 30), agg="token-mean", ref=False),
         dict(batch=(1, (60, 81, 54), 24), agg="seq-mean-token-mean", ref=True),
         dict(batch=(2, (90, 38, 66, 71, 55), 30), agg="token-mean", ref=False)]
SKIP = {"seconds", "tokens_per_s", "forward_tokens", "prefix_tokens", "micro_batches"}


def cell_learner(weights_dir, tmp_path, i, base, spec, shared_prefix, budget):  # noqa: F811
    cfg = lcfg("torch", lora=True, micro_batch_tokens=budget, shared_prefix=shared_prefix)
    lrn = make_learner(cfg, sharing_copy(base), lr=1e-2, seed=i, temperature=1.0,
                       ckpt_dir=tmp_path / f"c{i}", ref_model=load(weights_dir)
                       if spec["ref"] else None)
    g = torch.Generator().manual_seed(100 + i)   # lora_B starts at 0: make the cells differ
    with torch.no_grad():
        for n, p in lrn.model.named_parameters():
            if "lora_B" in n:
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
    return lrn


def run_cells(weights_dir, tmp_path, joint, raising=None, shared_prefix=True,  # noqa: F811
              budget=160):
    """Each cell's update (joint: through one engine, the cells taking turns); per cell
    its metrics (or the exception it raised), its gradients and the engine."""
    base = load(weights_dir)
    learners = [cell_learner(weights_dir, tmp_path / str(joint), i, base, s, shared_prefix,
                             budget) for i, s in enumerate(CELLS)]
    engine = UpdateEngine()
    if joint:
        for lrn in learners:
            engine.attach(lrn)
    grads = [capture_grads(lrn) for lrn in learners]

    def job(i):
        def run():
            segs, adv = prefix_batch(*CELLS[i]["batch"][:1], lengths=CELLS[i]["batch"][1],
                                     prefix=CELLS[i]["batch"][2])
            loss = make_loss(CELLS[i]["agg"])
            if i == raising:
                def loss(li):   # noqa: F811 - this cell's loss is broken
                    raise ValueError("a broken loss")
            try:
                return learners[i].update(segs, adv, loss)
            except ValueError as exc:
                return exc
        return run
    out, _ = take_turns([job(i) for i in range(len(CELLS))])
    return out, grads, engine


def assert_cell_equal(a, b, ga, gb, tol=1e-5):
    assert set(a) - SKIP == set(b) - SKIP
    for k in set(a) - SKIP:
        assert b[k] == pytest.approx(a[k], abs=tol, rel=tol), k
    assert ga.keys() == gb.keys() and ga
    worst = max(float((ga[n] - gb[n]).abs().max()) for n in ga)
    assert worst < tol, worst
    assert max(float(v.abs().max()) for v in ga.values()) > 100 * tol   # not all ~0


@pytest.mark.parametrize("shared_prefix", [True, False])
def test_joint_update_equals_each_cell_alone(weights_dir, tmp_path, shared_prefix):  # noqa: F811
    solo, g_solo, _ = run_cells(weights_dir, tmp_path, False, shared_prefix=shared_prefix)
    joint, g_joint, engine = run_cells(weights_dir, tmp_path, True,
                                       shared_prefix=shared_prefix)
    assert engine.updates == 3 and engine.passes == 1      # all three in one joint update
    for i in range(3):
        assert_cell_equal(solo[i], joint[i], g_solo[i][0], g_joint[i][0])
    if shared_prefix:   # the prefixes, cut to the shortest (24), forwarded once per cell
        assert [m["prefix_tokens"] for m in joint] == [24, 24, 24]
        assert [m["prefix_tokens"] for m in solo] == [30, 24, 30]
    # each joint forward keeps learner.micro_batch_tokens (160, about one solo
    # micro-batch): as many forwards as the cells' micro-batches, or fewer
    assert max(m["micro_batches"] for m in solo) < engine.forwards \
        <= sum(m["micro_batches"] for m in solo)


def test_a_larger_budget_joins_more_rows_per_forward(weights_dir, tmp_path):  # noqa: F811
    solo, g_solo, _ = run_cells(weights_dir, tmp_path, False, budget=2000)
    joint, g_joint, engine = run_cells(weights_dir, tmp_path, True, budget=2000)
    assert engine.forwards == max(m["micro_batches"] for m in solo) == 1
    for i in range(3):
        assert_cell_equal(solo[i], joint[i], g_solo[i][0], g_joint[i][0])


def test_chunks_keep_the_budget():
    from ablate.learners.packed import chunks
    assert chunks([(2, 50), (1, 60), (3, 40), (1, 200)], 200) == [[0, 1], [2], [3]]
    assert chunks([(1, 30)] * 5, 60) == [[0, 1], [2, 3], [4]]
    assert chunks([(1, 30)] * 5, 10) == [[0], [1], [2], [3], [4]]   # each alone over it


def test_a_cell_whose_loss_raises_fails_alone(weights_dir, tmp_path):  # noqa: F811
    solo, g_solo, _ = run_cells(weights_dir, tmp_path, False)
    joint, g_joint, engine = run_cells(weights_dir, tmp_path, True, raising=1)
    assert isinstance(joint[1], ValueError) and g_joint[1] == []   # no optimizer step
    for i in (0, 2):   # their gradients were reset and recomputed alone: not doubled
        assert_cell_equal(solo[i], joint[i], g_solo[i][0], g_joint[i][0])


def test_concat_pads_rows_to_the_longest(weights_dir):  # noqa: F811
    from ablate.learners.batching import collate
    segs, _ = prefix_batch(0, lengths=(40, 25, 33), prefix=10)
    a, b = collate(segs, [0]), collate(segs, [1, 2])
    both = concat([a, b])
    assert both.ids.shape == (3, 40) and both.lengths == [40, 25, 33]
    assert torch.equal(both.ids[1, :33], b.ids[0]) and int(both.mask[1, 33:].sum()) == 0
    assert both.index == [0, 1, 2]
