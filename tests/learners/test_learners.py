"""Learners: token-exact logprobs, ZeRO-3 / torch parity, micro-batching, LoRA, exact
resume, degenerate batches. Tiny Qwen3 weights are saved once and loaded by every learner
(zero.Init draws different initial weights than plain construction: never rely on seeds).
"""
from __future__ import annotations

import math

import pytest
import torch
import transformers
from omegaconf import OmegaConf

from ablate.harness.episode import Segment
from ablate.learners import LossInputs, build_model_for_learner, make_learner
from ablate.learners.batching import combine_metrics, pack
from ablate.learners import LEARNERS
from ablate.learners.config import LoraConfig

VOCAB = 512
# every parameter really partitioned (the default threshold keeps small ones whole)
PARTITION_ALL = {"zero_optimization": {"stage3_param_persistence_threshold": 0}}


def tiny_config():
    return transformers.Qwen3Config(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, vocab_size=VOCAB, tie_word_embeddings=True,
        max_position_embeddings=512)


@pytest.fixture(scope="module")
def weights_dir(tmp_path_factory):
    torch.manual_seed(1234)
    model = transformers.AutoModelForCausalLM.from_config(tiny_config())
    d = tmp_path_factory.mktemp("tiny_qwen3")
    model.save_pretrained(d)
    return str(d)


def load(weights_dir, cfg=None):
    factory = lambda: transformers.AutoModelForCausalLM.from_pretrained(weights_dir)  # noqa: E731
    return build_model_for_learner(factory, cfg) if cfg is not None else factory()


def lcfg(name, **kw):
    lora = kw.pop("lora", None)
    c = LEARNERS.config(name, **kw)
    if lora:
        c.lora = LoraConfig(enable=True, rank=4, alpha=8, target_modules=["q_proj", "v_proj"])
    if name == "deepspeed":
        c.ds_overrides = PARTITION_ALL
    return OmegaConf.structured(c)


def learner(weights_dir, tmp_path, name, *, temperature=1.0, lr=1e-3, ref=False, **kw):
    cfg = lcfg(name, **kw)
    ref_model = load(weights_dir) if ref else None
    return make_learner(cfg, load(weights_dir, cfg), lr=lr, seed=0, temperature=temperature,
                        ckpt_dir=tmp_path / f"ckpt_{name}", ref_model=ref_model)


def make_batch(seed=0, lengths=(40, 64, 23, 57, 31, 12), prompt=6):
    """Segments with a prompt (mask 0), an observation span (mask 0) and random 'sampler'
    logprobs near plausible values, so that ratios differ from 1 and some clip."""
    g = torch.Generator().manual_seed(seed)
    segs = []
    for L in lengths:
        ids = torch.randint(0, VOCAB, (L,), generator=g).tolist()
        mask = ([0] * prompt + [1] * L)[:L]
        if L > 30:
            mask[20:25] = [0] * 5                      # a tool observation
        old = (-math.log(VOCAB) + 0.3 * torch.randn(L, generator=g)).tolist()
        old = [o if m else 0.0 for o, m in zip(old, mask)]
        segs.append(Segment(ids, mask, old))
    adv = torch.randn(len(lengths), generator=g).tolist()
    return segs, adv


def clipped_token_mean(li: LossInputs):
    """DAPO-style clipped surrogate, token-mean over the whole batch (global count)."""
    ratio = torch.exp(li.logprobs - li.old_logprobs)
    a = li.advantages[:, None]
    per_tok = -torch.minimum(ratio * a, ratio.clamp(0.8, 1.28) * a)
    loss = (per_tok * li.mask).sum() / max(li.num_tokens, 1)
    return loss, {"pg_loss": float(loss.detach())}


def weights(lrn):
    return {k: v.double() for k, v in lrn.export_state_dict().items()}


def max_diff(a, b):
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def hf_logprobs(model, seg, temperature):
    ids = torch.tensor([seg.ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, :-1].float() / temperature
    lp = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None]).squeeze(-1)
    return torch.cat([torch.zeros(1), lp])


# --- pure helpers ------------------------------------------------------------------------
def test_pack_respects_budget_and_covers_every_segment():
    segs, _ = make_batch(lengths=(10, 50, 30, 30, 5, 80))
    groups = pack(segs, 64)
    assert sorted(i for g in groups for i in g) == list(range(6))
    for g in groups:
        longest = max(len(segs[i].ids) for i in g)
        assert len(g) == 1 or len(g) * longest <= 64


def test_combine_metrics_sums_shares_and_weights_means():
    parts = [({"pg_loss": 0.25, "clip_frac": 0.5, "ratio_max": 1.5}, 10.0),
             ({"pg_loss": 0.5, "clip_frac": 0.0, "ratio_max": 2.0}, 30.0)]
    out = combine_metrics(parts)
    assert out == {"pg_loss": 0.75, "clip_frac": 0.125, "ratio_max": 2.0}


# --- torch learner ------------------------------------------------------------------------
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_equal_plain_hf_forward(weights_dir, tmp_path, temperature):
    segs, _ = make_batch()
    lrn = learner(weights_dir, tmp_path, "torch", temperature=temperature,
                  micro_batch_tokens=128)
    plain = load(weights_dir)
    for seg, lp in zip(segs, lrn.logprobs(segs)):
        assert lp.shape == (len(seg.ids),) and lp[0] == 0.0
        torch.testing.assert_close(lp, hf_logprobs(plain, seg, temperature), atol=1e-5, rtol=0)


def test_allowed_tokens_renormalise_like_the_sampler(weights_dir, tmp_path):
    segs, _ = make_batch(lengths=(20,))
    seg = segs[0]
    allowed = {8: [seg.ids[8], 3, 7], 12: [seg.ids[12]]}
    seg.allowed = allowed
    lrn = learner(weights_dir, tmp_path, "torch")
    lp = lrn.logprobs([seg])[0]
    with torch.no_grad():
        logits = load(weights_dir)(input_ids=torch.tensor([seg.ids])).logits[0]
    sub = torch.log_softmax(logits[7, allowed[8]], -1)
    assert lp[8].item() == pytest.approx(sub[0].item(), abs=1e-5)
    assert lp[12].item() == pytest.approx(0.0, abs=1e-6)          # the only allowed token
    free = hf_logprobs(load(weights_dir), seg, 1.0)
    assert lp[9].item() == pytest.approx(free[9].item(), abs=1e-5)  # unconstrained position
    # entropy stays finite with -inf entries, and the update's gradients too
    stats = lrn.update([seg], [1.0], clipped_token_mean)
    assert math.isfinite(stats["loss"]) and math.isfinite(stats["grad_norm"])


def test_micro_batching_equals_one_big_batch(weights_dir, tmp_path):
    segs, adv = make_batch()
    small = learner(weights_dir, tmp_path / "a", "torch", micro_batch_tokens=64)
    big = learner(weights_dir, tmp_path / "b", "torch", micro_batch_tokens=10_000)
    s1 = small.update(segs, adv, clipped_token_mean)
    s2 = big.update(segs, adv, clipped_token_mean)
    assert s1["micro_batches"] >= 5 and s2["micro_batches"] == 1
    assert s1["loss"] == pytest.approx(s2["loss"], abs=1e-6)
    assert s1["pg_loss"] == pytest.approx(s2["pg_loss"], abs=1e-6)
    assert s1["grad_norm"] == pytest.approx(s2["grad_norm"], rel=1e-5)
    assert max_diff(weights(small), weights(big)) < 1e-5


@pytest.mark.parametrize("name", ["torch", "deepspeed"])
def test_fully_masked_batch_gives_zero_grad_and_no_nan(weights_dir, tmp_path, name):
    segs, adv = make_batch(lengths=(16, 9))
    for s in segs:
        s.mask[:] = [0] * len(s.mask)
    lrn = learner(weights_dir, tmp_path, name)
    before = weights(lrn)
    stats = lrn.update(segs, adv, clipped_token_mean)
    assert stats["loss"] == 0.0 and stats["grad_norm"] == 0.0 and stats["train_tokens"] == 0
    after = weights(lrn)
    assert all(torch.isfinite(v).all() for v in after.values())
    assert max_diff(before, after) == 0.0   # fresh AdamW: zero grad, zero moments, no move


def test_warmup_schedule(weights_dir, tmp_path):
    segs, adv = make_batch(lengths=(16,))
    lrn = learner(weights_dir, tmp_path, "torch", lr=1e-3, warmup_steps=4)
    lrs = [lrn.update(segs, adv, clipped_token_mean)["lr"] for _ in range(5)]
    assert lrs == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3])


def test_reference_logprobs_reach_the_loss(weights_dir, tmp_path):
    segs, adv = make_batch(lengths=(30, 18))
    lrn = learner(weights_dir, tmp_path, "torch", ref=True)
    seen = []

    def loss_fn(li):
        seen.append((li.logprobs.detach(), li.ref_logprobs))
        return clipped_token_mean(li)
    lrn.update(segs, adv, loss_fn)
    lrn.update(segs, adv, loss_fn)
    torch.testing.assert_close(seen[0][0], seen[0][1], atol=1e-6, rtol=0)  # same weights
    assert not torch.allclose(seen[1][0], seen[1][1], atol=1e-4)          # policy moved


# --- DeepSpeed ZeRO-3 ---------------------------------------------------------------------
def test_zero3_parity_with_torch(weights_dir, tmp_path):
    """Same weights and batch: same loss, grad norm, and weights after each of two steps;
    the ZeRO-3 learner runs many micro-batches, torch one; both with a reference model."""
    segs, adv = make_batch()
    ds = learner(weights_dir, tmp_path, "deepspeed", micro_batch_tokens=64, ref=True)
    pt = learner(weights_dir, tmp_path, "torch", micro_batch_tokens=10_000, ref=True)
    p = next(p for n, p in ds.model.named_parameters() if "q_proj" in n)
    assert p.numel() == 0 and p.ds_numel > 0          # really partitioned
    assert max_diff(weights(ds), weights(pt)) == 0.0  # loading into the engine is exact
    for lp_ds, lp_pt in zip(ds.logprobs(segs), pt.logprobs(segs)):
        torch.testing.assert_close(lp_ds, lp_pt, atol=1e-5, rtol=0)
    refs = []

    def loss_fn(li):
        refs.append(float((li.ref_logprobs - li.logprobs.detach()).abs().max()))
        return clipped_token_mean(li)
    for _ in range(2):
        a, b = ds.update(segs, adv, loss_fn), pt.update(segs, adv, loss_fn)
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-6)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-5)
        assert a["lr"] == b["lr"] and a["train_tokens"] == b["train_tokens"]
        assert max_diff(weights(ds), weights(pt)) < 1e-5
    assert refs[0] < 1e-5 and refs[-1] > 1e-4
    # ZeRO-3's memory-efficient linear would have replaced torch.nn.functional.linear for
    # the whole process (the HF sampler beside the learner paid its dispatch on every call)
    assert torch.nn.functional.linear is torch._C._nn.linear


def test_zero3_checkpoint_resume_is_bit_exact(weights_dir, tmp_path):
    _resume_is_bit_exact(weights_dir, tmp_path, "deepspeed")


def test_torch_checkpoint_resume_is_bit_exact(weights_dir, tmp_path):
    _resume_is_bit_exact(weights_dir, tmp_path, "torch")


def _resume_is_bit_exact(weights_dir, tmp_path, name):
    (b1, a1), (b2, a2) = make_batch(1), make_batch(2)
    kw = dict(micro_batch_tokens=128, warmup_steps=3, keep_checkpoints=2)
    first = learner(weights_dir, tmp_path, name, **kw)
    assert first.load() is None
    first.update(b1, a1, clipped_token_mean)
    first.save(1, {"step": 1, "note": "x"})
    torch.manual_seed(99)                      # RNG after the save is restored on load
    expected_rng = torch.rand(3)
    uninterrupted = first.update(b2, a2, clipped_token_mean)
    expected = weights(first)

    resumed = learner(weights_dir, tmp_path, name, **kw)   # same ckpt_dir
    torch.manual_seed(5)
    assert resumed.load() == (1, {"step": 1, "note": "x"})
    torch.manual_seed(99)
    assert torch.equal(torch.rand(3), expected_rng)
    again = resumed.update(b2, a2, clipped_token_mean)
    assert again["loss"] == uninterrupted["loss"] and again["lr"] == uninterrupted["lr"]
    got = weights(resumed)
    assert all(torch.equal(got[k], expected[k]) for k in expected)

    # keep the newest k; an incomplete (crashed) save is never loaded
    resumed.save(2, {"step": 2})
    resumed.save(3, {"step": 3})
    ck = tmp_path / f"ckpt_{name}"
    assert sorted(p.name for p in ck.iterdir() if p.name.startswith("step_")) == \
        ["step_00000002", "step_00000003"]
    (ck / "step_00000009").mkdir()              # no COMPLETE marker
    assert resumed.load()[0] == 3


@pytest.mark.parametrize("name", ["torch", "deepspeed"])
def test_lora_trains_adapters_only_and_export_merges(weights_dir, tmp_path, name):
    segs, adv = make_batch()
    lrn = learner(weights_dir, tmp_path, name, lora=True, micro_batch_tokens=128)
    trainable = [n for n, p in lrn.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    base_before = _base_weights(lrn)
    for _ in range(2):
        lrn.update(segs, adv, clipped_token_mean)
    assert max_diff(base_before, _base_weights(lrn)) == 0.0   # base frozen
    exported = lrn.export_state_dict()
    assert not any("lora" in k or "base_layer" in k for k in exported)
    plain = transformers.AutoModelForCausalLM.from_config(tiny_config())
    plain.load_state_dict(exported)
    moved = max(float((exported[k] - base_before[k]).abs().max()) for k in base_before)
    assert moved > 1e-4                                       # the merge changed weights
    for seg, lp in zip(segs, lrn.logprobs(segs)):            # merged == adapter model
        torch.testing.assert_close(hf_logprobs(plain, seg, 1.0), lp, atol=1e-5, rtol=0)


def _base_weights(lrn):
    """Base-model weights under standard keys, read from the (gathered) peft model."""
    sd = lrn._gathered_state_dict()
    out = {}
    for k, v in sd.items():
        if "lora_" in k:
            continue
        out[k.replace("base_model.model.", "").replace(".base_layer", "")] = v.double()
    return out


def test_zero3_bf16_tracks_fp32(weights_dir, tmp_path):
    segs, adv = make_batch(lengths=(40, 30))
    ds = learner(weights_dir, tmp_path, "deepspeed", dtype="bfloat16")
    pt = learner(weights_dir, tmp_path, "torch")
    a, b = ds.update(segs, adv, clipped_token_mean), pt.update(segs, adv, clipped_token_mean)
    assert math.isfinite(a["loss"]) and a["loss"] == pytest.approx(b["loss"], abs=0.05)
    assert next(iter(ds.export_state_dict().values())).dtype == torch.bfloat16


# --- several processes (heavy: two DeepSpeed ranks on CPU, ~1 min) -----------------------
WORKER = '''
import json, sys, torch, transformers
from omegaconf import OmegaConf
sys.path[:0] = [{root!r}, {root!r} + "/tests/learners"]   # the shared test helpers
from test_learners import make_batch, clipped_token_mean, lcfg
from test_learner_prefix import prefix_batch
from ablate.learners import build_model_for_learner, make_learner
# the deepspeed launcher adds --local_rank=N; torchrun does not
weights_dir, out, kind = [a for a in sys.argv[1:] if not a.startswith("--local_rank")]
cfg = lcfg("deepspeed", micro_batch_tokens=64)
load = lambda: transformers.AutoModelForCausalLM.from_pretrained(weights_dir)
lrn = make_learner(cfg, build_model_for_learner(load, cfg), lr=1e-3, seed=0,
                   temperature=1.0, ckpt_dir=out + "/ckpt", ref_model=load())
segs, adv = make_batch() if kind == "random" else prefix_batch()
rank, world = lrn.rank, lrn.world_size
# uneven shards: rank 0 gets 4 segments, rank 1 gets 2 (different micro-batch counts);
# prefix: rank 0 shares a prefix over 5 segments, rank 1 has one segment (a dummy prefix)
idx = {{"random": [[0, 1, 2, 3], [4, 5]], "prefix": [[0, 1, 2, 3, 4], [5]]}}[kind][rank]
assert len(lrn.logprobs([segs[i] for i in idx])) == len(idx)
stats = lrn.update([segs[i] for i in idx], [adv[i] for i in idx], clipped_token_mean)
lrn.save(1, {{"step": 1}})
sd = lrn.export_state_dict()
if rank == 0:
    torch.save(sd, out + "/weights.pt")
    json.dump({{"world": world, **stats}}, open(out + "/stats.json", "w"))
'''


@pytest.mark.heavy
@pytest.mark.parametrize("kind", ["random", "prefix"])
def test_two_zero3_ranks_equal_one_torch_process(weights_dir, tmp_path, kind):
    """Data parallel over 2 processes (torchrun) with uneven shards == the whole batch in
    one plain torch process: global token counts, gradient sum across ranks, padding
    micro-batches, collective export and checkpoint; with a shared prefix on one rank
    only, the other runs a dummy prefix pass."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path
    root = str(Path(__file__).resolve().parents[2])
    script = tmp_path / "worker.py"
    script.write_text(WORKER.format(root=root))
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                        "ABLATE_DIST_ENV_PID")}
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                    "--nproc_per_node", "2", str(script), weights_dir, str(tmp_path), kind],
                   check=True, env=env, cwd=root, timeout=300)
    stats = json.loads((tmp_path / "stats.json").read_text())
    assert stats["world"] == 2
    from test_learner_prefix import prefix_batch
    segs, adv = make_batch() if kind == "random" else prefix_batch()
    pt = learner(weights_dir, tmp_path, "torch", micro_batch_tokens=10_000,
                 shared_prefix=False)
    ref = pt.update(segs, adv, clipped_token_mean)
    assert stats["train_tokens"] == ref["train_tokens"] and stats["tokens"] == ref["tokens"]
    assert stats["loss"] == pytest.approx(ref["loss"], abs=1e-6)
    assert stats["grad_norm"] == pytest.approx(ref["grad_norm"], rel=1e-5)
    got = {k: v.double() for k, v in torch.load(tmp_path / "weights.pt").items()}
    assert max_diff(got, weights(pt)) < 1e-5
    assert (tmp_path / "ckpt" / "step_00000001" / "COMPLETE").exists()


def test_dist_env_is_not_inherited_from_a_training_parent(monkeypatch):
    """A child of a process that set the single-process variables itself picks its own
    port (CI: a CLI subprocess reused the pytest process's MASTER_PORT -> EADDRINUSE); a
    launcher's variables (no owner) and our own (owner == this pid) are kept."""
    import os
    from ablate.learners.deepspeed_learner import OWNER, ensure_dist_env
    for k, v in {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                 "MASTER_PORT": "1", OWNER: str(os.getpid() + 1)}.items():
        monkeypatch.setenv(k, v)
    ensure_dist_env()                                   # inherited: a fresh port
    port = os.environ["MASTER_PORT"]
    assert port != "1" and os.environ[OWNER] == str(os.getpid())
    ensure_dist_env()                                   # ours: kept
    assert os.environ["MASTER_PORT"] == port
    monkeypatch.delenv(OWNER)
    monkeypatch.setenv("MASTER_PORT", "29501")
    ensure_dist_env()                                   # a launcher's: kept
    assert os.environ["MASTER_PORT"] == "29501"


@pytest.mark.parametrize("name", ["torch", "deepspeed"])
def test_the_exported_adapter_in_a_sampler_gives_the_learners_logprobs(weights_dir, tmp_path,
                                                                     name):
    """Adapter-native sync: after two updates the adapter alone (gathered from ZeRO-3 too)
    loaded unmerged into a sampler over the untouched base gives the learner's logprobs."""
    from ablate.samplers.hf import HFSampler
    segs, adv = make_batch()
    lrn = learner(weights_dir, tmp_path, name, lora=True, micro_batch_tokens=128)
    for _ in range(2):
        lrn.update(segs, adv, clipped_token_mean)
    adapter = lrn.export_adapter()
    assert adapter.nbytes == sum(p.numel() * p.element_size() for n, p in
                                 lrn._gathered_trained().items())
    sampler = HFSampler(load(weights_dir), tokenizer=type("T", (), {"pad_token_id": 0,
                                                                     "eos_token_id": 1})())
    sampler.load_adapter(adapter)
    for seg, lp in zip(segs, lrn.logprobs(segs)):
        torch.testing.assert_close(hf_logprobs(sampler.model, seg, 1.0), lp, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", ["torch", "deepspeed"])
def test_an_untied_head_reaches_the_sampler_after_an_update(tmp_path, name):
    """An untied model (lm_head its own tensor, as Qwen3-30B-A3B): after an update and a
    push the HF sampler's head equals the learner's, and it moved."""
    from ablate.samplers.hf import HFSampler
    config = tiny_config()
    config.tie_word_embeddings = False
    torch.manual_seed(7)
    d = tmp_path / "untied"
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(d)
    segs, adv = make_batch()
    lrn = learner(str(d), tmp_path, name, micro_batch_tokens=128)
    sampler = HFSampler(load(str(d)), tokenizer=type("T", (), {"pad_token_id": 0,
                                                                "eos_token_id": 1})())
    before = sampler.model.lm_head.weight.detach().clone()
    lrn.update(segs, adv, clipped_token_mean)
    state = lrn.export_state_dict()
    sampler.load_weights(state)
    assert torch.equal(sampler.model.lm_head.weight, state["lm_head.weight"])
    assert float((sampler.model.lm_head.weight - before).abs().max()) > 0
    assert not torch.equal(sampler.model.lm_head.weight, sampler.model.model.embed_tokens.weight)


@pytest.mark.parametrize("name", ["torch", "deepspeed"])
def test_a_closed_learner_is_freed(weights_dir, tmp_path, name):
    """Learner.close(), which a cell calls when it ends: nothing keeps the learner's model
    and optimizer alive after it (DeepSpeed 0.19.8 holds every ZeRO-3 engine through its
    hooks, its module stack and a class-level lru_cache; an in-process grid grew by
    about 100 MB a tiny cell)."""
    import gc
    import weakref
    lrn = learner(weights_dir, tmp_path, name, ref=True)
    lrn.update(*make_batch(), clipped_token_mean)
    optimizer = lrn.engine.optimizer if name == "deepspeed" else lrn.optimizer
    model, opt = weakref.ref(lrn.model), weakref.ref(optimizer)
    del optimizer
    lrn.close()
    del lrn
    gc.collect()
    assert model() is None and opt() is None
