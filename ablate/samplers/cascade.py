"""Cascade attention over a prefix every row shares (the system prompt and tool schemas).

Each decoding step of HFSampler reads every row's keys and values. When all rows start
with the same prefix (HFSampler.share_prefix: ~578 of the default cell's 950-1,850 tokens),
each row's cache would hold its own copy of the prefix and every step would read it once
per row. Cascade attention (FlashInfer's cascade/shared-prefix attention, Ye et al. 2024,
"Cascade Inference", flashinfer.ai/2024/02/02/cascade-inference.html; Juravsky et al.
2024, "Hydragen", arXiv:2402.05099) splits softmax attention at the prefix boundary:

    o = (o_p * exp(l_p - m) + o_s * exp(l_s - m)) / (exp(l_p - m) + exp(l_s - m)),
    m = max(l_p, l_s),

where (o_p, l_p) is attention (output, log-sum-exp of the scores) over the shared prefix,
computed for the queries of all rows at once against ONE copy of its keys/values, and
(o_s, l_s) is attention over the row's own keys (after the prefix, its own mask). Every
query comes after the prefix, so the prefix part needs no mask. Exact up to float
rounding (the sum is ordered differently); tests/samplers/test_cascade.py compares it with plain
attention over the whole sequence.

The attention function is registered with transformers' AttentionInterface (and the
mask interface, whose masks are sdpa's) as "ablate_cascade". It reads the prefix's
keys/values from a context variable that HFSampler sets around its forwards (`shared`);
without one it is transformers' sdpa attention, unchanged, so a model switched to it
behaves as before outside the sampler's cascade calls.
"""
from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from typing import Optional

import torch

NAME = "ablate_cascade"
# torch's CPU flash-attention kernel, the one F.scaled_dot_product_attention uses on CPU,
# called directly because it also returns the log-sum-exp the merge needs; CPU only
_flash_cpu = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_prefix: contextvars.ContextVar = contextvars.ContextVar("ablate_cascade_prefix",
                                                         default=None)
_sdpa = None                              # transformers' sdpa attention (register())


@dataclass
class _Shared:
    kv: list[tuple[torch.Tensor, torch.Tensor]]
    host: bool                            # the sampler's device is the CPU: its kernel
    spans: Optional[list[int]] = None     # this decoding step's own-key counts per row


@contextlib.contextmanager
def shared(kv: list[tuple[torch.Tensor, torch.Tensor]], host: bool = True):
    """Within: attention layer i adds the keys/values kv[i] ([1, kv_heads, S, head_dim],
    positions 0..S-1) before each row's own. `host`: the tensors live on the CPU (its
    flash kernel); otherwise a portable attention in plain tensor ops runs on any device."""
    token = _prefix.set(_Shared([(k.contiguous(), v.contiguous()) for k, v in kv], host))
    try:
        yield
    finally:
        _prefix.reset(token)


def set_spans(spans: Optional[list[int]]) -> None:
    """The next forwards' decoding rows attend to their last spans[b] own keys (known to
    the sampler on the host: reading them off the mask would sync every layer)."""
    state = _prefix.get()
    if state is not None:
        state.spans = spans


def _attend(q, k, v, attn_mask=None, scale=None, host=True):
    """(output [B, H, q, d], log-sum-exp [B, H, q]) of softmax attention."""
    if host:
        return _flash_cpu(q, k, v, attn_mask=attn_mask, scale=scale)
    s = (q.float() @ k.float().transpose(-1, -2)) * (scale or q.shape[-1] ** -0.5)
    if attn_mask is not None:
        s = s + attn_mask.float()
    lse = torch.logsumexp(s, -1)
    safe = lse.masked_fill(lse == float("-inf"), 0.0)    # a fully masked row: output 0
    return ((s - safe.unsqueeze(-1)).exp() @ v.float()).to(q.dtype), lse


def register() -> bool:
    """Register "ablate_cascade" with transformers; False where this transformers lacks
    the interfaces (the sampler then attends over whole rows, as before)."""
    try:
        from transformers import AttentionInterface
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    except ImportError:
        return False
    global _sdpa
    _sdpa = sdpa_attention_forward
    AttentionInterface.register(NAME, cascade_attention_forward)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    return True


def cascade_attention_forward(module, query, key, value, attention_mask, dropout=0.0,
                              scaling=None, **kwargs):
    """transformers' attention-function signature: query [B, H, q, d], key/value
    [B, KVH, k, d] (the row's own cache), a bool mask [B, 1, q, k] or None; returns
    ([B, q, H, d], None)."""
    state = _prefix.get()
    if state is None:
        return _sdpa(module, query, key, value, attention_mask, dropout=dropout,
                     scaling=scaling, **kwargs)
    kp, vp = state.kv[module.layer_idx]
    B, H, q, d = query.shape
    kvh = key.shape[1]
    r = H // kvh
    qg = query.reshape(B, kvh, r * q, d)          # heads j*r..j*r+r-1 read kv head j
    mask = _own_mask(attention_mask, q, key.shape[2], r, query.dtype, query.device)
    o_s, l_s = _own_attention(qg, key, value, mask, scaling, state)
    # every row's queries against one copy of the prefix, no mask (all come after it)
    qp = qg.transpose(0, 1).reshape(1, kvh, B * r * q, d)
    o_p, l_p = _attend(qp, kp, vp, scale=scaling, host=state.host)
    o_p = o_p.reshape(kvh, B, r * q, d).transpose(0, 1)
    l_p = l_p.reshape(kvh, B, r * q).transpose(0, 1)
    m = torch.maximum(l_p, l_s)
    w_p, w_s = (l_p - m).exp().unsqueeze(-1), (l_s - m).exp().unsqueeze(-1)
    out = (o_p * w_p + o_s * w_s) / (w_p + w_s)   # the log-sum-exp merge (module doc)
    return out.reshape(B, H, q, d).transpose(1, 2).contiguous().to(query.dtype), None


def _own_attention(q, k, v, mask, scale, state: _Shared):
    """Attention over each row's own keys. Decoding (one query per row) with rows
    right-aligned in the buffers, longest first (HFSampler orders them so): each run of
    rows of similar length reads only its last `span` positions, not the padding of the
    longest row (a row's span starts at its first unmasked key)."""
    if mask is None or mask.shape[2] != 1:       # a prefill's rows: one call
        return _attend(q, k, v, attn_mask=mask, scale=scale, host=state.host)
    K = k.shape[2]
    spans = state.spans
    if spans is None or len(spans) != q.shape[0]:     # read off the mask (a sync)
        spans = (K - (mask[:, 0, 0, :] == 0).int().argmax(-1)).tolist()
    outs, lses, b0 = [], [], 0
    for b1 in _runs(spans):
        lo = K - max(spans[b0:b1])
        o, lse = _attend(q[b0:b1], k[b0:b1, :, lo:], v[b0:b1, :, lo:],
                         attn_mask=mask[b0:b1, ..., lo:], scale=scale, host=state.host)
        outs.append(o)
        lses.append(lse)
        b0 = b1
    if len(outs) == 1:
        return outs[0], lses[0]
    return torch.cat(outs), torch.cat(lses)


def _runs(spans: list[int], keep: float = 0.8) -> list[int]:
    """Ends of runs of consecutive rows: a run ends where a row's span falls below
    `keep` times the run's longest (padding read per run < 1 - keep of its keys)."""
    ends, top = [], spans[0]
    for b, s in enumerate(spans):
        if s > top or s < keep * top:
            ends.append(b)
            top = s
    return ends + [len(spans)]


def additive_mask(attn: torch.Tensor, q: int, dtype: torch.dtype) -> torch.Tensor:
    """The 4D additive mask [B, 1, q, k] of a forward's `q` new positions over the row's
    own keys, from its 2D mask [B, k] (1: attend): built once per forward, so
    transformers passes it through instead of building one per call (masking_utils)."""
    allowed = attn.bool()[:, None, None, :]
    if q > 1:                             # causal: the new positions are the last q
        k = attn.shape[1]
        allowed = allowed & torch.ones((q, k), dtype=torch.bool,
                                       device=attn.device).tril(k - q)
    return _additive(allowed, dtype)


def _additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A bool mask (True: attend) as the additive one the flash kernel takes."""
    return torch.zeros(allowed.shape, dtype=dtype,
                       device=allowed.device).masked_fill_(~allowed, float("-inf"))


def _own_mask(mask: Optional[torch.Tensor], q: int, k: int, r: int,
              dtype: torch.dtype, device: torch.device) -> Optional[torch.Tensor]:
    """The additive mask of the packed queries [B, 1, r*q, k] over the row's own keys;
    None (sdpa's mask skipped: causal, no padding) is the bottom-right causal mask."""
    if mask is None:
        if q == 1:
            return None
        mask = additive_mask(torch.ones((1, k), dtype=torch.long, device=device), q, dtype)
    elif mask.dtype == torch.bool:
        mask = _additive(mask, dtype)
    mask = mask.to(dtype)
    if r > 1 and q > 1:
        mask = mask.expand(mask.shape[0], 1, q, k).repeat(1, 1, r, 1)
    return mask
