"""PPO with a critic (Schulman et al., 2017, arXiv:1707.06347; GAE: Schulman et al., 2015,
arXiv:1506.02438): token-level values from a separate critic, GAE advantages per token
(observation tokens skipped, chained across the turns of an episode), whitened over the
batch, the clipped policy loss, and a clipped value loss minimised by the critic's own
optimiser.

Why a separate critic and not a value head on the policy: the learner (ZeRO-3 or torch)
stays what it is, one engine around the policy, with its checkpoint and weight export
unchanged; the critic, a copy of the initial policy's transformer with a scalar head
(as verl and OpenRLHF initialise theirs), is trained here with plain torch AdamW, and its
weights and optimiser state are saved inside each learner checkpoint (exact resume).
The critic is not partitioned: for models that need ZeRO-3 to fit, it doubles the memory.

Rewards: the episode's reward on its last policy token, 0 elsewhere (no KL in the reward).

Device: the critic lives and trains on the learner's device (`learner.device`, read at
the first `prepare`; its optimiser state moves with it), and every tensor of the critic
pass (values, GAE, returns, whitened advantages) is created there; only the episodes'
token ids and masks come from the host, once per micro-batch.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import torch

from ablate.algos.critic import gae, value_loss
from ablate.algos.objective import build_objective
from ablate.algos.protocol import PolicyGradient, TrainingBatch
from ablate.algos.memory import ppo_terms
from ablate.algos.registry import ALGORITHMS
from ablate.models.loading import load_policy


class Critic(torch.nn.Module):
    """A causal LM's transformer with a scalar head: V at position t is read from the
    hidden state at t-1 (the state in which ids[t] was chosen), aligned like logprobs."""

    def __init__(self, lm: torch.nn.Module):
        super().__init__()
        self.lm = lm
        self.head = torch.nn.Linear(lm.config.hidden_size, 1, dtype=torch.float32,
                                    device=next(lm.parameters()).device)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.lm(ids, output_hidden_states=True).hidden_states[-1]
        v = self.head(h.float()).squeeze(-1)[:, :-1]
        return torch.cat([v.new_zeros(v.shape[0], 1), v], dim=1)


def episode_rows(episode, values: list[torch.Tensor], reward: float):
    """(token rewards, values, mask) of an episode's segments concatenated along time, on
    the values' device."""
    device = values[0].device
    masks = [torch.tensor(s.mask, dtype=torch.float64, device=device)
             for s in episode.segments]
    for m in masks:
        m[0] = 0.0   # nothing predicts the first token (the learner's convention)
    mask = torch.cat(masks)
    rewards = torch.zeros_like(mask)
    on = mask.nonzero()
    if len(on):
        rewards[on[-1]] = reward
    return rewards, torch.cat([v.double() for v in values]), mask


@ALGORITHMS.register("ppo", memory=ppo_terms)
class PPO(PolicyGradient):
    """algo.ppo.{gamma, lam, value_clip, critic_lr, critic_epochs, whiten}."""

    def __init__(self, objective, critic: Critic, *, gamma=1.0, lam=0.95, value_clip=0.5,
                 critic_lr=1e-5, critic_epochs=1, whiten=True, micro_batch_tokens=4096):
        super().__init__(objective)
        self.critic = critic
        self.gamma, self.lam, self.whiten = float(gamma), float(lam), bool(whiten)
        self.value_clip = None if value_clip is None else float(value_clip)
        self.critic_epochs, self.micro = int(critic_epochs), int(micro_batch_tokens)
        self.optimizer = torch.optim.AdamW(critic.parameters(), lr=float(critic_lr),
                                           weight_decay=0.0)

    @classmethod
    def from_config(cls, algo_cfg: Any, *, max_len=None, cfg=None) -> "PPO":
        if cfg is None:
            raise ValueError("algo.algorithm=ppo needs the whole config to load its critic")
        lm, _ = load_policy(cfg.model)
        p = algo_cfg.ppo
        return cls(build_objective(algo_cfg, max_len=max_len), Critic(lm.float()),
                   gamma=p.gamma, lam=p.lam, value_clip=p.value_clip, critic_lr=p.critic_lr,
                   critic_epochs=p.critic_epochs, whiten=p.whiten,
                   micro_batch_tokens=cfg.learner.micro_batch_tokens)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "algorithm": "ppo", "gamma": self.gamma,
                "lam": self.lam, "value_clip": self.value_clip, "whiten": self.whiten,
                "critic": "separate: initial policy transformer + scalar head, torch AdamW",
                "critic_epochs": self.critic_epochs}

    # --- critic ---------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return next(self.critic.parameters()).device

    def place(self, device) -> None:
        """Critic and optimiser state onto `device` (the learner's; None: stay)."""
        if device is None or torch.device(device) == self.device:
            return
        self.critic.to(device)
        for state in self.optimizer.state.values():
            for k, v in state.items():
                if torch.is_tensor(v) and k != "step":   # AdamW keeps `step` on the host
                    state[k] = v.to(device)

    def _micro_batches(self, segments):
        # deferred: ablate.learners loads transformers (+0.6 s, 348 modules measured after
        # `import ablate.algos`, 2-core host); only a PPO update needs it
        from ablate.learners.batching import collate, pack
        return [collate(segments, g).to(self.device) for g in pack(segments, self.micro)]

    @torch.no_grad()
    def values(self, segments) -> list[torch.Tensor]:
        out: list[Optional[torch.Tensor]] = [None] * len(segments)
        for mb in self._micro_batches(segments):
            v = self.critic(mb.ids)
            for r, i in enumerate(mb.index):
                out[i] = v[r, : mb.lengths[r]].clone()
        return out   # type: ignore[return-value]

    def fit_critic(self, segments, old_values, returns) -> float:
        """critic_epochs optimiser steps of the clipped value loss (token mean over the
        whole batch, micro-batches accumulated); returns the last loss."""
        mbs = self._micro_batches(segments)
        num_tokens = float(sum(mb.mask.sum() for mb in mbs))
        last = 0.0
        for _ in range(self.critic_epochs):
            self.optimizer.zero_grad(set_to_none=True)
            total = 0.0
            for mb in mbs:
                v = self.critic(mb.ids)
                loss = value_loss(v, _rows(old_values, mb.index, v), _rows(returns, mb.index, v),
                                  mb.mask, clip_range=self.value_clip, agg="token-mean",
                                  num_tokens=max(num_tokens, 1.0))
                loss.backward()
                total += float(loss.detach())
            self.optimizer.step()
            last = total
        return last

    # --- the protocol -------------------------------------------------------------------------
    def prepare(self, episodes, rewards, group_ids, learner) -> TrainingBatch:
        batch = super().prepare(episodes, rewards, group_ids, learner)
        self.place(getattr(learner, "device", None))
        dev = self.device
        values = self.values(batch.segments)
        r = torch.as_tensor(rewards, dtype=torch.float64).tolist()
        adv, ret, k = [None] * len(values), [None] * len(values), 0
        for i, e in enumerate(episodes):
            n = len(e.segments)
            tr, v, m = episode_rows(e, values[k:k + n], r[i])
            a, g = gae(tr.unsqueeze(0), v.unsqueeze(0), m.unsqueeze(0), gamma=self.gamma,
                       lam=self.lam)
            for j, (aj, gj) in enumerate(zip(a[0].split([len(s.mask) for s in e.segments]),
                                             g[0].split([len(s.mask) for s in e.segments]))):
                adv[k + j], ret[k + j] = aj, gj
            k += n
        on = torch.cat([torch.tensor(s.mask[1:], dtype=torch.bool, device=dev)
                        for s in batch.segments])
        flat = torch.cat([a[1:] for a in adv])[on]
        if self.whiten and flat.numel() > 1:   # batch whitening of advantages (verl / ppo2)
            mean, std = flat.mean(), flat.std()
            adv = [torch.where(torch.tensor(s.mask, dtype=torch.bool, device=dev),
                               (a - mean) / (std + 1e-8), 0.0)
                   for a, s in zip(adv, batch.segments)]
        batch.token_advantages = [a.float() for a in adv]
        vloss = self.fit_critic(batch.segments, values, ret)
        batch.metrics.update({"ppo/value_loss": vloss,
                              "ppo/value_mean": float(torch.cat([v[1:] for v in values])[on]
                                                      .mean()) if on.any() else 0.0,
                              "ppo/return_mean": float(torch.cat([g[1:] for g in ret])[on]
                                                       .mean()) if on.any() else 0.0,
                              "ppo/adv_raw_abs_mean": float(flat.abs().mean())
                              if flat.numel() else 0.0})
        return batch

    # --- checkpoints: the critic beside each learner checkpoint ---------------------------
    def save(self, ckpt_dir: Path, step: int) -> None:
        path = Path(ckpt_dir) / "critic" / f"step_{step:08d}.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        torch.save({"critic": self.critic.state_dict(),
                    "optimizer": self.optimizer.state_dict()}, tmp)
        tmp.replace(path)

    def load(self, ckpt_dir: Path, step: int) -> None:
        path = Path(ckpt_dir) / "critic" / f"step_{step:08d}.pt"
        if not path.exists():
            raise FileNotFoundError(f"{path}: the critic of the step-{step} checkpoint is "
                                    "missing; cannot resume PPO exactly")
        state = torch.load(path, weights_only=False, map_location=self.device)
        self.critic.load_state_dict(state["critic"])
        self.optimizer.load_state_dict(state["optimizer"])


def _rows(per_segment, index, like: torch.Tensor) -> torch.Tensor:
    """[b, T] rows of per-segment values (dtype and device of `like`), zero-padded."""
    out = torch.zeros(like.shape, dtype=like.dtype, device=like.device)
    for r, i in enumerate(index):
        v = per_segment[i]
        out[r, : v.numel()] = v
    return out
