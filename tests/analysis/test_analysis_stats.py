"""Statistics of the analysis package: estimators, intervals, verdicts, multiplicity,
planning (calibration against simulated truths: test_analysis_calibration.py)."""
import math

import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

from analysis import stats as st
from analysis.compare import evaluate, simultaneous
from analysis.estimates import CellData

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


# ---------------------------------------------------------------- estimators
def _y(rng, Q=200, S=4, sa=0.05, sq=0.15, se=0.2):
    return 0.5 + rng.normal(0, sq, (Q, 1)) + rng.normal(0, sa, S) + rng.normal(0, se, (Q, S))


def test_cell_variance_is_the_anova_unbiased_combination():
    """Var-hat of a cell mean = (MS_seed + MS_question - MS_resid) / (S Q), the expected-
    mean-square combination that counts the residual once."""
    y = _y(np.random.default_rng(0))
    Q, S = y.shape
    ms_s, ms_e = st.mean_squares(y)
    ms_q = S * np.var(y.mean(axis=1), ddof=1)
    e = st.contrast([y], [1.0])
    assert float(e.var) == pytest.approx((ms_s + ms_q - ms_e) / (S * Q), rel=1e-12)
    assert float(e.estimate) == pytest.approx(y.mean()) and e.seed_df == S - 1


def test_components_recover_simulated_variances():
    rng = np.random.default_rng(11)
    y = 0.5 + rng.normal(0, 0.1, 400)[:, None] + rng.normal(0, 0.05, 8) \
        + rng.normal(0, 0.2, (400, 8))
    c = st.components(y)
    assert c["sigma2_question"] == pytest.approx(0.01, rel=0.25)
    assert c["sigma2_resid"] == pytest.approx(0.04, rel=0.05)
    assert 0 < c["sigma2_seed"] < 0.01


def test_variance_is_unbiased_in_repeated_sampling():
    """Mean of Var-hat over 2000 replications equals the true variance of the estimate,
    sigma2_e/(QS) + sigma2_seed/S + sigma2_question/Q (a two-level bootstrap counts the
    residual about three times)."""
    rng = np.random.default_rng(3)
    R, Q, S = 2000, 100, 3
    y = rng.normal(0, 0.3, (R, Q, S)) + rng.normal(0, 0.05, (R, 1, S)) \
        + rng.normal(0, 0.2, (R, Q, 1))
    e = st.contrast([y], [1.0])
    true = 0.3 ** 2 / (Q * S) + 0.05 ** 2 / S + 0.2 ** 2 / Q
    assert np.mean(e.var) == pytest.approx(true, rel=0.04)
    assert np.var(e.estimate) == pytest.approx(true, rel=0.1)


def _cell(y, qs=None, seeds=None):
    Q, S = y.shape
    return CellData(y=y, questions=list(range(Q)) if qs is None else qs,
                    seeds=tuple(range(S)) if seeds is None else seeds)


def test_swapping_a_and_b_flips_the_sign_only():
    rng = np.random.default_rng(1)
    data = [_cell(_y(rng, S=3)), _cell(_y(rng, S=4))]
    ab, ba = evaluate(data, {0: 1.0, 1: -1.0}), evaluate(data, {1: 1.0, 0: -1.0})
    assert ab["estimate"] == pytest.approx(-ba["estimate"], abs=1e-15)
    assert ab["ci"] == pytest.approx([-ba["ci"][1], -ba["ci"][0]], abs=1e-14)
    for k in ("p", "se", "df"):
        assert ab[k] == pytest.approx(ba[k], rel=1e-12)


def test_interval_and_p_value_never_disagree():
    rng = np.random.default_rng(5)
    est, se = rng.normal(0, 1, 5000), rng.uniform(0.1, 1, 5000)
    df = rng.choice([1.5, 3.0, 8.0, 60.0, np.inf], 5000)
    lo, hi = st.interval(est, se, df, 0.05)
    p = st.p_value(est, se, df)
    np.testing.assert_array_equal(p < 0.05, (lo > 0) | (hi < 0))


def test_zero_se_gives_no_p_unless_no_difference():
    assert np.isnan(st.p_value(0.1, 0.0, 5.0)) and st.p_value(0.0, 0.0, 5.0) == 1.0


def test_one_seed_gives_question_only_interval_and_no_p():
    rng = np.random.default_rng(2)
    data = [_cell(_y(rng, S=1)), _cell(_y(rng, S=3))]
    r = evaluate(data, {0: 1.0, 1: -1.0})
    assert not r["inferential"] and r["p"] is None and r["ci"][0] < r["ci"][1]
    assert st.verdict(r["estimate"], r["se"], r["df"], r["p"], 0.03) is None


def test_disjoint_questions_are_not_compared_and_unequal_use_the_intersection():
    rng = np.random.default_rng(4)
    a, b = _y(rng, Q=40, S=3), _y(rng, Q=40, S=3)
    data = [_cell(a, qs=list(range(40))), _cell(b, qs=list(range(40, 80)))]
    assert evaluate(data, {0: 1.0, 1: -1.0}) == {"estimate": None, "n_questions": 0,
                                                 "inferential": False}
    data = [_cell(a, qs=list(range(40))), _cell(b, qs=list(range(20, 60)))]
    r = evaluate(data, {0: 1.0, 1: -1.0})
    assert r["n_questions"] == 20
    assert r["estimate"] == pytest.approx(a[20:].mean() - b[:20].mean())


@pytest.mark.parametrize("est,se,p_adj,expected", [
    (0.05, 0.01, 0.001, "better"), (-0.05, 0.01, 0.001, "worse"),
    (0.001, 0.005, 0.8, "equivalent"), (0.01, 0.02, 0.6, "inconclusive"),
    (0.02, 0.01, 0.2, "inconclusive")])
def test_verdicts(est, se, p_adj, expected):
    assert st.verdict(est, se, 30.0, p_adj, sesoi=0.03) == expected
    # a metric where lower is better swaps only the two directional verdicts
    flipped = {"better": "worse", "worse": "better"}.get(expected, expected)
    assert st.verdict(est, se, 30.0, p_adj, sesoi=0.03, lower_is_better=True) == flipped


def test_simultaneous_intervals_between_marginal_and_bonferroni():
    rng = np.random.default_rng(8)
    base = _y(rng, S=5)
    data = [_cell(base)] + [_cell(_y(rng, S=5)) for _ in range(4)]
    rows = []
    for i in range(1, 5):
        r = evaluate(data, {i: 1.0, 0: -1.0})
        rows.append({**r, "delta": r["estimate"], "ia": i})
    sim = simultaneous(rows, data, 0, 0.05, 20000, 0)
    df = min(r["df"] for r in rows)              # the family's reference df
    for r, s in zip(rows, sim):
        marginal = r["ci"][1] - r["ci"][0]
        bonf = 2 * float(st.t_quantile(1 - 0.05 / 8, df)) * r["se"]
        assert marginal < s[1] - s[0] < bonf * 1.01


# ---------------------------------------------------------------- small formulas
def test_satterthwaite_equals_welch_df():
    a, b = np.array([1, 2, 3.5, 2.2]), np.array([2, 5, 6, 9, 4.1])
    df = st.satterthwaite([(a.var(ddof=1) / a.size, a.size - 1),
                           (b.var(ddof=1) / b.size, b.size - 1)])
    assert float(df) == pytest.approx(sps.ttest_ind(a, b, equal_var=False).df, rel=1e-12)


def test_prob_improvement_is_mann_whitney():
    a, b = np.array([0.5, 0.6, 0.55, 0.6]), np.array([0.4, 0.6, 0.52])
    u = sps.mannwhitneyu(a, b).statistic
    assert st.prob_improvement(a, b) == pytest.approx(u / 12)
    assert st.prob_improvement(a, b) + st.prob_improvement(b, a) == pytest.approx(1.0)


def test_mde_and_p_values():
    assert float(st.mde(0.01, math.inf)) == pytest.approx((1.959964 + 0.841621) * 0.01,
                                                          rel=1e-6)
    assert float(st.mde(0.01, 4)) == pytest.approx((2.776445 + 0.940965) * 0.01, rel=1e-6)
    assert float(st.p_value(0.0196, 0.01, math.inf)) == pytest.approx(0.05, rel=1e-3)
    assert float(st.p_value(0.02776445, 0.01, 4)) == pytest.approx(0.05, rel=1e-5)


# ---------------------------------------------------------------- planning
COMPS = [{"sigma2_seed": 1e-3, "tau2": 0.02, "sigma2_resid": 0.15},
         {"sigma2_seed": 1e-5, "tau2": 0.03, "sigma2_resid": 0.2},
         {"sigma2_seed": 4e-3, "tau2": 0.0, "sigma2_resid": 0.1}]


@pytest.mark.parametrize("comps", COMPS)
def test_planning_tables_are_monotone(comps):
    seeds, qs = [2, 3, 5, 10, 20], [50, 100, 200, 500, 1000, 5000]
    m = st.mde_grid(seeds, qs, comps)
    assert (np.diff(m, axis=0) <= 0).all() and (np.diff(m, axis=1) <= 0).all()
    need = [st.seeds_needed(0.05, q, comps) or 99 for q in qs]
    assert all(a >= b for a, b in zip(need, need[1:]))
    qneed = [st.questions_needed(0.05, s, comps) or 10 ** 9 for s in seeds]
    assert all(a >= b for a, b in zip(qneed, qneed[1:]))


def test_planned_variance_matches_simulation():
    """planned() is the variance of a two-cell difference under the components."""
    rng = np.random.default_rng(9)
    R, Q, S = 4000, 50, 3
    c = {"sigma2_seed": 0.002, "tau2": 0.01, "sigma2_resid": 0.05}
    u = rng.normal(0, math.sqrt(c["tau2"]), (R, Q, 1))
    ya = rng.normal(0, math.sqrt(c["sigma2_seed"]), (R, 1, S)) + u \
        + rng.normal(0, math.sqrt(c["sigma2_resid"]), (R, Q, S))
    yb = rng.normal(0, math.sqrt(c["sigma2_seed"]), (R, 1, S)) \
        + rng.normal(0, math.sqrt(c["sigma2_resid"]), (R, Q, S))
    d = ya.mean(axis=(1, 2)) - yb.mean(axis=(1, 2))
    assert st.planned(S, Q, c)[0] == pytest.approx(np.var(d), rel=0.06)


def test_constant_cells_that_differ_get_no_p_value():
    data = [_cell(np.ones((20, 3))), _cell(np.zeros((20, 3)))]
    r = evaluate(data, {0: 1.0, 1: -1.0})
    assert r["estimate"] == 1.0 and r["se"] == 0.0 and r["p"] is None


def test_pocock_nominal_matches_pocock_1977_table_and_controls_error_by_simulation():
    from analysis.stats import pocock_nominal
    # Pocock (1977), Table 1 (two-sided 0.05): 2 looks 0.0294, 3 looks 0.0221, 5 looks 0.0158
    assert pocock_nominal(1) == pytest.approx(0.05, abs=1e-6)
    assert pocock_nominal(2) == pytest.approx(0.0294, abs=1e-4)
    assert pocock_nominal(3) == pytest.approx(0.0221, abs=1e-4)
    assert pocock_nominal(5) == pytest.approx(0.0158, abs=1e-4)
    # under the null, rejecting at either of two equally spaced looks happens 5% of the time
    rng = np.random.default_rng(0)
    inc = rng.standard_normal((200_000, 2))
    z1, z2 = inc[:, 0], inc.sum(axis=1) / np.sqrt(2)
    c = sps.norm.isf(pocock_nominal(2) / 2)
    reject = (np.abs(z1) > c) | (np.abs(z2) > c)
    assert reject.mean() == pytest.approx(0.05, abs=0.002)
