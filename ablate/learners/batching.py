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


# positions whose [chunk, vocab] float32 log-softmax exists at once (shifted_stats): at
# Qwen3's 151,936-token vocabulary 256 positions are 0.16 GB per temporary, against 2.5 GB
# per temporary for 4096 unchunked positions (benchmarks/bench_logprob_chunk.py)
LOGPROB_CHUNK = 256


def shifted_stats(logits: torch.Tensor, targets: torch.Tensor, temperature: float,
                  allowed: Optional[list], offset: int, entropy: bool = True,
                  chunk: Optional[int] = None
                  ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Logprob of targets[:, j] under softmax(logits[:, j] / temperature) and that
    distribution's full-vocabulary entropy, [b, n]; `offset` is the position of
    targets[:, 0] in its row (where `allowed` constrains it). float32, or float64 when the
    model computes in float64.

    Computed `chunk` positions at a time (default LOGPROB_CHUNK; 0: all at once, plain
    autograd): forward without a graph, backward recomputing each chunk's log-softmax, so
    no [positions, vocab] float32 tensor is ever held. Per-chunk values and gradients come
    from the same operations as the unchunked ones (tests/learners/test_learner_scale.py)."""
    chunk = LOGPROB_CHUNK if chunk is None else int(chunk)
    allowed = allowed if allowed is not None and any(a for a in allowed) else None
    if chunk <= 0:
        return _dense_stats(logits, targets, temperature, allowed, offset, entropy)
    lp, ent = _ChunkedStats.apply(logits, targets, float(temperature), allowed, int(offset),
                                  bool(entropy), chunk)
    return lp, (ent if entropy else None)


def _dense_stats(logits, targets, temperature, allowed, offset, entropy):
    """shifted_stats over all of `logits` [b, n, V] at once, with autograd."""
    lg = logits if logits.dtype == torch.float64 else logits.float()
    lg = lg / temperature
    if allowed is not None:
        lg = _apply_allowed(lg, allowed, offset)
    logp = F.log_softmax(lg, dim=-1)
    lp = logp.gather(-1, targets[..., None]).squeeze(-1)
    if not entropy:
        return lp, None
    # p·log p with masked (-inf) entries as 0; the masked_fill keeps their gradient finite
    safe = logp.masked_fill(~torch.isfinite(logp), 0.0)
    return lp, -(logp.exp() * safe).sum(-1)


def _chunks(b: int, n: int, size: int) -> list[tuple[int, int, int]]:
    """(row, start, end) spans of at most `size` positions covering a [b, n] grid."""
    return [(i, a, min(a + size, n)) for i in range(b) for a in range(0, n, size)]


def _span_stats(x, targets, temperature, allowed, offset, entropy, span):
    """_dense_stats of one span (row i, positions a..e-1) from its logits x [1, e-a, V]."""
    i, a, e = span
    spec = [allowed[i]] if allowed is not None and allowed[i] else None
    return _dense_stats(x, targets[i:i + 1, a:e], temperature, spec, offset + a, entropy)


class _ChunkedStats(torch.autograd.Function):
    """shifted_stats chunk by chunk. Forward: no graph, only `logits` (the model's output,
    held anyway) is saved. Backward: per chunk, the forward's operations are rerun with
    autograd on a detached copy of that chunk and their gradient written into the
    chunk's rows of one logits-sized gradient (the recompute of activation
    checkpointing, Chen et al. 2016, arXiv:1604.06174); an unused output (the entropy
    when the loss has no entropy term) gets no gradient work."""

    @staticmethod
    def forward(ctx, logits, targets, temperature, allowed, offset, entropy, chunk):
        b, n = targets.shape
        out_dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
        lp = torch.zeros((b, n), dtype=out_dtype, device=logits.device)
        ent = torch.zeros_like(lp)
        ctx.spans = _chunks(b, n, chunk)
        ctx.args = (temperature, allowed, offset)
        for s in ctx.spans:
            i, a, e = s
            c_lp, c_ent = _span_stats(logits[i:i + 1, a:e], targets, *ctx.args, entropy, s)
            lp[i, a:e] = c_lp[0]
            if entropy:
                ent[i, a:e] = c_ent[0]
        ctx.save_for_backward(logits, targets)
        ctx.set_materialize_grads(False)
        return lp, ent

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g_lp, g_ent):
        logits, targets = ctx.saved_tensors
        if g_lp is None and g_ent is None:
            return (None,) * 7
        grad = torch.zeros_like(logits)
        for s in ctx.spans:
            i, a, e = s
            x = logits[i:i + 1, a:e].detach().requires_grad_()
            with torch.enable_grad():
                c_lp, c_ent = _span_stats(x, targets, *ctx.args, g_ent is not None, s)
            outs = [(o, g[i:i + 1, a:e]) for o, g in ((c_lp, g_lp), (c_ent, g_ent))
                    if g is not None]
            grad[i, a:e] = torch.autograd.grad([o for o, _ in outs], x,
                                               [g for _, g in outs])[0][0]
        return grad, None, None, None, None, None, None


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
