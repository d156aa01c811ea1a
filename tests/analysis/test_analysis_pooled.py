"""Pooled seed variance across the cells of a design, its calibration under Gaussian,
bimodal and heavy-tailed seed effects, and the exact permutation test over seed labels
(issue 27, item 1)."""
import itertools

import numpy as np
import pytest

from analysis import calibration as cal
from analysis import stats as st


def _cells(rng, n=3, Q=40, S=3, sd_seed=0.1):
    return [0.5 + rng.normal(0, 0.1, (Q, 1)) + rng.normal(0, sd_seed, S)
            + rng.normal(0, 0.2, (Q, S)) for _ in range(n)]


def test_pool_is_the_df_weighted_mean_of_the_cells_moment_estimates():
    rng = np.random.default_rng(0)
    ys = _cells(rng) + [_cells(rng, n=1, S=5)[0], _cells(rng, n=1, S=1)[0]]
    p = st.pool(ys)
    parts = [(y.shape[1] - 1, *st.mean_squares(y)) for y in ys if y.shape[1] > 1]
    assert p.nu == 2 + 2 + 2 + 4                      # the one-seed cell adds nothing
    assert float(p.v) == pytest.approx(sum(n * ms / 40 for n, ms, _ in parts) / p.nu)
    assert float(p.r) == pytest.approx(sum(n * me / 40 for n, _, me in parts) / p.nu)
    # v - r: the pooled sigma2_seed, the nu-weighted mean of the per-cell estimates
    per_cell = [(n, (ms - me) / 40) for n, ms, me in parts]
    assert float(p.v - p.r) == pytest.approx(sum(n * s for n, s in per_cell) / p.nu)


def test_pooled_contrast_uses_the_pooled_seed_term_and_its_df():
    rng = np.random.default_rng(1)
    ys = _cells(rng, n=4)
    p = st.pool(ys)
    e = st.contrast(ys[:2], [1.0, -1.0], pooled=p)
    z = ys[0].mean(axis=1) - ys[1].mean(axis=1)
    q_part = np.var(z, ddof=1) / 40
    assert float(e.var) == pytest.approx(q_part + (1 / 3 + 1 / 3) * float(p.v - p.r))
    assert e.seed_df == 8 and float(e.df) > float(st.contrast(ys[:2], [1.0, -1.0]).df)


def test_welch_contrast_covers_where_arms_differ_in_seed_variance():
    """Cell 1's seeds vary 4x as much (SD) as cell 0's: each cell's own seed variance
    (the default, no pretest) covers at its level (800 sweeps, Monte Carlo SE 0.008)."""
    rng = np.random.default_rng([46, 7])
    d = cal.Design(S=5, Q=200, K=1, n_cells=2, seed_scale=4.0)
    r = cal.difference_study(rng, 800, d, cal.REGIMES["seed"], pooled=False)
    assert 0.93 <= r["coverage"] <= 0.97, r
    assert 0.9 <= r["se_ratio"] <= 1.1, r


def test_permutation_p_equals_a_hand_enumeration_3_vs_3():
    a, b = [0.42, 0.55, 0.61], [0.30, 0.35, 0.52]
    obs = abs(np.mean(a) - np.mean(b))
    x = a + b
    extreme = 0
    for g in itertools.combinations(range(6), 3):          # all 20 relabellings
        ga = [x[i] for i in g]
        gb = [x[i] for i in range(6) if i not in g]
        extreme += abs(np.mean(ga) - np.mean(gb)) >= obs - 1e-12
    r = st.permutation_test(a, b)
    assert r["n_splits"] == 20 and r["p"] == extreme / 20 == 0.2
    assert r["min_p"] == 0.1                               # 2 of 20: a split and its mirror
    assert st.permutation_test([3, 4, 5], [0, 1, 2])["p"] == 0.1
    assert st.permutation_test([3, 4, 5, 6], [0, 1])["min_p"] == pytest.approx(1 / 15)


def test_permutation_p_of_identical_groups_is_one():
    assert st.permutation_test([0.5, 0.5], [0.5, 0.5])["p"] == 1.0


@pytest.mark.parametrize("dist", cal.SEED_DISTS)
@pytest.mark.parametrize("S", [3, 5, 10])
def test_pooled_difference_intervals_cover_under_each_seed_distribution(dist, S):
    """Seed-dominated regime, a 3-cell design, seed variance pooled: coverage of the
    cell 1 - cell 0 interval in [0.93, 0.97] (800 sweeps, Monte Carlo SE 0.008) at S = 5
    and 10; at S = 3 reported (docs/statistics.md) and checked on the same band here."""
    rng = np.random.default_rng([28, S, cal.SEED_DISTS.index(dist)])
    r = cal.difference_study(rng, 800, cal.Design(S=S, Q=200, K=1, n_cells=3, seeds=dist),
                             cal.REGIMES["seed"], pooled=True)
    assert 0.93 <= r["coverage"] <= 0.97, r
    assert 0.9 <= r["se_ratio"] <= 1.1, r


def test_seed_distributions_have_the_stated_variance():
    rng = np.random.default_rng(3)
    for dist in cal.SEED_DISTS:
        a = cal.seed_effects(rng, dist, 0.5, 200_000)
        assert np.var(a) == pytest.approx(0.25, rel=0.05), dist
    assert set(np.unique(cal.seed_effects(rng, "bimodal", 0.5, 100))) == {-0.5, 0.5}


@pytest.mark.heavy
@pytest.mark.parametrize("dist", cal.SEED_DISTS)
@pytest.mark.parametrize("regime", ["seed", "question"])
@pytest.mark.parametrize("S", [3, 5, 10])
def test_pooled_calibration_heavy(dist, regime, S):
    rng = np.random.default_rng([7, S, cal.SEED_DISTS.index(dist)])
    r = cal.difference_study(rng, 4000, cal.Design(S=S, Q=200, K=1, n_cells=3, seeds=dist),
                             cal.REGIMES[regime], pooled=True)
    assert 0.94 <= r["coverage"] <= 0.965 and 0.95 <= r["se_ratio"] <= 1.05, r
