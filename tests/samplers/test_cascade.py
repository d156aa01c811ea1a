"""Cascade attention (ablate/samplers/cascade.py): attention split at a shared prefix and
merged by log-sum-exp equals plain attention over the whole sequence; without a prefix
it is transformers' sdpa attention, bit for bit."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from ablate.samplers import cascade

assert cascade.register()


def _plain(q, k, v, mask, scale):
    """Reference: every head reads its kv head (repeat), a bool mask, one softmax."""
    r = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(r, 1), v.repeat_interleave(r, 1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


@pytest.mark.parametrize("q_len", [1, 5])
@pytest.mark.parametrize("padded", [True, False])
@pytest.mark.parametrize("host", [True, False])       # the CPU kernel / the portable one
def test_split_at_the_prefix_equals_whole_attention(q_len, padded, host):
    g = torch.Generator().manual_seed(0)
    B, H, KVH, d, S, own = 3, 4, 2, 16, 11, 9
    q = torch.randn(B, H, q_len, d, generator=g)
    kp, vp = torch.randn(1, KVH, S, d, generator=g), torch.randn(1, KVH, S, d, generator=g)
    ko, vo = torch.randn(B, KVH, own, d, generator=g), torch.randn(B, KVH, own, d, generator=g)
    # the own part's mask: causal for the q_len new positions at the end, row b's first
    # 2*b positions padding
    mask = torch.ones(B, 1, q_len, own, dtype=torch.bool).tril(own - q_len)
    if padded:
        for b in range(B):
            mask[b, :, :, :2 * b] = False
    whole_mask = torch.cat([torch.ones(B, 1, q_len, S, dtype=torch.bool), mask], -1)
    want = _plain(q, torch.cat([kp.expand(B, -1, -1, -1), ko], 2),
                  torch.cat([vp.expand(B, -1, -1, -1), vo], 2), whole_mask, 0.25)
    module = SimpleNamespace(layer_idx=1)
    with cascade.shared([(kp * 0, vp * 0), (kp, vp)], host=host):  # layer 1: the second
        got, weights = cascade.cascade_attention_forward(
            module, q, ko, vo, mask if padded or q_len == 1 else None, scaling=0.25)
    assert weights is None and got.shape == (B, q_len, H, d)
    assert torch.allclose(got.transpose(1, 2), want, atol=1e-5)


def test_without_a_prefix_it_is_sdpa_bit_for_bit():
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg = AutoConfig.for_model("qwen3", vocab_size=64, hidden_size=32, intermediate_size=64,
                               num_hidden_layers=2, num_attention_heads=4,
                               num_key_value_heads=2, head_dim=8)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").eval()
    ids = torch.randint(0, 64, (2, 12))
    with torch.no_grad():
        want = model(ids).logits
        model.config._attn_implementation = cascade.NAME
        got = model(ids).logits
    assert torch.equal(got, want)


def test_runs_of_rows_end_where_a_span_falls_or_rises():
    assert cascade._runs([10, 9, 8, 7, 3, 3]) == [3, 4, 6]     # 7 < 0.8*10, 3 < 0.8*7
    assert cascade._runs([5, 9, 9]) == [1, 3]                 # rows not sorted: still exact
    assert cascade._runs([4]) == [1]
