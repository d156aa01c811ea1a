"""The learner at paper scale, checked on tiny tensors and models: chunked token
logprobs / entropies equal the unchunked ones (values and gradients, temperature and
action masks included), bf16 shared-prefix gradients summed in float32, the DeepSpeed
config (fp32 gradient accumulation, DeepSpeedCPUAdam only with optimizer offload),
placement on run.device, and the GPU preset's checkpoint cadence."""
from __future__ import annotations

import pytest
import torch

from ablate.learners import batching, make_learner
from ablate.learners.batching import shifted_stats
from ablate.learners.deepspeed_learner import check_device, cpu_adam, ds_config
from ablate.learners.prefix import Prefix
from test_learners import (clipped_token_mean, lcfg, load, make_batch,  # noqa: F401
                                 weights_dir)


def _stats_and_grads(x, t, allowed, chunk, entropy_in_loss):
    lp, ent = shifted_stats(x, t, 0.7, allowed, 1, True, chunk=chunk)
    w = torch.linspace(-1, 1, lp.numel()).view_as(lp).to(lp.dtype)
    loss = (lp * w).sum() + ((ent * w.flip(-1)).sum() if entropy_in_loss else 0.0)
    return lp, ent, torch.autograd.grad(loss, x)[0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("entropy_in_loss", [False, True])
def test_chunked_stats_equal_unchunked_values_and_gradients(dtype, entropy_in_loss):
    g = torch.Generator().manual_seed(0)
    x = (3 * torch.randn(3, 11, 97, generator=g)).to(dtype).requires_grad_()
    t = torch.randint(0, 97, (3, 11), generator=g)
    # masks at offset 1: row 0 position 4 (3 ids), row 2 positions 2 (one id) and 11
    allowed = [{4: [int(t[0, 3]), 5, 6]}, None, {2: [int(t[2, 1])], 11: [int(t[2, 10]), 1]}]
    dense = _stats_and_grads(x, t, allowed, 0, entropy_in_loss)
    assert dense[0][2, 1].item() == 0.0                  # the only allowed id: logprob 0
    assert torch.isfinite(dense[2]).all()
    for chunk in (1, 4, 11, 512):
        got = _stats_and_grads(x, t, allowed, chunk, entropy_in_loss)
        for a, b in zip(dense, got):
            assert a.dtype == b.dtype and torch.equal(a, b), (chunk, dtype)


def test_chunked_stats_save_only_the_logits_for_backward():
    """No [positions, vocab] float32 tensor is kept between forward and backward: the
    graph's saved tensors are the bf16 logits and the targets."""
    x = torch.randn(1, 9, 50).to(torch.bfloat16).requires_grad_()
    t = torch.randint(0, 50, (1, 9))
    lp, ent = shifted_stats(x, t, 1.0, None, 1, True, chunk=4)
    saved = lp.grad_fn.saved_tensors
    assert [s.dtype for s in saved] == [torch.bfloat16, torch.long]
    assert ent.grad_fn is lp.grad_fn


def test_update_with_chunking_equals_unchunked(weights_dir, tmp_path, monkeypatch):
    """A torch learner's whole update (shared prefix, action masks, micro-batches):
    metrics and every trained weight identical with and without chunking."""
    segs, adv = make_batch(lengths=(40, 64, 23, 57))
    for s in segs:
        s.ids[:6] = segs[0].ids[:6]                       # the 6-token prompt, shared
    segs[1].allowed = {30: [segs[1].ids[30], 3, 7]}
    results = []
    for chunk in (0, 5):
        monkeypatch.setattr(batching, "LOGPROB_CHUNK", chunk)
        cfg = lcfg("torch", micro_batch_tokens=128, shared_prefix_min_tokens=4)
        lrn = make_learner(cfg, load(weights_dir), lr=1e-3, seed=0, temperature=0.8,
                           ckpt_dir=tmp_path / f"c{chunk}", device="cpu")
        m = lrn.update(segs, adv, clipped_token_mean)
        assert m["prefix_tokens"] == 6
        results.append((m["loss"], m["grad_norm"],
                        [p.detach().clone() for p in lrn.model.parameters()]))
    (l0, n0, w0), (l1, n1, w1) = results
    assert l0 == l1 and n0 == n1
    assert all(torch.equal(a, b) for a, b in zip(w0, w1))


def test_bf16_prefix_gradients_accumulate_in_float32():
    graph = [torch.ones(1, 1, 3, 2, dtype=torch.bfloat16, requires_grad=True) for _ in range(2)]
    outs = [graph[0] * 1, graph[1] * 1, torch.ones(1, 5, requires_grad=True),
            torch.zeros(1, 3, requires_grad=True)]
    pre = Prefix([1, 2, 3], [(outs[0], outs[1])], outs[2], outs[3], None).leaves()
    # micro-batch gradients 1, 2^-8, 2^-8, 2^-8 (each exact in bf16); a bf16 running sum
    # stays 1.0 (1 + 2^-8 rounds to even), the float32 one is 1 + 3 * 2^-8
    for c in (1.0, 2.0 ** -8, 2.0 ** -8, 2.0 ** -8):
        (pre.kv[0][0].float() * c).sum().backward()
        pre.flush_grads()
    assert pre.kv[0][0].grad is None and pre.acc[0].dtype == torch.float32
    assert torch.equal(pre.acc[0], torch.full((1, 1, 3, 2), 1 + 3 * 2.0 ** -8))
    pre.vjp_loss().backward()
    # one rounding of the float32 sum to bf16 (ties to even: 1 + 2 * 2^-7)
    assert torch.equal(graph[0].grad, torch.full((1, 1, 3, 2), 1 + 2 * 2.0 ** -7,
                                                 dtype=torch.bfloat16))
    assert graph[1].grad is None


def test_ds_config_accumulates_bf16_gradients_in_fp32():
    assert ds_config(lcfg("deepspeed", dtype="bfloat16"))["data_types"] == \
        {"grad_accum_dtype": "fp32"}
    assert "data_types" not in ds_config(lcfg("deepspeed"))                  # fp32
    assert "data_types" not in ds_config(lcfg("deepspeed", dtype="bfloat16", zero_stage=0))


def test_zero3_bf16_engine_accumulates_in_fp32(weights_dir, tmp_path):
    cfg = lcfg("deepspeed", dtype="bfloat16")
    lrn = make_learner(cfg, load(weights_dir, cfg), lr=1e-3, seed=0, temperature=1.0,
                       ckpt_dir=tmp_path, device="cpu")
    assert lrn.engine.get_data_types() == (torch.bfloat16, torch.float32)
    assert lrn.engine.optimizer.gradient_accumulation_dtype == torch.float32
    assert isinstance(lrn.engine.optimizer.optimizer, torch.optim.AdamW)   # no offload


def test_cpu_adam_only_with_optimizer_offload():
    off = lcfg("deepspeed")
    off.ds_overrides = {"zero_optimization": {"offload_optimizer": {"device": "cpu"}}}
    assert cpu_adam(ds_config(off)) is True
    assert cpu_adam(ds_config(lcfg("deepspeed"))) is False
    nvme = lcfg("deepspeed")
    nvme.ds_overrides = {"zero_optimization": {"offload_optimizer": {"device": "nvme"}}}
    assert cpu_adam(ds_config(nvme)) is False


def test_deepspeed_device_mismatch_is_one_line():
    check_device(torch.device("cpu"), "cpu")
    check_device(torch.device("cuda", 1), "cuda:0")
    with pytest.raises(ValueError, match=r"^run.device=cuda but DeepSpeed's accelerator "
                                         r"is cpu: choose run.device=cpu") as e:
        check_device(torch.device("cpu"), "cuda")
    assert "\n" not in str(e.value)


def test_torch_learner_places_model_and_reference(weights_dir, tmp_path):
    ref = load(weights_dir).to(torch.bfloat16)
    lrn = make_learner(lcfg("torch"), load(weights_dir).to(torch.bfloat16), lr=1e-3,
                       seed=0, temperature=1.0, ckpt_dir=tmp_path, ref_model=ref,
                       device="cpu")
    assert lrn.device == torch.device("cpu")
    assert {p.dtype for p in lrn.model.parameters()} == {torch.float32}   # master weights
    assert {p.device.type for p in lrn.ref.parameters()} == {"cpu"}


def test_paper_preset_checkpoints_every_25_steps_and_cpu_default_every_step():
    from ablate.apps.cli import compose_config, normalise_overrides
    paper = compose_config(normalise_overrides(
        ["+experiment=enronhop_paper", "+paper_cell=qwen3_4b_shaped_lora"]))
    assert paper.learner.checkpoint_every == 25
    assert compose_config(normalise_overrides([])).learner.checkpoint_every == 1


@pytest.mark.parametrize("name", ["torch", "deepspeed"])
def test_activation_checkpointing_changes_no_value_or_gradient(weights_dir, tmp_path, name):
    """learner.activation_checkpointing: the same loss, grad norm and weights after an
    update with a shared prefix (its KV cache kept through the reruns), and every
    decoder layer's activations recomputed in backward."""
    from ablate.learners import recompute
    segs, adv = make_batch(lengths=(40, 64, 23, 57))
    for s in segs:
        s.ids[:6] = segs[0].ids[:6]
    calls, real = [], recompute.checkpoint
    out = []
    for on in (False, True):
        cfg = lcfg(name, micro_batch_tokens=128, shared_prefix_min_tokens=4,
                   activation_checkpointing=on)
        lrn = make_learner(cfg, load(weights_dir, cfg), lr=1e-3, seed=0, temperature=0.8,
                           ckpt_dir=tmp_path / f"{name}{on}", device="cpu")
        recompute.checkpoint = lambda *a, **k: (calls.append(1), real(*a, **k))[1]
        try:
            m = lrn.update(segs, adv, clipped_token_mean)
        finally:
            recompute.checkpoint = real
        assert m["prefix_tokens"] == 6
        out.append((m["loss"], m["grad_norm"], weights_of(lrn)))
    (l0, n0, w0), (l1, n1, w1) = out
    assert len(calls) >= 2 * 2 and len(calls) % 2 == 0   # 2 layers x (prefix + mbs)
    assert l0 == l1 and abs(n0 - n1) <= 1e-6 * n0
    assert all(torch.allclose(w0[k], w1[k], atol=1e-7, rtol=0) for k in w0)


def weights_of(lrn):
    return {k: v.double() for k, v in lrn.export_state_dict().items()}
