"""Benchmark: the statistics of 18 cells x 5 seeds x 500 questions (18 cell intervals and
all 153 pairwise comparisons, variance components and t intervals of analysis.stats)
against scipy.stats.bootstrap on the same comparisons (one-level, paired over questions;
a subset is timed and extrapolated, since the full scipy run takes minutes).

    python benchmarks/bench_bootstrap.py [--B 10000] [--scipy-pairs 4]
"""
from __future__ import annotations

import argparse
import itertools
import time

import numpy as np
from scipy import stats as sps
from scipy.special import expit

from analysis.compare import evaluate
from analysis.estimates import CellData


def make_cells(n_cells=18, S=5, Q=500, K=4, seed=0):
    rng = np.random.default_rng(seed)
    b = rng.normal(0, 1.5, Q)
    cells = []
    for c in range(n_cells):
        a = rng.normal(0, 0.3, S)
        y = rng.binomial(K, expit(0.1 * c - 0.5 + b[:, None] + a[None, :])) / K
        cells.append(CellData(y=y.astype(float), questions=list(range(Q)),
                              seeds=tuple(range(S))))
    return cells


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--B", type=int, default=10_000)
    ap.add_argument("--scipy-pairs", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    cells = make_cells()
    pairs = list(itertools.combinations(range(len(cells)), 2))
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        [evaluate(cells, {i: 1.0}) for i in range(len(cells))]
        [evaluate(cells, {i: 1.0, j: -1.0}) for i, j in pairs]
        times.append(time.perf_counter() - t0)
    ours = min(times)
    print(f"18 cells x 5 seeds x 500 questions: 18 cell CIs + {len(pairs)} pairwise "
          f"comparisons in {ours:.3f} s (best of {args.repeats})")

    qmeans = [c.y.mean(axis=1) for c in cells]
    sub = pairs[:args.scipy_pairs]

    def diff(x, y, axis=-1):
        return x.mean(axis=axis) - y.mean(axis=axis)

    sps.bootstrap((qmeans[0], qmeans[1]), diff, paired=True, n_resamples=100,
                  vectorized=True, random_state=0)            # warm-up
    t0 = time.perf_counter()
    for i, j in sub:
        sps.bootstrap((qmeans[i], qmeans[j]), diff, paired=True, n_resamples=args.B,
                      method="percentile", vectorized=True, random_state=0)
    per = (time.perf_counter() - t0) / len(sub)
    print(f"scipy.stats.bootstrap (percentile, paired, one level, B={args.B}): {per:.3f} s "
          f"per comparison x {len(pairs)} = {per * len(pairs):.1f} s (extrapolated)")
    print(f"ratio scipy / ours: {per * len(pairs) / ours:.0f}x")


if __name__ == "__main__":
    main()
