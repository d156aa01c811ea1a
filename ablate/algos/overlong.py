"""DAPO's soft overlong punishment: a length-aware term added to each episode's reward
before advantages are computed (Yu et al., 2025, arXiv:2503.14476 §3.4, eq. 13)."""
from __future__ import annotations

from typing import Sequence

import torch


def overlong_penalty(lengths: Sequence[int] | torch.Tensor, max_len: int, cache_len: int,
                     factor: float = 1.0) -> torch.Tensor:
    """Per-episode penalty (<= 0), float32 tensor [N], for generated lengths |y|:

        0                                          if |y| <= L_max - L_cache
        (L_max - L_cache - |y|) / L_cache * factor  if L_max - L_cache < |y| <= L_max
        -factor                                    if |y| > L_max

    (DAPO eq. 13, scaled by `factor`). With cache_len 0 the buffer is empty: a hard cliff.
    """
    if max_len <= 0 or not 0 <= cache_len < max_len:
        raise ValueError(f"need max_len > 0 and 0 <= cache_len < max_len, got "
                         f"max_len={max_len}, cache_len={cache_len}")
    if factor < 0:
        raise ValueError(f"factor={factor} must be >= 0")
    length = torch.as_tensor(lengths, dtype=torch.float64).flatten()
    if (length < 0).any():
        raise ValueError("lengths must be >= 0")
    expected = max_len - cache_len
    penalty = torch.zeros_like(length)
    if cache_len > 0:
        in_buffer = (length > expected) & (length <= max_len)
        penalty = torch.where(in_buffer, (expected - length) / cache_len * factor, penalty)
    penalty = torch.where(length > max_len, torch.full_like(length, -factor), penalty)
    return penalty.to(torch.float32)
