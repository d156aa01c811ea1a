"""Algorithm-owned models live on the learner's device: PPO's critic (and its optimiser
state) and DPO's reference are placed on `learner.device`, read from the learner, and
every tensor of their passes is created there. On CPU: a learner whose `device` counts
its reads, and the meta device for the move itself."""
from __future__ import annotations

import pytest
import torch
import transformers

import test_learners as L
from ablate.algos.critic import gae, value_loss
from ablate.algos.dpo import DPO
from ablate.algos.losses import seq_mean_token_mean
from ablate.algos.ppo import _rows
from test_algos_dpo import episodes_from
from test_algos_ppo import fixed_episodes, tiny_ppo
from test_learner_prefix import prefix_batch


class Learner:
    """Only what prepare reads of a learner: its device, each read counted."""

    def __init__(self, device: str):
        self._device, self.reads = torch.device(device), 0

    @property
    def device(self) -> torch.device:
        self.reads += 1
        return self._device


def test_ppo_critic_and_its_tensors_are_on_the_learner_device():
    ppo, learner = tiny_ppo(critic_lr=1e-3), Learner("cpu")
    episodes, rewards = fixed_episodes()
    batch = ppo.prepare(episodes, rewards, [0, 0, 0], learner)
    assert learner.reads >= 1
    assert {p.device for p in ppo.critic.parameters()} == {learner.device}
    assert {a.device for a in batch.token_advantages} == {learner.device}
    assert all(s["exp_avg"].device == learner.device for s in ppo.optimizer.state.values())
    like = torch.zeros(2, 5, device=learner.device)
    rows = _rows([torch.ones(3, dtype=torch.float64)] * 2, [0, 1], like)
    assert rows.device == like.device and rows.dtype == like.dtype
    assert rows.sum().item() == 6.0


def test_ppo_place_moves_the_critic_and_the_optimiser_state():
    ppo = tiny_ppo(critic_lr=1e-3)
    episodes, rewards = fixed_episodes()
    ppo.prepare(episodes, rewards, [0, 0, 0], Learner("cpu"))   # optimiser state exists
    ppo.place(torch.device("meta"))
    assert ppo.device.type == "meta" and ppo.critic.head.weight.device.type == "meta"
    state = next(iter(ppo.optimizer.state.values()))
    assert state["exp_avg"].device.type == "meta" and state["exp_avg_sq"].device.type == "meta"
    assert state["step"].device.type == "cpu"   # AdamW's step count stays on the host


def test_dpo_reference_and_its_log_probs_are_on_the_learner_device():
    torch.manual_seed(0)
    segs, _ = prefix_batch(seed=2)
    eps = episodes_from(segs, [[0, 1], [2], [3], [4, 5]], [True, False, False, True])
    dpo = DPO(transformers.AutoModelForCausalLM.from_config(L.tiny_config()),
              micro_batch_tokens=128)
    learner = Learner("cpu")
    batch = dpo.prepare(eps, [1.0, 0.0, 0.0, 1.0], [0, 0, 1, 1], learner)
    assert learner.reads >= 1
    assert {p.device for p in dpo.reference.parameters()} == {learner.device}
    assert batch.ref_logps.device == learner.device and batch.ref_logps.shape == (4,)
    assert batch.advantages.device == learner.device
    dpo.place(torch.device("meta"))
    assert {p.device.type for p in dpo.reference.parameters()} == {"meta"}


def test_mixed_devices_fail_in_one_line_naming_the_tensor():
    cpu, meta = torch.zeros(1, 4), torch.zeros(1, 4, device="meta")
    with pytest.raises(ValueError, match=r"^returns on meta but values on cpu: create them"):
        value_loss(cpu, cpu, meta, cpu, clip_range=0.2)
    with pytest.raises(ValueError, match=r"^mask on meta but values on cpu"):
        gae(cpu, cpu, meta, gamma=1.0, lam=1.0)


def test_row_tokens_are_created_on_the_mask_device(monkeypatch):
    made, as_tensor = [], torch.as_tensor

    def spy(data, *args, **kw):
        made.append(kw.get("device"))
        return as_tensor(data, *args, **kw)
    monkeypatch.setattr(torch, "as_tensor", spy)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    out = seq_mean_token_mean(torch.ones(2, 3), mask, row_tokens=[4.0, 6.0], num_seqs=2)
    assert made == [mask.device]                   # device= at creation, no copy after
    assert out.item() == pytest.approx((2 / 4 + 3 / 6) / 2)
