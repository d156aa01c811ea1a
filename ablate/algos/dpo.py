"""Trajectory DPO, AgentQ-style (Putta et al., 2024, arXiv:2408.07199 §4; the loss of
Rafailov et al., 2023, arXiv:2305.18290 eq. 7): preference pairs (chosen y_w, rejected
y_l) from each task's group, and

    L = -mean_pairs log σ(β [(log π_θ(y_w) - log π_ref(y_w))
                              - (log π_θ(y_l) - log π_ref(y_l))])

where log π(y) sums the log-probabilities of ALL the episode's generated tokens (every
segment, under its loss mask: observations and prompts are context, not choices), at the
sampler's temperature and action masks (the learner's convention). π_ref is frozen:
`algo.dpo.reference=initial` loads a second copy of the cell's starting policy (or a
local HF directory); its sequence log-probabilities are computed once per batch in
`prepare`, on the learner's device (`learner.device`, moved there once at the first
`prepare`). Like PPO's critic, the reference is not partitioned by ZeRO-3.

Pairs (`algo.dpo.pairs`, registry PAIR_RULES): `first` pairs the group's correct and
incorrect episodes one to one in sample order, `all` every correct with every incorrect
one, `extremes` the highest- with the lowest-reward episode; groups whose episodes are
all correct, all incorrect (or all of one reward) give no pair. Episodes in no pair are
dropped. The loss is a non-linear function of whole-episode sums, so every segment of a
pair's two episodes must be in one micro-batch: the loss function carries `pack_keys`
(one key per connected set of paired episodes) for the learner's packing, and raises if
a micro-batch ever holds part of a pair."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn.functional as F

from ablate.algos.protocol import (AlgorithmBase, TrainingBatch, flatten_segments,
                                   loss_index)
from ablate.algos.memory import dpo_terms
from ablate.algos.registry import ALGORITHMS, PAIR_RULES
from ablate.models.loading import load_policy


@PAIR_RULES.register("first")
def first_pairs(correct, rewards) -> list[tuple[int, int]]:
    """k-th correct with k-th incorrect episode, in sample order."""
    good = [i for i, c in enumerate(correct) if c]
    bad = [i for i, c in enumerate(correct) if not c]
    return list(zip(good, bad))


@PAIR_RULES.register("all")
def all_pairs(correct, rewards) -> list[tuple[int, int]]:
    """Every correct episode with every incorrect one (AgentQ's pairs over outcomes)."""
    good = [i for i, c in enumerate(correct) if c]
    return [(g, b) for g in good for b, c in enumerate(correct) if not c]


@PAIR_RULES.register("extremes")
def extreme_pairs(correct, rewards) -> list[tuple[int, int]]:
    """Highest- vs lowest-reward episode (first of each in sample order); none on a tie."""
    r = [float(x) for x in rewards]
    hi, lo = r.index(max(r)), r.index(min(r))
    return [(hi, lo)] if r[hi] > r[lo] else []


def group_pairs(episodes, rewards, group_ids, rule: str) -> list[tuple[int, int]]:
    """(chosen, rejected) positions in `episodes`, pairs only within a group."""
    fn = PAIR_RULES.get_checked(rule)
    r = torch.as_tensor(rewards, dtype=torch.float64).tolist()
    members: dict[Any, list[int]] = {}
    for i, g in enumerate(group_ids):
        members.setdefault(g, []).append(i)
    pairs = []
    for idx in members.values():
        local = fn([bool(episodes[i].correct) for i in idx], [r[i] for i in idx])
        pairs += [(idx[w], idx[l]) for w, l in local]
    return pairs


def dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta: float) -> torch.Tensor:
    """Per pair -log σ(β((π_w - ref_w) - (π_l - ref_l))) (Rafailov et al., 2023, eq. 7)."""
    return -F.logsigmoid(beta * ((chosen - ref_chosen) - (rejected - ref_rejected)))


def components(n: int, pairs) -> list[int]:
    """Union-find root of each of n episodes: paired episodes share one."""
    root = list(range(n))

    def find(i):
        while root[i] != i:
            root[i] = root[root[i]]
            i = root[i]
        return i
    for a, b in pairs:
        root[find(a)] = find(b)
    return [find(i) for i in range(n)]


@torch.no_grad()
def sequence_logprobs(model, segments, episode_of, *, temperature: float,
                      micro_batch_tokens: int) -> torch.Tensor:
    """Σ over each episode's trained tokens of log π(y_t) [episodes], float64 (the
    learner's alignment, temperature and action masks; ablate.learners.batching)."""
    # deferred: ablate.learners loads transformers (+0.6 s, 348 modules measured after
    # `import ablate.algos`, 2-core host); only a DPO update needs it
    from ablate.learners.batching import collate, pack, token_stats
    device = next(model.parameters()).device   # the learner's (DPO.place)
    out = torch.zeros(max(episode_of) + 1 if episode_of else 0, dtype=torch.float64,
                      device=device)
    for g in pack(segments, micro_batch_tokens):
        mb = collate(segments, g).to(device)   # host token ids, moved once
        logits = model(input_ids=mb.ids, use_cache=False).logits
        lp, _ = token_stats(logits, mb.ids, temperature, mb.allowed, entropy=False)
        rows = torch.where(mb.mask.bool(), lp.double(), 0.0).sum(-1)
        for r, i in enumerate(mb.index):
            out[episode_of[i]] += rows[r]
    return out


@dataclass
class PairBatch(TrainingBatch):
    pairs: list[tuple[int, int]] = field(default_factory=list)   # episode positions
    ref_logps: torch.Tensor = field(default_factory=lambda: torch.zeros(0))
    pack_keys: list[int] = field(default_factory=list)           # per segment


@ALGORITHMS.register("dpo", memory=dpo_terms, capabilities=("unequal_groups",))
class DPO(AlgorithmBase):
    """algo.dpo.{beta, pairs, reference}."""

    def __init__(self, reference: torch.nn.Module, *, beta: float = 0.1, pairs: str = "first",
                 temperature: float = 1.0, micro_batch_tokens: int = 4096,
                 reference_name: str = "initial"):
        if beta <= 0:
            raise ValueError(f"algo.dpo.beta={beta} must be > 0")
        PAIR_RULES.get_checked(pairs)
        self.reference = reference.eval().requires_grad_(False)
        self.beta, self.rule, self.temperature = float(beta), str(pairs), float(temperature)
        self.micro, self.reference_name = int(micro_batch_tokens), str(reference_name)
        self._pairs: list[tuple[int, int]] = []   # (id(chosen), id(rejected)) from augment

    @classmethod
    def from_config(cls, algo_cfg: Any, *, max_len=None, cfg=None) -> "DPO":
        if cfg is None:
            raise ValueError("algo.algorithm=dpo needs the whole config to load its reference")
        d = algo_cfg.dpo
        return cls(load_reference(str(d.reference), cfg.model), beta=float(d.beta),
                   pairs=str(d.pairs), temperature=float(cfg.sampler.temperature),
                   micro_batch_tokens=int(cfg.learner.micro_batch_tokens),
                   reference_name=str(d.reference))

    def describe(self) -> dict[str, Any]:
        return {"algorithm": "dpo", "beta": self.beta, "pairs": self.rule,
                "reference": self.reference_name, "loss": "Rafailov et al. 2023 eq. 7 on "
                "whole-episode log-probabilities (all segments' trained tokens)"}

    def shape_rewards(self, rewards, episodes) -> torch.Tensor:
        return torch.as_tensor(rewards, dtype=torch.float32).flatten()

    def augment(self, episodes, rewards, group_ids, ctx):
        """Pick the pairs; keep only the paired episodes."""
        pairs = group_pairs(episodes, rewards, group_ids, self.rule)
        keep = sorted({i for p in pairs for i in p})
        self._pairs = [(id(episodes[w]), id(episodes[l])) for w, l in pairs]
        n_groups = len(set(group_ids))
        paired_groups = len({group_ids[w] for w, _ in pairs})
        r = torch.as_tensor(rewards, dtype=torch.float32).flatten()
        metrics = {"dpo/pairs": float(len(pairs)),
                   "dpo/skipped_groups": float(n_groups - paired_groups)}
        return ([episodes[i] for i in keep], r[torch.tensor(keep, dtype=torch.long)],
                [group_ids[i] for i in keep], metrics)

    @property
    def device(self) -> torch.device:
        return next(self.reference.parameters()).device

    def place(self, device) -> None:
        """The frozen reference onto `device` (the learner's; None: stay), once."""
        if device is not None and torch.device(device) != self.device:
            self.reference.to(device)

    def prepare(self, episodes, rewards, group_ids, learner) -> PairBatch:
        self.place(getattr(learner, "device", None))
        pos = {id(e): k for k, e in enumerate(episodes)}
        pairs = [(pos[w], pos[l]) for w, l in self._pairs if w in pos and l in pos]
        if not pairs:   # called without augment: pick them here
            pairs = group_pairs(episodes, rewards, group_ids, self.rule)
        segments, episode_of, tokens = flatten_segments(episodes)
        root = components(len(episodes), pairs)
        batch = PairBatch(segments, torch.zeros(len(segments), device=self.device),
                          episode_of, tokens,
                          pairs=pairs, pack_keys=[root[k] for k in episode_of])
        batch.ref_logps = sequence_logprobs(self.reference, segments, episode_of,
                                            temperature=self.temperature,
                                            micro_batch_tokens=self.micro)
        batch.metrics["dpo/ref_logp_mean"] = float(batch.ref_logps.mean()) if tokens else 0.0
        return batch

    def loss_fn(self, batch: PairBatch) -> Callable:
        beta, n_pairs = self.beta, max(len(batch.pairs), 1)
        rows_of = [0] * len(batch.episode_tokens)
        for k in batch.episode_of:
            rows_of[k] += 1

        def loss_fn(x):
            index = loss_index(x)
            lp = torch.where(x.mask.bool(), x.logprobs.double(), 0.0).sum(-1)
            seq: dict[int, torch.Tensor] = {}
            seen = [0] * len(rows_of)
            for r, i in enumerate(index):
                k = batch.episode_of[i]
                seq[k] = seq[k] + lp[r] if k in seq else lp[r]
                seen[k] += 1
            here = [(w, l) for w, l in batch.pairs if w in seq or l in seq]
            for w, l in here:
                if seen[w] != rows_of[w] or seen[l] != rows_of[l]:
                    raise RuntimeError("a DPO pair is split across micro-batches: the "
                                       "learner ignored loss_fn.pack_keys")
            if not here:
                return x.logprobs.sum() * 0.0, {"loss": 0.0}
            w_i, l_i = zip(*here)
            ref = batch.ref_logps
            if ref.device != lp.device:
                raise RuntimeError(f"DPO reference log-probs on {ref.device}, the learner's "
                                   f"on {lp.device}: pass the learner to prepare")
            chosen = torch.stack([seq[k] for k in w_i])
            rejected = torch.stack([seq[k] for k in l_i])
            margin = (chosen - ref[list(w_i)]) - (rejected - ref[list(l_i)])
            per_pair = dpo_loss(chosen, rejected, ref[list(w_i)], ref[list(l_i)], beta)
            loss = per_pair.sum() / n_pairs
            return loss, {"loss": float(loss.detach()), "pairs": float(len(here)),
                          "pairs_ordered": float((margin > 0).sum()),
                          "margin_sum": float(beta * margin.detach().sum())}
        loss_fn.pack_keys = batch.pack_keys
        loss_fn.sum_metrics = ("pairs", "pairs_ordered", "margin_sum")
        return loss_fn

    def save(self, ckpt_dir, step: int) -> None:
        """The reference is frozen and reloaded from its source: nothing to save."""

    def load(self, ckpt_dir, step: int) -> None:
        """Nothing to restore."""


def load_reference(name: str, model_cfg) -> torch.nn.Module:
    """`initial`: the cell's model as it starts (loaded again, frozen); otherwise a local
    HF model directory (it must share the policy's tokenizer)."""
    if name == "initial":
        return load_policy(model_cfg)[0]
    from pathlib import Path
    if not Path(name).is_dir():
        raise ValueError(f"algo.dpo.reference={name!r}: not 'initial' nor a model directory")
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(name, local_files_only=True)
