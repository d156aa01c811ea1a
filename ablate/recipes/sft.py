"""Supervised fine-tuning on demonstrations with the ordinary learner (the warm starts of
ablate/recipes/smollm_warmstart.py and ablate/recipes/tiny_warmstart.py).

A demonstration is (ids, loss_mask) as ablate.harness.chat.demonstration renders a
scripted episode: token-identical to what a rollout feeds the model, loss on the turns.
Loss: the token-mean negative log-likelihood of the demonstrated turns (supervised
fine-tuning, Ouyang et al. 2022, "Training language models to follow instructions with
human feedback", §3.5 SFT).
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Callable, Sequence

import torch

from ablate.harness.episode import Segment
from ablate.learners import make_learner


def nll(x):
    """Token-mean negative log-likelihood of the demonstrated turns (the SFT loss)."""
    return -(x.logprobs * x.mask).sum() / max(x.num_tokens, 1), {}


def fit(model, learner_cfg, demos: Sequence[tuple[list[int], list[int]]], *, epochs: int,
        batch: int, lr: float, seed: int, work: Path,
        log: Callable[[str], None] = print) -> dict[str, torch.Tensor]:
    """Fine-tune `model` (taken over by the learner) on `demos`, `batch` demonstrations
    per optimizer step, reshuffled each epoch; returns the trained state dict."""
    segs = [Segment(ids=list(i), mask=list(m), logprobs=[0.0] * len(i), allowed=None)
            for i, m in demos]
    lrn = make_learner(learner_cfg, model, lr=lr, seed=seed, temperature=1.0,
                       ckpt_dir=Path(work) / "ckpt")
    rng, seen = random.Random(seed), 0
    for epoch in range(epochs):
        rng.shuffle(segs)
        for b in range(0, len(segs), batch):
            part = segs[b:b + batch]
            stats = lrn.update(part, torch.ones(len(part)), nll)
            seen += stats["tokens"]
            log(f"sft: epoch {epoch} batch {b // batch} nll {stats['loss']:.3f} "
                f"({stats['seconds']:.0f}s, {seen} tokens)")
    return lrn.export_state_dict()
