"""The device audit (ablate/core/device_audit.py): a stand-in accelerator on CPU that
catches what a GPU would refuse (mixed devices, CPU-only kernels, CPU generators) and
counts device -> host syncs. Checked first on known faults, then on the GPU path: a
rollout of the default (masked) harness with cascade attention on and off, with <= 2
syncs per decoding step; reverting the fix of host-side sampling fails it."""
from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch

from ablate.core.device_audit import STAND_IN, audit
from ablate.harness.config import HarnessConfig, ModeConfig
from ablate.harness.rollout import rollout
from ablate.samplers import sampling
from ablate.samplers.hf import HFSampler


MASKED = HarnessConfig(action_masking=True, answer_masking=True, keyword_masking=True)


def test_known_faults_are_caught_and_clean_code_passes():
    lin = torch.nn.Linear(4, 3)
    with audit() as a:
        lin.to(STAND_IN)
        y = lin(torch.randn(2, 4, device=STAND_IN))
        _ = y[torch.tensor([0])] * torch.tensor(2.0)    # host index, host 0-dim: legal
        gen = torch.Generator(device=STAND_IN).manual_seed(0)
        torch.multinomial(y.softmax(-1), 1, generator=gen)
    assert a.faults == [] and a.sync_count() == 0
    with audit() as a:
        lin.to(STAND_IN)
        y = lin(torch.randn(2, 4, device=STAND_IN))
        _ = torch.arange(5)[torch.tensor([1, 2], device=STAND_IN)]   # device index, host
        _ = y + torch.ones(3)
        torch.multinomial(y.softmax(-1), 1, generator=torch.Generator().manual_seed(0))
        q = torch.randn(1, 2, 3, 8, device=STAND_IN)
        torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, q, q)
        y.sum().item()
        y.cpu()
    kinds = sorted(f.kind for f in a.faults)
    assert kinds == ["cpu_generator", "cpu_kernel", "mix", "mix"], a.report()
    assert all(f.where.startswith("tests/core/test_device_audit.py:") for f in a.faults)
    assert a.sync_count() == 2


@pytest.fixture(scope="module")
def tiny():
    from ablate.models.tiny import load_tiny
    return load_tiny(SimpleNamespace(path=None, dtype="float32"))


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    from ablate.envs.email import EmailEnv, synthetic
    from ablate.envs.email.data import read_tasks
    from ablate.envs.email.db import EmailDB
    d = tmp_path_factory.mktemp("audit")
    p = synthetic.generate(d, seed=7, num_inboxes=2, emails_per_inbox=40, train_tasks=2,
                           test_tasks=2, max_hops=2)
    return EmailEnv.over_db(EmailDB.build(p["emails"], d / "db.sqlite")), \
        read_tasks(p["test_tasks"])


class _Counting(HFSampler):
    """Counts decoding steps (one sampling per step)."""
    steps = 0

    def _sample_in_call_order(self, *args):
        _Counting.steps += 1
        return HFSampler._sample_in_call_order(*args)


def _audited_rollout(tiny, env, cascade: bool):
    model, tok = tiny
    world, tasks = env
    _Counting.steps = 0
    with audit() as a:
        s = _Counting(copy.deepcopy(model), tok, device=STAND_IN, cascade=cascade)
        eps = rollout(tasks, group_size=2, sampler=s, tokenizer=tok, env=world,
                      harness_cfg=MASKED, mode_cfg=ModeConfig(), max_turns=4,
                      temperature=1.0, seed=5)
    return a, eps, s


@pytest.mark.parametrize("cascade", [True, False], ids=["cascade", "no-cascade"])
def test_a_rollout_on_the_device_is_clean(tiny, env, cascade):
    a, eps, s = _audited_rollout(tiny, env, cascade)
    assert len(eps) == 4 and _Counting.steps > 20
    assert (s.stats["cascade_rows"] > 0) == cascade
    assert a.faults == [], a.report()
    assert a.sync_count() <= 2 * _Counting.steps, dict(a.syncs)


def _host_side_sample(logits, temperature, top_p, gen):
    """The sampler before the fix: logits moved to the host every step."""
    logits = logits.cpu()
    logp = torch.log_softmax(logits / temperature, dim=-1)
    toks = torch.multinomial(logp.exp(), 1).view(-1)
    return toks, logp.gather(-1, toks.view(-1, 1)).view(-1)


def test_reverting_device_side_sampling_fails_the_audit(tiny, env, monkeypatch):
    monkeypatch.setattr(sampling, "sample", _host_side_sample)
    a, _, _ = _audited_rollout(tiny, env, cascade=False)
    assert any(f.kind == "mix" and f.where.startswith("ablate/samplers/hf.py:")
               for f in a.faults), a.report()


def test_a_torch_learner_update_and_weight_push_on_the_device_are_clean(tmp_path):
    """The learner's update (shared prefix, an action mask, micro-batches) and the push
    of its weights into an HF sampler on the device."""
    import transformers

    import test_learners as L
    from ablate.learners import make_learner
    weights = str(tmp_path / "w")
    transformers.AutoModelForCausalLM.from_config(L.tiny_config()).save_pretrained(weights)
    segs, adv = L.make_batch(lengths=(40, 64, 23, 57))
    for s in segs:
        s.ids[:6] = segs[0].ids[:6]
    segs[1].allowed = {30: [segs[1].ids[30], 3, 7]}
    with audit() as a:
        lrn = make_learner(L.lcfg("torch", micro_batch_tokens=128, shared_prefix_min_tokens=4),
                           L.load(weights), lr=1e-3, seed=0, temperature=0.8,
                           ckpt_dir=tmp_path / "c", device=STAND_IN)
        m = lrn.update(segs, adv, L.clipped_token_mean)
        tok = SimpleNamespace(pad_token_id=0, eos_token_id=0)
        HFSampler(L.load(weights), tok, device=STAND_IN).load_weights(lrn.export_state_dict())
    assert m["prefix_tokens"] == 6 and lrn.device == STAND_IN
    assert a.faults == [], a.report()


def test_a_ppo_and_a_dpo_preparation_on_the_device_are_clean():
    """PPO's critic pass (values, GAE, its own update) and DPO's reference log-probs, with
    a learner whose device is the stand-in."""
    import transformers

    import test_learners as L
    from ablate.algos.dpo import DPO
    from test_algos_device import Learner
    from test_algos_dpo import episodes_from
    from test_algos_ppo import fixed_episodes, tiny_ppo
    from test_learner_prefix import prefix_batch
    torch.manual_seed(0)
    segs, _ = prefix_batch(seed=2)
    eps = episodes_from(segs, [[0, 1], [2], [3], [4, 5]], [True, False, False, True])
    with audit() as a:
        ppo = tiny_ppo(critic_lr=1e-3)
        episodes, rewards = fixed_episodes()
        batch = ppo.prepare(episodes, rewards, [0, 0, 0], Learner(STAND_IN))
        dpo = DPO(transformers.AutoModelForCausalLM.from_config(L.tiny_config()),
                  micro_batch_tokens=128)
        pairs = dpo.prepare(eps, [1.0, 0.0, 0.0, 1.0], [0, 0, 1, 1], Learner(STAND_IN))
    assert len(batch.token_advantages) == 4 and pairs.ref_logps.shape == (4,)
    assert a.faults == [], a.report()


def test_a_batched_packs_joint_update_on_the_device_is_clean(tmp_path):
    """Three LoRA cells over one base on the device, their updates joined
    (ablate/learners/packed.py: the prefixes in one forward, micro-batches concatenated,
    each row's adapter picked by a row index)."""
    import transformers

    import test_learners as L
    from ablate.apps.pack_turns import take_turns
    from ablate.learners import make_learner
    from ablate.learners.packed import UpdateEngine
    from ablate.models.loading import sharing_copy
    weights = str(tmp_path / "w")
    transformers.AutoModelForCausalLM.from_config(L.tiny_config()).save_pretrained(weights)
    batches = []
    for seed, lengths in ((0, (40, 64, 23)), (1, (57, 31)), (2, (44, 50, 29))):
        segs, adv = L.make_batch(seed=seed, lengths=lengths)
        for s in segs:   # a cell's segments share its prompt
            s.ids[:6] = segs[0].ids[:6]
        batches.append((segs, adv))
    with audit() as a:
        base = L.load(weights).to(STAND_IN)
        engine = UpdateEngine()
        cells = []
        for i in range(3):
            lrn = make_learner(L.lcfg("torch", lora=True, micro_batch_tokens=128,
                                      shared_prefix_min_tokens=4), sharing_copy(base),
                               lr=1e-3, seed=i, temperature=0.8, ckpt_dir=tmp_path / f"c{i}",
                               device=STAND_IN)
            engine.attach(lrn)
            cells.append(lrn)
        out, _ = take_turns([lambda c=c, b=b: c.update(*b, L.clipped_token_mean)
                             for c, b in zip(cells, batches)])
    assert a.faults == [], a.report()
    assert engine.passes == 1 and engine.updates == 3
    assert [m["prefix_tokens"] for m in out] == [6, 6, 6]   # the prompt: make_batch's 6
