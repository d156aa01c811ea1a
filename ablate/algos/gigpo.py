"""GiGPO, group-in-group policy optimisation (Feng et al., 2025, arXiv:2505.10978): the
episode-level group advantage plus a step-level advantage computed within "anchor state"
groups, identical environment states reached by different episodes (or turns) of the
same task; A_{i,k} = A^E_i + ω · A^S_{i,k} (§4.3, eq. 9), and a turn's advantage flows
to that turn's tokens.

Anchor state: before turn k, (task id, the state the world names for that turn:
`Episode.anchors`, from a world implementing `anchor_states`, ablate/harness/episode.py
`Anchored`). Without one, the calls and observations before the turn: in a deterministic
world an identical history reaches an identical state (the email world names the evidence
seen instead, so searches with other words that found the same mail share a state). Turn
0 of every episode of a group shares the initial state."""
from __future__ import annotations

from typing import Any, Hashable

import json

import torch

from ablate.algos.objective import build_objective
from ablate.algos.protocol import PolicyGradient, TrainingBatch
from ablate.algos.registry import ALGORITHMS


def history_keys(episode) -> list[Hashable]:
    """One key per turn: the calls (name, arguments) and observations before it."""
    keys, seen = [], ()
    for turn in episode.turns:
        keys.append(seen)
        seen += tuple((c.name, json.dumps(c.arguments, sort_keys=True, default=str),
                       c.observation) for c in turn.calls)
    return keys


def state_keys(episode) -> list[Hashable]:
    """One key per turn, the state the agent acted from: (task id, the world's anchor)."""
    anchors = episode.anchors if episode.anchors is not None else history_keys(episode)
    return [(episode.task.id, a) for a in anchors]


def turn_returns(reward: float, num_turns: int, gamma: float) -> list[float]:
    """Discounted return from each turn when the reward comes at the end (§4.2, eq. 6:
    R_k = Σ_{j>=k} γ^{j-k} r_j with r_j = 0 before the last turn)."""
    return [reward * gamma ** (num_turns - 1 - k) for k in range(num_turns)]


def step_advantages(keys: list[list[Hashable]], returns: list[list[float]], *,
                    norm_std: bool, eps: float) -> tuple[list[list[float]], float]:
    """A^S per (episode, turn) within anchor groups (§4.2, eq. 7-8): (R - mean) / (std +
    eps) (std unbiased) or R - mean; a group of one or of equal returns gets 0. Also the
    coverage: the fraction of turns whose anchor group has at least two members."""
    members: dict[Hashable, list[tuple[int, int]]] = {}
    for i, ks in enumerate(keys):
        for k, key in enumerate(ks):
            members.setdefault(key, []).append((i, k))
    adv = [[0.0] * len(ks) for ks in keys]
    shared = 0
    for group in members.values():
        if len(group) < 2:
            continue
        shared += len(group)
        r = torch.tensor([returns[i][k] for i, k in group], dtype=torch.float64)
        if bool(r.max() == r.min()):
            continue
        a = r - r.mean()
        if norm_std:
            a = a / (r.std(unbiased=True) + eps)
        for (i, k), v in zip(group, a.tolist()):
            adv[i][k] = v
    total = sum(len(ks) for ks in keys)
    return adv, shared / total if total else 0.0


def token_advantages(episode, segments_of: list, turn_adv: list[float]) -> list[torch.Tensor]:
    """Per segment of the episode, a tensor aligned to its ids: each policy token gets the
    advantage of the turn that generated it (turns own consecutive policy tokens, in
    order, `completion_tokens` each, across the episode's segments)."""
    owner = [k for k, t in enumerate(episode.turns) for _ in range(t.completion_tokens)]
    out, j = [], 0
    for seg in segments_of:
        v = torch.zeros(len(seg.mask), dtype=torch.float32)
        for p, m in enumerate(seg.mask):
            if m:
                if j >= len(owner):
                    raise ValueError("an episode has more policy tokens than its turns")
                v[p] = turn_adv[owner[j]]
                j += 1
        out.append(v)
    return out


@ALGORITHMS.register("gigpo")
class GiGPO(PolicyGradient):
    """Policy gradient with GiGPO's turn-level credit (algo.gigpo.{gamma,omega,norm_std})."""

    def __init__(self, objective, *, gamma: float = 0.95, omega: float = 1.0,
                 norm_std: bool = True):
        super().__init__(objective)
        if not (0 <= gamma <= 1 and omega >= 0):
            raise ValueError(f"need algo.gigpo.gamma in [0, 1] and omega >= 0, got "
                             f"{gamma}, {omega}")
        self.gamma, self.omega, self.norm_std = float(gamma), float(omega), bool(norm_std)

    @classmethod
    def from_config(cls, algo_cfg: Any, *, max_len=None, cfg=None) -> "GiGPO":
        g = algo_cfg.gigpo
        return cls(build_objective(algo_cfg, max_len=max_len), gamma=g.gamma, omega=g.omega,
                   norm_std=g.norm_std)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "algorithm": "gigpo", "gigpo_gamma": self.gamma,
                "gigpo_omega": self.omega, "gigpo_norm_std": self.norm_std,
                "anchor_state": "task id and the world's anchor_states, else the calls and "
                                "observations before the turn"}

    def prepare(self, episodes, rewards, group_ids, learner) -> TrainingBatch:
        batch = super().prepare(episodes, rewards, group_ids, learner)
        episode_adv = self.objective.advantages(rewards, group_ids).tolist()
        r = torch.as_tensor(rewards, dtype=torch.float64).tolist()
        keys = [[(g, key) for key in state_keys(e)] for e, g in zip(episodes, group_ids)]
        returns = [turn_returns(r[i], len(e.turns), self.gamma) for i, e in enumerate(episodes)]
        step_adv, coverage = step_advantages(keys, returns, norm_std=self.norm_std,
                                             eps=self.objective.std_eps)
        per_segment: list[torch.Tensor] = []
        for i, e in enumerate(episodes):
            turn_adv = [episode_adv[i] + self.omega * a for a in step_adv[i]]
            per_segment += token_advantages(e, e.segments, turn_adv)
        batch.token_advantages = per_segment
        flat = [a for row in step_adv for a in row]
        batch.metrics.update({"gigpo/anchor_coverage": coverage,
                              "gigpo/step_adv_abs_mean":
                                  sum(abs(a) for a in flat) / len(flat) if flat else 0.0})
        return batch
