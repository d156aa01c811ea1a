"""Seeds: the process-wide RNGs and stable seeds derived from integers."""
from __future__ import annotations

import random

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def derived_seed(*parts: int) -> int:
    """A stable 31-bit seed from integers (e.g. seed, step, round): numpy's SeedSequence
    hashes the entropy (O'Neill 2015, PCG; numpy.random.SeedSequence)."""
    return int(np.random.SeedSequence([int(p) & 0xFFFFFFFF for p in parts]).generate_state(1)[0]
               & 0x7FFFFFFF)
