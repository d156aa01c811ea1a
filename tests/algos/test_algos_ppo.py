"""PPO with a critic: GAE through the algorithm chained across an episode's segments, the
critic's value loss falling on a fixed batch, and a resumed cell reproducing the
uninterrupted one (critic weights and optimiser state saved inside each checkpoint)."""
from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pytest
import torch

from ablate.algos import gae
from ablate.algos.config import AlgoConfig
from ablate.algos.objective import build_objective
from ablate.algos.ppo import PPO, Critic
from ablate.loop.cell import run_cell
from ablate.apps.cli import compose_config, normalise_overrides
from ablate.harness.episode import Segment
from ablate.learners.base import write_digests
from ablate.models.loading import load_policy
from test_algos_protocol import SMALL


def tiny_ppo(**kw) -> PPO:
    lm, _ = load_policy(compose_config([]).model)
    algo_cfg = AlgoConfig(algorithm="ppo", loss_agg="token-mean")
    return PPO(build_objective(algo_cfg, max_len=64), Critic(lm.float()),
               micro_batch_tokens=64, **kw)


def fixed_episodes():
    g = torch.Generator().manual_seed(0)

    def seg(n_prompt, n_gen):
        ids = torch.randint(5, 200, (n_prompt + n_gen,), generator=g).tolist()
        return Segment(ids=ids, mask=[0] * n_prompt + [1] * n_gen,
                       logprobs=[0.0] * n_prompt + [-1.0] * n_gen)
    instruct = SimpleNamespace(segments=[seg(4, 6)], turns=[])
    thinking = SimpleNamespace(segments=[seg(3, 4), seg(5, 3)], turns=[])   # two turns
    other = SimpleNamespace(segments=[seg(4, 5)], turns=[])
    return [instruct, thinking, other], [1.0, 0.7, 0.5]


def test_gae_runs_over_the_whole_episode_across_its_segments():
    ppo = tiny_ppo(whiten=False, gamma=0.9, lam=0.8, critic_lr=0.0)
    episodes, rewards = fixed_episodes()
    values = ppo.values([s for e in episodes for s in e.segments])
    batch = ppo.prepare(episodes, rewards, [0, 0, 0], learner=None)
    # the thinking episode: its two segments are one GAE recursion
    v = torch.cat([values[1], values[2]]).double()
    mask = torch.tensor([0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1], dtype=torch.float64)
    r = torch.zeros_like(mask)
    r[-1] = 0.7                                   # on the last policy token of the episode
    expect, _ = gae(r[None], v[None], mask[None], gamma=0.9, lam=0.8)
    got = torch.cat([batch.token_advantages[1], batch.token_advantages[2]]).double()
    assert torch.allclose(got, expect[0], atol=1e-6)
    assert batch.token_advantages[0][4:].abs().sum() > 0    # reward 1 reaches the instruct one


def test_value_loss_falls_on_a_fixed_batch():
    ppo = tiny_ppo(critic_lr=1e-3, value_clip=None)
    episodes, rewards = fixed_episodes()
    losses = [ppo.prepare(episodes, rewards, [0, 0, 0], learner=None).metrics["ppo/value_loss"]
              for _ in range(8)]
    assert losses[-1] < 0.25 * losses[0], losses


@pytest.mark.slow
def test_resumed_ppo_cell_reproduces_the_uninterrupted_run(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    base = [o for o in SMALL if not o.startswith("trainer.max_steps")]
    args = [*base, "+algo=ppo", "learner.checkpoint_every=1", "algo.ppo.critic_lr=1e-3"]

    def run(out, steps):
        run_cell(compose_config(normalise_overrides([*args, f"trainer.max_steps={steps}"])), out)
        return [{k: v for k, v in json.loads(x).items() if not k.endswith(("_s", "seconds"))}
                for x in (out / "metrics.jsonl").read_text().splitlines() if x]

    whole = run(tmp_path / "whole", 3)
    part = tmp_path / "part"
    run(part, 2)
    folder = part / "ckpt" / "step_00000002"      # the critic inside the checkpoint,
    assert (folder / "critic" / "step_00000002.pt").exists()    # digested with it
    assert "critic/step_00000002.pt" in json.loads((folder / "DIGESTS.json").read_text())
    (part / "COMPLETE").unlink()             # as if stopped after step 2's checkpoint
    legacy = tmp_path / "legacy"             # the layout of older cells: critic beside
    shutil.copytree(part, legacy)
    old = legacy / "ckpt" / "critic" / "step_00000002.pt"
    old.parent.mkdir()
    shutil.move(legacy / "ckpt" / "step_00000002" / "critic" / "step_00000002.pt", old)
    shutil.rmtree(legacy / "ckpt" / "step_00000002" / "critic")
    write_digests(legacy / "ckpt" / "step_00000002")
    resumed = run(part, 3)
    assert [r["step"] for r in resumed] == [1, 2, 3]
    assert resumed == whole
    assert run(legacy, 3) == whole
    assert whole[-1]["ppo/value_loss"] > 0 and "ppo/value_mean" in whole[-1]


def test_a_kill_between_the_learner_and_critic_writes_cannot_strand_the_cell(tmp_path,
                                                                             monkeypatch):
    """The critic is written inside the learner's temporary checkpoint folder, before it
    is completed: a kill while it is written leaves no complete checkpoint of that step,
    so the cell resumes from the previous one and still reproduces the uninterrupted run
    (before, a learner checkpoint without its critic file stopped every resume)."""
    import ablate.algos.ppo as ppo_mod
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    base = [o for o in SMALL if not o.startswith("trainer.max_steps")]
    cfg = compose_config(normalise_overrides(
        [*base, "+algo=ppo", "learner.checkpoint_every=1", "algo.ppo.critic_lr=1e-3",
         "trainer.max_steps=3"]))
    rows = (lambda d: [{k: v for k, v in json.loads(x).items()
                        if not k.endswith(("_s", "seconds"))}
                       for x in (d / "metrics.jsonl").read_text().splitlines() if x])
    run_cell(cfg, tmp_path / "whole")
    real = ppo_mod.PPO.save

    def killed(self, ckpt_dir, step):
        if step == 2:
            raise KeyboardInterrupt("killed while the critic was written")
        return real(self, ckpt_dir, step)
    monkeypatch.setattr(ppo_mod.PPO, "save", killed)
    with pytest.raises(KeyboardInterrupt):
        run_cell(cfg, tmp_path / "cell")
    assert not (tmp_path / "cell" / "ckpt" / "step_00000002").exists()
    monkeypatch.setattr(ppo_mod.PPO, "save", real)
    run_cell(cfg, tmp_path / "cell")
    assert rows(tmp_path / "cell") == rows(tmp_path / "whole")
