"""Pure tensor helpers of the learner: packing segments into micro-batches, token logprobs
and entropy from logits, and combining per-micro-batch metrics.

Alignment convention (the sampler's, see ablate.harness.episode.Segment): position t of a
row holds the logprob of ids[t], computed from the logits at t-1; position 0 has no
predecessor and is 0.0 (its mask is always 0)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch
import torch.nn.functional as F

PAD_ID = 0   # right padding: causal attention never lets a real token see it, so no mask


@dataclass
class MicroBatch:
    index: list[int]                 # positions of its segments in the caller's batch
    ids: torch.Tensor                # [b, T] long
    mask: torch.Tensor               # [b, T] float, 0 on padding
    old_logprobs: torch.Tensor       # [b, T] float32
    lengths: list[int]
    allowed: list[Optional[dict]]    # per row: {t: [allowed ids at t]} or None

    def to(self, device) -> "MicroBatch":
        return MicroBatch(self.index, self.ids.to(device), self.mask.to(device),
                          self.old_logprobs.to(device), self.lengths, self.allowed)


def pack(segments: Sequence, max_tokens: int, skip: int = 0,
         keys: Optional[Sequence] = None) -> list[list[int]]:
    """Group segment indices so that rows × longest row <= max_tokens (right-padded cost),
    rows counted without their first `skip` tokens (a shared prefix run once). Longest
    first, so each micro-batch's padding is small; a segment longer than the budget gets
    a micro-batch of its own. Order does not change the summed loss.

    `keys` (one hashable per segment): segments with equal keys always share a
    micro-batch (a loss that does not split additively over rows, e.g. DPO's over the
    two episodes of a pair); a unit over the budget gets a micro-batch of its own."""
    if keys is not None:
        return _pack_units(segments, max_tokens, skip, keys)
    order = sorted(range(len(segments)), key=lambda i: -len(segments[i].ids))
    groups: list[list[int]] = []
    for i in order:
        if groups:
            g = groups[-1]
            longest = len(segments[g[0]].ids) - skip
            if (len(g) + 1) * longest <= max_tokens:
                g.append(i)
                continue
        groups.append([i])
    return groups


def _pack_units(segments: Sequence, max_tokens: int, skip: int, keys: Sequence
                ) -> list[list[int]]:
    """`pack` over units of segments sharing a key, longest unit (by its longest row)
    first; within a micro-batch the longest row comes first."""
    if len(keys) != len(segments):
        raise ValueError(f"{len(keys)} packing keys for {len(segments)} segments")
    units: dict = {}
    for i, k in enumerate(keys):
        units.setdefault(k, []).append(i)
    size = [len(s.ids) - skip for s in segments]
    order = sorted(units.values(), key=lambda u: -max(size[i] for i in u))
    groups: list[list[int]] = []
    for unit in order:
        unit = sorted(unit, key=lambda i: -size[i])
        if groups and (len(groups[-1]) + len(unit)) * size[groups[-1][0]] <= max_tokens:
            groups[-1].extend(unit)
        else:
            groups.append(unit)
    return groups


def collate(segments: Sequence, index: list[int]) -> MicroBatch:
    segs = [segments[i] for i in index]
    lengths = [len(s.ids) for s in segs]
    T = max(lengths)
    ids = torch.full((len(segs), T), PAD_ID, dtype=torch.long)
    mask = torch.zeros((len(segs), T), dtype=torch.float32)
    old = torch.zeros((len(segs), T), dtype=torch.float32)
    for r, s in enumerate(segs):
        n = len(s.ids)
        ids[r, :n] = torch.as_tensor(s.ids, dtype=torch.long)
        mask[r, :n] = torch.as_tensor(s.mask, dtype=torch.float32)
        old[r, :n] = torch.as_tensor(s.logprobs, dtype=torch.float32)
    mask[:, 0] = 0.0   # nothing predicts the first token
    return MicroBatch(index, ids, mask, old, lengths,
                      [getattr(s, "allowed", None) for s in segs])


def _apply_allowed(lg: torch.Tensor, allowed: list[Optional[dict]], offset: int
                   ) -> torch.Tensor:
    """-inf outside the allowed ids at constrained positions (the sampler's logits mask).
    Row j of `lg` [b, n, V] is the distribution of the token at position j + offset."""
    rows, cols, keep = [], [], []
    V = lg.shape[-1]
    for b, spec in enumerate(allowed):
        for t, toks in (spec or {}).items():
            j = int(t) - offset
            if 0 <= j < lg.shape[1]:
                m = torch.zeros(V, dtype=torch.bool)
                m[torch.as_tensor(list(toks), dtype=torch.long)] = True
                rows.append(b), cols.append(j), keep.append(m)
    if not rows:
        return lg
    r, c = torch.tensor(rows, device=lg.device), torch.tensor(cols, device=lg.device)
    masked = lg[r, c].masked_fill(~torch.stack(keep).to(lg.device), float("-inf"))
    return lg.index_put((r, c), masked)


def shifted_stats(logits: torch.Tensor, targets: torch.Tensor, temperature: float,
                  allowed: Optional[list], offset: int, entropy: bool = True
                  ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Logprob of targets[:, j] under softmax(logits[:, j] / temperature) and that
    distribution's full-vocabulary entropy, [b, n]; `offset` is the position of
    targets[:, 0] in its row (where `allowed` constrains it). float32, or float64 when the
    model computes in float64."""
    lg = logits if logits.dtype == torch.float64 else logits.float()
    lg = lg / temperature
    if allowed is not None and any(a for a in allowed):
        lg = _apply_allowed(lg, allowed, offset)
    logp = F.log_softmax(lg, dim=-1)
    lp = logp.gather(-1, targets[..., None]).squeeze(-1)
    if not entropy:
        return lp, None
    # p·log p with masked (-inf) entries as 0; the masked_fill keeps their gradient finite
    safe = logp.masked_fill(~torch.isfinite(logp), 0.0)
    return lp, -(logp.exp() * safe).sum(-1)


def token_stats(logits: torch.Tensor, ids: torch.Tensor, temperature: float,
                allowed: Optional[list] = None, entropy: bool = True
                ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Logprob of ids[t] under softmax(logits[t-1] / temperature) and the full-vocabulary
    entropy of that distribution, both [b, T] with position 0 = 0."""
    lp, ent = shifted_stats(logits[:, :-1], ids[:, 1:], temperature, allowed, 1, entropy)
    zero = lp.new_zeros(lp.shape[0], 1)
    return torch.cat([zero, lp], dim=1), (torch.cat([zero, ent], dim=1) if entropy else None)


# Metrics that are shares of a global-count aggregation (they sum across micro-batches to
# the full-batch value, see ablate.algos.losses); everything else is a per-micro-batch
# mean, combined token-weighted. A loss_fn can extend this with `loss_fn.sum_metrics`.
SUM_METRICS = frozenset({"loss", "pg_loss", "entropy", "kl", "tokens"})


def combine_metrics(parts: list[tuple[dict, float]], sum_keys=SUM_METRICS) -> dict:
    """parts: (metrics of one micro-batch, its masked token count)."""
    total = sum(w for _, w in parts)
    out: dict[str, float] = {}
    keys = dict.fromkeys(k for m, _ in parts for k in m)
    for k in keys:
        vals = [(float(m[k]), w) for m, w in parts if k in m]
        if k in sum_keys:
            out[k] = sum(v for v, _ in vals)
        elif k.endswith("_max"):
            out[k] = max(v for v, _ in vals)
        elif k.endswith("_min"):
            out[k] = min(v for v, _ in vals)
        elif total > 0:
            out[k] = sum(v * w for v, w in vals) / total
        else:
            out[k] = sum(v for v, _ in vals) / len(vals)
    return out
