"""Benchmark: two-level bootstrap, 10,000 resamples over 18 cells x 5 seeds x 500
questions with every pairwise comparison (153 pairs), against scipy.stats.bootstrap on
the same comparisons (one-level, paired over questions; a subset is timed and
extrapolated, since the full scipy run takes minutes).

    python benchmarks/bench_bootstrap.py [--B 10000] [--scipy-pairs 4]
"""
from __future__ import annotations

import argparse
import itertools
import time

import numpy as np
from scipy import stats as sps
from scipy.special import expit

from analysis.bootstrap import CellData, two_level_replicates
from analysis.compare import Contrasts


def make_cells(n_cells=18, S=5, Q=500, K=4, seed=0):
    rng = np.random.default_rng(seed)
    b = rng.normal(0, 1.5, Q)
    cells = []
    for c in range(n_cells):
        a = rng.normal(0, 0.3, S)
        y = rng.binomial(K, expit(0.1 * c - 0.5 + b[:, None] + a[None, :])) / K
        cells.append(CellData(y=y.astype(float), seeds=tuple(range(S))))
    return cells


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--B", type=int, default=10_000)
    ap.add_argument("--scipy-pairs", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    cells = make_cells()
    pairs = list(itertools.combinations(range(len(cells)), 2))

    times_rep, times_all = [], []
    for r in range(args.repeats):
        t0 = time.perf_counter()
        reps = two_level_replicates(cells, B=args.B, rng_seed=r, progress=False)
        t1 = time.perf_counter()
        con = Contrasts(cells, reps)
        res = [con.evaluate({i: 1.0}) for i in range(len(cells))]
        res += [con.evaluate({i: 1.0, j: -1.0}) for i, j in pairs]
        t2 = time.perf_counter()
        times_rep.append(t1 - t0)
        times_all.append(t2 - t0)
    ours = min(times_all)
    print(f"two-level bootstrap, B={args.B}, 18 cells x 5 seeds x 500 questions")
    print(f"  replicates only:                    {min(times_rep):.3f} s (best of "
          f"{args.repeats})")
    print(f"  + 18 cell CIs + {len(pairs)} pairwise comparisons: {ours:.3f} s "
          f"(target <= 1 s: {'OK' if ours <= 1 else 'MISSED'})")

    # scipy reference: one-level paired bootstrap over questions of seed-averaged means
    qmeans = [c.y.mean(axis=1) for c in cells]
    sub = pairs[:args.scipy_pairs]

    def diff(x, y, axis=-1):
        return x.mean(axis=axis) - y.mean(axis=axis)

    sps.bootstrap((qmeans[0], qmeans[1]), diff, paired=True, n_resamples=100,
                  vectorized=True, random_state=0)            # warm-up
    out = {}
    for method in ("percentile", "BCa"):
        t0 = time.perf_counter()
        for i, j in sub:
            sps.bootstrap((qmeans[i], qmeans[j]), diff, paired=True, n_resamples=args.B,
                          method=method, vectorized=True, random_state=0)
        per = (time.perf_counter() - t0) / len(sub)
        out[method] = per * len(pairs)
        print(f"scipy.stats.bootstrap ({method}, paired, one level): {per:.3f} s per "
              f"comparison x {len(pairs)} pairs = {out[method]:.1f} s (extrapolated from "
              f"{len(sub)})")
    for method, t in out.items():
        print(f"ratio scipy[{method}] / ours: {t / ours:.0f}x")


if __name__ == "__main__":
    main()
