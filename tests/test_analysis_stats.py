"""Statistics of the analysis package: coverage, pairing, multiplicity, small formulas."""
import math

import numpy as np
import pytest
from scipy import stats as sps
from scipy.special import expit
from statsmodels.stats.multitest import multipletests

from analysis import stats as st
from analysis.bootstrap import (CellData, lower_quantile, percentile_interval,
                                question_weights, two_level_replicates)
from analysis.compare import Contrasts

P_VECTORS = [
    np.array([0.01, 0.04, 0.03, 0.005, 0.2, 0.5, 0.04, 1.0]),
    np.array([0.001, 0.001, 0.5, 0.049, 0.051, 0.0, 0.9999]),
    np.array([0.3]),
    np.linspace(0.0005, 0.6, 25)[::-1],
    np.random.default_rng(3).uniform(0, 0.2, 40),
]


@pytest.mark.parametrize("p", P_VECTORS)
def test_holm_equals_statsmodels(p):
    np.testing.assert_array_equal(st.holm(p), multipletests(p, method="holm")[1])


@pytest.mark.parametrize("p", P_VECTORS)
def test_bh_equals_scipy(p):
    np.testing.assert_array_equal(st.benjamini_hochberg(p),
                                  sps.false_discovery_control(p, method="bh"))


def test_holm_and_bh_handle_empty():
    assert st.holm([]).size == 0 and st.benjamini_hochberg([]).size == 0


# ---------------------------------------------------------------- coverage
def _simulate(rng, R, S=5, Q=200, K=1, beta=0.0, sa=0.5, sb=1.5):
    """R independent cells; truth = E over seeds and questions of expit(beta + a + b)."""
    x, w = np.polynomial.hermite_e.hermegauss(80)
    truth = float((w * expit(beta + math.hypot(sa, sb) * x)).sum() / w.sum())
    cells = []
    for r in range(R):
        a, b = rng.normal(0, sa, S), rng.normal(0, sb, Q)
        y = rng.binomial(K, expit(beta + b[:, None] + a[None, :])) / K
        cells.append(CellData(y=y.astype(float), seeds=tuple(range(r * S, (r + 1) * S))))
    return cells, truth


def _coverage(cells, truth, B, seed_level=True):
    reps = two_level_replicates(cells, B=B, rng_seed=1, seed_level=seed_level,
                                progress=False)
    con = Contrasts(cells, reps)
    boot = analytic = 0
    for i in range(len(cells)):
        r = con.evaluate({i: 1.0})
        boot += r["ci"][0] <= truth <= r["ci"][1]
        analytic += r["ci_analytic"][0] <= truth <= r["ci_analytic"][1]
    return boot / len(cells), analytic / len(cells)


def test_two_level_intervals_cover_truth_question_only_does_not():
    # seeds carry real variance (logit sd 0.5), as in DESIGN.md sec. 4: 5 seeds x 200 q
    cells, truth = _simulate(np.random.default_rng(2024), R=400)
    two_level, analytic = _coverage(cells, truth, B=1000)
    reps = two_level_replicates(cells, B=1000, rng_seed=1, seed_level=False,
                                progress=False)
    lo, hi = percentile_interval(reps, 0.025)
    question_only = float(np.mean((lo <= truth) & (truth <= hi)))
    # Monte Carlo SE of a coverage near 0.95 over 400 replications is about 0.011
    assert two_level >= 0.93, two_level
    assert analytic >= 0.93, analytic
    assert question_only <= 0.80, question_only
    assert two_level - question_only >= 0.15


@pytest.mark.heavy
def test_coverage_heavy_cells_and_differences():
    rng = np.random.default_rng(7)
    cells, truth = _simulate(rng, R=2000)
    two_level, analytic = _coverage(cells, truth, B=2000)
    assert two_level >= 0.93 and analytic >= 0.93
    # paired difference of two cells with equal truth, same questions, different seeds
    hits = 0
    for r in range(400):
        b = rng.normal(0, 1.5, 200)
        pair = []
        for k in range(2):
            a = rng.normal(0, 0.5, 5)
            y = rng.binomial(1, expit(b[:, None] + a[None, :])).astype(float)
            pair.append(CellData(y=y, seeds=tuple(range(5 * k, 5 * k + 5))))
        con = Contrasts(pair, two_level_replicates(pair, B=1000, rng_seed=r, progress=False))
        lo, hi = con.evaluate({0: 1.0, 1: -1.0})["ci"]
        hits += lo <= 0 <= hi
    assert hits / 400 >= 0.93


# ---------------------------------------------------------------- pairing
def _cells(rng, identical_pair=True):
    Q, S = 60, 4
    b = rng.normal(0, 1, Q)
    ys = [rng.binomial(2, expit(b[:, None] + rng.normal(0, .4, S))) / 2 for _ in range(3)]
    if identical_pair:
        ys[1] = ys[0].copy()
    return [CellData(y=y, seeds=(0, 1, 2, 3)) for y in ys]


def test_identical_cells_give_exact_zero_and_zero_width():
    cells = _cells(np.random.default_rng(0))
    con = Contrasts(cells, two_level_replicates(cells, B=2000, rng_seed=5, progress=False))
    r = con.evaluate({0: 1.0, 1: -1.0})
    assert r["estimate"] == 0.0
    assert r["ci"] == [0.0, 0.0] and r["ci_analytic"] == [0.0, 0.0]
    assert r["se_boot"] == 0.0 and r["p"] == 1.0 and r["p_boot"] == 1.0
    other = con.evaluate({0: 1.0, 2: -1.0})
    assert other["ci"][1] - other["ci"][0] > 0.01


def test_swapping_a_and_b_flips_the_sign_only():
    cells = _cells(np.random.default_rng(1), identical_pair=False)
    cells[2] = CellData(y=cells[2].y[:, :3], seeds=(5, 6, 7))     # unpaired seeds too
    con = Contrasts(cells, two_level_replicates(cells, B=3000, rng_seed=9, progress=False))
    for a, b in ((0, 1), (0, 2)):
        ab, ba = con.evaluate({a: 1.0, b: -1.0}), con.evaluate({b: 1.0, a: -1.0})
        assert ab["estimate"] != 0 and ba["estimate"] == -ab["estimate"]
        assert ba["ci"] == [-ab["ci"][1], -ab["ci"][0]]
        assert ba["ci_analytic"] == pytest.approx([-ab["ci_analytic"][1],
                                                   -ab["ci_analytic"][0]], abs=1e-15)
        for k in ("p", "p_boot", "se_boot", "se_analytic", "df", "mde"):
            assert ba[k] == ab[k], k


def test_question_weights_are_shared_and_paired():
    """A constant shift of one cell on every question and seed has a zero-width interval:
    the comparison is paired on questions and on seeds."""
    rng = np.random.default_rng(4)
    y = rng.binomial(1, 0.5, (80, 3)).astype(float) * 0.5
    cells = [CellData(y=y, seeds=(0, 1, 2)), CellData(y=y + 0.25, seeds=(0, 1, 2))]
    con = Contrasts(cells, two_level_replicates(cells, B=1000, progress=False))
    r = con.evaluate({1: 1.0, 0: -1.0})
    assert r["estimate"] == pytest.approx(0.25)
    assert r["ci"] == pytest.approx([0.25, 0.25], abs=1e-6)


def test_seed_inflation_makes_seed_variance_unbiased():
    """No question noise: Var* of the cell mean equals s^2/S with the sqrt(S/(S-1))
    inflation and (S-1)/S s^2/S without it."""
    seeds = np.array([0.2, 0.5, 0.35, 0.6])
    y = np.tile(seeds, (50, 1))
    c = [CellData(y=y, seeds=(0, 1, 2, 3))]
    target = seeds.var(ddof=1) / 4
    v = two_level_replicates(c, B=40000, rng_seed=0, progress=False)[:, 0].var()
    v0 = two_level_replicates(c, B=40000, rng_seed=0, inflate=False, progress=False)[:, 0].var()
    assert v == pytest.approx(target, rel=0.03)
    assert v0 == pytest.approx(target * 3 / 4, rel=0.03)


def test_single_seed_bootstrap_is_question_only():
    y = np.random.default_rng(2).binomial(1, 0.4, (100, 1)).astype(float)
    c = [CellData(y=y, seeds=(0,))]
    a = two_level_replicates(c, B=500, rng_seed=3, progress=False)
    b = two_level_replicates(c, B=500, rng_seed=3, seed_level=False, progress=False)
    np.testing.assert_array_equal(a, b)
    comps = st.cell_components(y)
    assert len(comps) == 1 and comps[0][1] == 99


def test_missing_questions_use_present_ones():
    y = np.array([[1.0, 0.0], [np.nan, 1.0], [0.0, 0.0]])
    reps = two_level_replicates([CellData(y=y, seeds=(0, 1))], B=200, progress=False)
    assert np.isfinite(reps).all()
    con = Contrasts([CellData(y=y, seeds=(0, 1))], reps)
    assert con.means[0] == pytest.approx((0.5 + 1 / 3) / 2)


# ---------------------------------------------------------------- small formulas
def test_satterthwaite_equals_welch_df():
    a, b = np.array([1, 2, 3.5, 2.2]), np.array([2, 5, 6, 9, 4.1])
    v, df = st.satterthwaite([(a.var(ddof=1) / a.size, a.size - 1),
                              (b.var(ddof=1) / b.size, b.size - 1)])
    t = sps.ttest_ind(a, b, equal_var=False)
    assert df == pytest.approx(t.df, rel=1e-12)
    assert (a.mean() - b.mean()) / math.sqrt(v) == pytest.approx(t.statistic, rel=1e-12)


def test_prob_improvement_is_mann_whitney():
    a, b = np.array([0.5, 0.6, 0.55, 0.6]), np.array([0.4, 0.6, 0.52])
    u = sps.mannwhitneyu(a, b).statistic
    assert st.prob_improvement(a, b) == pytest.approx(u / 12)
    assert st.prob_improvement(a, b) + st.prob_improvement(b, a) == pytest.approx(1.0)


def test_mde_and_p_values():
    assert st.mde(0.01, math.inf) == pytest.approx((1.959964 + 0.841621) * 0.01, rel=1e-6)
    assert st.mde(0.01, 4) == pytest.approx((2.776445 + 0.940965) * 0.01, rel=1e-6)
    assert st.p_value(0.0196, 0.01, math.inf) == pytest.approx(0.05, rel=1e-3)
    assert st.p_value(0.02776445, 0.01, 4) == pytest.approx(0.05, rel=1e-5)
    assert st.t_scale(0.05, math.inf) == 1.0 and st.t_scale(0.05, 4) > 1.4


def test_quantiles_match_numpy_and_weights_sum_to_q():
    x = np.random.default_rng(0).normal(size=(1001, 3))
    s = np.sort(x, axis=0)
    p = np.array([0.025, 0.5, 0.9])
    np.testing.assert_allclose(lower_quantile(s, p),
                               [np.quantile(x[:, j], p[j]) for j in range(3)], rtol=1e-12)
    w = question_weights(np.random.default_rng(0), 50, 37)
    assert w.shape == (50, 37) and (w.sum(axis=1) == 37).all()


def test_anova_components_recover_simulated_variances():
    rng = np.random.default_rng(11)
    y = 0.5 + rng.normal(0, 0.1, 400)[:, None] + rng.normal(0, 0.05, 8) \
        + rng.normal(0, 0.2, (400, 8))
    c = st.anova_components(y)
    assert c["sigma2_question"] == pytest.approx(0.01, rel=0.25)
    assert c["sigma2_resid"] == pytest.approx(0.04, rel=0.05)
    assert 0 < c["sigma2_seed"] < 0.01
