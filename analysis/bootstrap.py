"""Vectorised two-level (seed x question) bootstrap.

The estimand of a cell is its accuracy averaged over training seeds and over the
population of questions. One replicate:
  * question weights w_q (multinomial counts, integers + bincount) are drawn ONCE and
    shared by every cell, so that differences between cells stay paired on questions;
  * seeds are resampled within each cell (cells that ran the same seed values share the
    seed draw: common random numbers, so identical cells give identical replicates);
  * seed deviations from the question-reweighted all-seed mean are inflated by
    sqrt(S/(S-1)), which makes the seed part of the bootstrap variance unbiased
    (Davison & Hinkley 1997, sec. 3.8 two-stage resampling; Efron & Tibshirani 1993).

Per-seed reweighted means come from one float32 matmul W @ (Y - ybar), in chunks of
replicates (progress bar while resampling large sweeps).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

CHUNK = 2500   # replicates per matmul chunk (B x J float32 stays small)


@dataclass
class CellData:
    """Per-question means of one cell: y[q, s] for question q (global index) and seed s;
    NaN where the seed has no row for that question."""
    y: np.ndarray                      # (Q, S) float64
    seeds: tuple                       # seed values, one per column

    @property
    def n_seeds(self) -> int:
        return self.y.shape[1]


def question_weights(rng: np.random.Generator, b: int, q: int) -> np.ndarray:
    """Multinomial(Q; 1/Q,...) counts for b replicates, as float32 (b, q)."""
    idx = rng.integers(0, q, size=(b, q))
    idx += (np.arange(b) * q)[:, None]
    return np.bincount(idx.ravel(), minlength=b * q).reshape(b, q).astype(np.float32)


def _seed_counts(rng: np.random.Generator, b: int, s: int) -> np.ndarray:
    idx = rng.integers(0, s, size=(b, s))
    idx += (np.arange(b) * s)[:, None]
    return np.bincount(idx.ravel(), minlength=b * s).reshape(b, s).astype(np.float64)


def two_level_replicates(cells: list[CellData], B: int = 10_000, rng_seed: int = 0,
                         seed_level: bool = True, inflate: bool = True,
                         progress: bool | None = None,
                         extra: list[np.ndarray] | None = None) -> np.ndarray:
    """Bootstrap replicates of every cell mean: array (B, n_cells), float64.

    seed_level=False gives the question-only bootstrap (what most papers do; too narrow).
    `extra`: optional list of (Q,) boolean question masks (e.g. hop subsets); for each mask
    the replicates of every cell restricted to those questions are appended as further
    columns, block by block (mask-major), using the same draws.
    """
    if not cells:
        return np.zeros((B, 0))
    Q = cells[0].y.shape[0]
    masks = [np.ones(Q, bool)] + [np.asarray(m, bool) for m in (extra or [])]
    # columns: for each mask, for each cell, each seed
    cols = []
    for m in masks:
        for c in cells:
            y = np.where(m[:, None], c.y, np.nan)
            cols.append(y)
    Y = np.concatenate(cols, axis=1)                           # (Q, J)
    present = ~np.isnan(Y)
    cnt = present.sum(axis=0)
    ybar = np.where(cnt > 0, np.where(present, Y, 0.0).sum(axis=0) / np.maximum(cnt, 1), 0.0)
    # deduplicate identical columns: identical inputs give bit-identical replicates
    Yc = np.where(present, Y - ybar, 0.0)
    key = np.concatenate([Yc, present.astype(float)], axis=0)
    uniq, inverse = np.unique(key.T, axis=0, return_inverse=True)
    inverse = inverse.ravel()
    U = uniq[:, :Q].T.astype(np.float32)                      # (Q, U)
    M = uniq[:, Q:].T.astype(np.float32)                      # (Q, U)
    full_mask = bool(M.all())

    rng = np.random.default_rng(rng_seed)
    # seed groups: cells with the same seed values share the seed draw
    groups: dict[tuple, list[int]] = {}
    for i, c in enumerate(cells):
        groups.setdefault(tuple(c.seeds), []).append(i)

    n_cells = len(cells)
    out = np.empty((B, n_cells * len(masks)))
    if progress is None:
        progress = sys.stderr.isatty() and B * Y.shape[1] * Q > 2e8
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=B, desc="bootstrap", unit="rep", leave=False)
    offsets = np.cumsum([0] + [c.n_seeds for c in cells] * len(masks))
    start = 0
    while start < B:
        b = min(CHUNK, B - start)
        W = question_weights(rng, b, Q)
        num = (W @ U).astype(np.float64)
        den = (W @ M).astype(np.float64) if not full_mask else float(Q)
        with np.errstate(invalid="ignore", divide="ignore"):
            # a seed whose present questions all got weight 0 keeps its own mean
            Zu = np.where(den > 0, num / den, 0.0)
        Z = Zu[:, inverse] + ybar                              # (b, J) per-seed replicates
        counts = {g: _seed_counts(rng, b, len(g)) for g in groups} if seed_level else {}
        for k in range(len(masks)):
            for i, c in enumerate(cells):
                j0 = offsets[k * n_cells + i]
                z = Z[:, j0:j0 + c.n_seeds]
                qonly = z.mean(axis=1)
                S = c.n_seeds
                if seed_level and S > 1:
                    res = (counts[tuple(c.seeds)] * z).sum(axis=1) / S
                    f = np.sqrt(S / (S - 1)) if inflate else 1.0
                    out[start:start + b, k * n_cells + i] = qonly + f * (res - qonly)
                else:
                    out[start:start + b, k * n_cells + i] = qonly
        start += b
        if bar is not None:
            bar.update(b)
    if bar is not None:
        bar.close()
    return out


def lower_quantile(sorted_x: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Linear-interpolation quantile (numpy's default, Hyndman & Fan 1996 type 7) of each
    column of an ascending-sorted (B, m) array at per-column probabilities p (m,)."""
    B = sorted_x.shape[0]
    h = (B - 1) * np.clip(p, 0.0, 1.0)
    i = np.floor(h).astype(int)
    i = np.minimum(i, B - 1)
    frac = h - i
    i1 = np.minimum(i + 1, B - 1)
    cols = np.arange(sorted_x.shape[1])
    a, b = sorted_x[i, cols], sorted_x[i1, cols]
    return a + frac * (b - a)


def percentile_interval(reps: np.ndarray, tail: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval [q(tail), q(1-tail)] of each column of reps (B, m).

    The upper end is computed as -q_tail(-x), so negating the replicates negates and swaps
    the interval exactly (swapping A and B flips the sign only)."""
    reps = np.asarray(reps, float)
    if reps.ndim == 1:
        reps = reps[:, None]
    tail = np.broadcast_to(np.asarray(tail, float), (reps.shape[1],))
    s = np.sort(reps, axis=0)
    lo = lower_quantile(s, tail)
    hi = -lower_quantile(-s[::-1], tail)
    return lo, hi
