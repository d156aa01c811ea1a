"""Shared prefix of the learner: the tokens every segment of an update starts with (the
system prompt and tool schemas of a cell) are run through the model once; each micro-batch
then runs only its rows' suffixes on top of the prefix's keys and values.

Why the gradient is exact: the prefix's outputs (per-layer keys and values, the logits
at its last position, its own token logprobs and entropies) enter every row through
`expand`, a broadcast whose backward sums the rows' gradients; by the chain rule (linear
in the upstream gradient) that sum, pushed through the prefix once, is the parameter
gradient of b separate copies of the prefix. In `Learner.update` the outputs are detached
leaves shared by all micro-batches; their accumulated gradients go through the prefix
graph in one final backward of sum(output * leaf.grad), a vector-Jacobian product, so the
prefix is forwarded and backpropagated once per update. tests/learners/test_learner_prefix.py
checks loss and every parameter gradient against the per-segment computation."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np
import torch
from transformers import DynamicCache

from ablate.learners.batching import shifted_stats


@dataclass
class Prefix:
    """One shared prefix's outputs; `graph` holds the attached originals once `leaves()`
    has detached them (same order as `tensors()`)."""
    ids: list[int]                              # the shared tokens, P of them
    kv: list[tuple[torch.Tensor, torch.Tensor]]  # per layer, [1, kv_heads, P, head_dim]
    last: torch.Tensor                          # [1, V] logits at position P-1
    lp: torch.Tensor                            # [1, P] logprobs of ids (position 0 = 0)
    ent: Optional[torch.Tensor]                 # [1, P] entropies, or None
    graph: list[torch.Tensor] = field(default_factory=list)
    acc: dict = field(default_factory=dict)     # leaf index -> float32 gradient sum

    def tensors(self) -> list[torch.Tensor]:
        flat = [t for pair in self.kv for t in pair] + [self.last, self.lp]
        return flat + ([self.ent] if self.ent is not None else [])

    def leaves(self) -> "Prefix":
        """A copy whose tensors are detached leaves (requiring grad where the originals
        do), so every micro-batch's backward accumulates into their .grad."""
        outs = self.tensors()
        ls = [o.detach().requires_grad_(o.requires_grad) for o in outs]
        kv = [(ls[2 * i], ls[2 * i + 1]) for i in range(len(self.kv))]
        rest = ls[2 * len(self.kv):]
        return Prefix(self.ids, kv, rest[0], rest[1], rest[2] if len(rest) > 2 else None,
                      graph=outs)

    def row(self, j: int) -> "Prefix":
        """Row j of a prefix forwarded for several rows at once (a batched pack's joint
        update: ablate/learners/packed.py), still attached to that forward."""
        kv = [(k[j:j + 1], v[j:j + 1]) for k, v in self.kv]
        return Prefix(self.ids, kv, self.last[j:j + 1], self.lp[j:j + 1],
                      None if self.ent is None else self.ent[j:j + 1])

    def flush_grads(self) -> None:
        """After each micro-batch's backward: the gradients of bf16 / fp16 leaves (the
        keys and values under autocast or a bf16 engine) move into float32 sums, so the
        accumulation over micro-batches is in float32 as ZeRO's own gradient
        accumulation (deepspeed_learner.ds_config: data_types.grad_accum_dtype); float32
        and float64 leaves keep accumulating in place, as before."""
        for k, leaf in enumerate(self.tensors()):
            g = leaf.grad
            if g is None or g.dtype in (torch.float32, torch.float64):
                continue
            self.acc[k] = g.float() if k not in self.acc else self.acc[k].add_(g.float())
            leaf.grad = None

    def vjp_loss(self) -> torch.Tensor:
        """Scalar whose backward sends the leaves' accumulated gradients through the
        prefix graph. Without any (nothing reached the prefix) a zero that still has a
        graph, so the boundary backward (and ZeRO-3's collectives) happen in step."""
        self.flush_grads()
        grads = [self.acc.get(k, leaf.grad) for k, leaf in enumerate(self.tensors())]
        # a float32 sum meets its low-precision output in one rounding of the product
        terms = [(o * g.to(o.dtype)).sum() for o, g in zip(self.graph, grads) if g is not None]
        return sum(terms) if terms else self.graph[2 * len(self.kv)].sum() * 0.0


def stacked(pres: Sequence[Prefix], counts: Sequence[int]) -> Prefix:
    """One prefix for sum(counts) rows: counts[j] rows of pres[j] (prefixes of equal
    length, each of one row), so that one micro-batch holds several prefixes' rows; the
    gradients flow back into each prefix's own tensors."""
    def cat(ts):
        return torch.cat([t.expand(n, *t.shape[1:]) for t, n in zip(ts, counts)])
    kv = [(cat([p.kv[i][0] for p in pres]), cat([p.kv[i][1] for p in pres]))
          for i in range(len(pres[0].kv))]
    ent = None if pres[0].ent is None else cat([p.ent for p in pres])
    return Prefix(pres[0].ids, kv, cat([p.last for p in pres]), cat([p.lp for p in pres]),
                  ent)


def shared_prefix_len(segments: Sequence, min_len: int) -> int:
    """Longest common prefix of the segments' ids over positions no segment trains on
    (mask 0, no action mask), leaving every segment at least one token of its own; 0 when
    shorter than `min_len` or with fewer than two segments."""
    if len(segments) < 2:
        return 0
    limit = min(len(s.ids) for s in segments) - 1
    for s in segments:
        trained = np.flatnonzero(np.asarray(s.mask[1:], dtype=bool))
        if len(trained):
            limit = min(limit, int(trained[0]) + 1)
        if getattr(s, "allowed", None):
            limit = min(limit, min(int(t) for t in s.allowed))
    if limit <= 0:
        return 0
    first = np.asarray(segments[0].ids[:limit])
    for s in segments[1:]:
        diff = np.flatnonzero(np.asarray(s.ids[:len(first)]) != first)
        if len(diff):
            first = first[: int(diff[0])]
    return len(first) if len(first) >= max(int(min_len), 1) else 0


def expanded_cache(pre: Prefix, b: int) -> DynamicCache:
    """A fresh cache holding the prefix's keys and values broadcast to b rows (the cache
    grows by concatenation, so the prefix tensors are never written to)."""
    return DynamicCache([(k.expand(b, -1, -1, -1), v.expand(b, -1, -1, -1))
                         for k, v in pre.kv])


def cache_tensors(cache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(layer.keys, layer.values) for layer in cache.layers]


def first_stats(pre: Prefix, ids: torch.Tensor, temperature: float,
                allowed: Optional[list] = None, entropy: bool = True
                ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """[b] logprob (and entropy) of each row's token at position P, the first after the
    prefix, from the prefix's last logits (under the row's action mask)."""
    b, P = ids.shape[0], len(pre.ids)
    lp, ent = shifted_stats(pre.last[:, None].expand(b, 1, -1), ids[:, P:P + 1], temperature,
                            allowed, P, entropy)
    return lp[:, 0], (ent[:, 0] if entropy else None)


def suffix_stats(pre: Prefix, logits: torch.Tensor, ids: torch.Tensor, temperature: float,
                 allowed: Optional[list] = None, entropy: bool = True
                 ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """[b, T] token logprobs (and entropies) of full rows `ids` from the prefix's outputs
    and the suffix logits [b, T-P, V]; the same values `token_stats` gives for the whole
    rows: prefix positions from the prefix, position P from its last logits (under the
    row's action mask), positions > P from the suffix logits."""
    b, P = ids.shape[0], len(pre.ids)
    first = first_stats(pre, ids, temperature, allowed, entropy)
    rest = shifted_stats(logits[:, :-1], ids[:, P + 1:], temperature, allowed, P + 1,
                         entropy)
    lp = torch.cat([pre.lp.expand(b, -1), first[0][:, None], rest[0]], dim=1)
    if not entropy:
        return lp, None
    return lp, torch.cat([pre.ent.expand(b, -1), first[1][:, None], rest[1]], dim=1)
