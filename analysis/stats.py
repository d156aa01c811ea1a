"""Inference for the crossed seeds x questions design (model, estimators and the
simulation study that calibrates them: docs/statistics.md).

A cell's score y[q, s] is the mean over the K samples of question q for training seed s.
Model (per cell k): y = mu_k + a_ks + b_kq + e_ksq, seeds independent across cells,
question effects b_kq correlated across cells (same question), e the seed x question
residual with the sampling noise. Var of a contrast sum_k c_k ybar_k over Q shared
questions and S_k seeds is estimated by the method of moments of the two-way ANOVA
(Searle, Casella & McCulloch 1992, sec. 4.5; the pigeonhole design of Owen 2007,
Ann. Appl. Stat. 1:246, sec. 2): every term counted once, the residual not three times.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import stats as sps
from scipy.optimize import brentq

# The df use max(MS_seed nu / chi2_{nu, SEED_BOUND}, MS_resid) in place of MS_seed (at 0.5:
# the median-unbiased scale-up), so that seeds agreeing by chance do not inflate the df;
# calibrated by the simulation study of docs/statistics.md (0.25 and 0.1 over-cover).
SEED_BOUND = 0.5
# Var-hat is floored at FLOOR x its question term when the seed term is negative by chance
FLOOR = 0.5


# ---------------------------------------------------------------- variance components
def mean_squares(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Seed and residual mean squares of complete y (..., Q, S), S >= 2, Q >= 2: the
    two-way ANOVA without replication (Searle et al. 1992, Table 4.7)."""
    Q, S = y.shape[-2:]
    g = y.mean(axis=(-2, -1), keepdims=True)
    sm = y.mean(axis=-2, keepdims=True)
    qm = y.mean(axis=-1, keepdims=True)
    ms_seed = Q * ((sm - g) ** 2).sum(axis=(-2, -1)) / (S - 1)
    ms_resid = ((y - sm - qm + g) ** 2).sum(axis=(-2, -1)) / ((S - 1) * (Q - 1))
    return ms_seed, ms_resid


def components(y: np.ndarray) -> dict | None:
    """sigma2_seed, sigma2_question, sigma2_resid of complete y (Q, S) by the method of
    moments (expected mean squares; Searle et al. 1992, eq. 4.38), clamped at 0."""
    Q, S = y.shape
    if S < 2 or Q < 2:
        return None
    ms_s, ms_e = (float(v) for v in mean_squares(y))
    ms_q = S * float(np.var(y.mean(axis=1), ddof=1))
    return {"sigma2_seed": max(0.0, (ms_s - ms_e) / Q),
            "sigma2_question": max(0.0, (ms_q - ms_e) / S), "sigma2_resid": ms_e}


def satterthwaite(terms) -> np.ndarray:
    """Effective df of sum_i w_i M_i for mean squares M_i with df nu_i, terms given as
    (w_i M_i, nu_i): (sum w M)^2 / sum (w M)^2 / nu (Satterthwaite 1946, eq. 6)."""
    num = sum(t for t, _ in terms)
    den = sum(t * t / nu for t, nu in terms)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num * num / np.where(den > 0, den, 1.0), np.inf)


@dataclass
class Estimate:
    """A contrast: estimate, variance, df, and the seed df it rests on (0: one seed)."""
    estimate: np.ndarray
    var: np.ndarray
    df: np.ndarray
    seed_df: int

    @property
    def se(self) -> np.ndarray:
        return np.sqrt(self.var)

    @property
    def inferential(self) -> bool:
        """Seeds were replicated in every cell of the contrast."""
        return self.seed_df > 0


@dataclass
class Pool:
    """Seed variance pooled over the cells of a design (each cell k with S_k >= 2 seeds):
    v = sum_k nu_k V_k / nu with V_k = MS_seed,k / Q_k (the variance of the cell's seed
    means) and r = sum_k nu_k MS_resid,k / (Q_k nu), nu = sum_k (S_k - 1); v - r estimates
    sigma2_seed, assumed equal in every cell (the pooled within-group mean square of a
    one-way ANOVA, Searle et al. 1992, sec. 3.5)."""
    v: np.ndarray
    r: np.ndarray
    nu: int

    @property
    def sigma2_seed(self) -> np.ndarray:
        return np.maximum(self.v - self.r, 0.0)


def pool(ys: list[np.ndarray]) -> Pool | None:
    """The Pool of complete ys[k] (..., Q_k, S_k); cells with S < 2 or Q < 2 add nothing;
    None when no cell has two seeds."""
    v = r = 0.0
    nu = 0
    for y in ys:
        Q, S = y.shape[-2:]
        if S < 2 or Q < 2:
            continue
        ms_s, ms_e = mean_squares(y)
        v, r, nu = v + (S - 1) * ms_s / Q, r + (S - 1) * ms_e / Q, nu + S - 1
    return None if nu == 0 else Pool(v=np.asarray(v / nu), r=np.asarray(r / nu), nu=nu)


def contrast(ys: list[np.ndarray], coefs, bound: float = SEED_BOUND,
             pooled: Pool | None = None) -> Estimate:
    """sum_k c_k ybar_k for complete ys[k] (..., Q, S_k) on the same Q questions.

    Var-hat = var_q(sum_k c_k ybar_kq) / Q + sum_k c_k^2 (MS_seed,k - MS_resid,k) / (Q S_k):
    the first term carries the question and residual variance, the second the seed
    variance, each counted once (expected mean squares, Searle et al. 1992, eq. 4.38);
    unbiased, floored at FLOOR x the first term. df: Satterthwaite (1946, eq. 6) with
    the seed terms c^2 MS_seed/(Q S) (S - 1 df) and the rest (Q - 1 df), where MS_seed is
    replaced by max(MS_seed nu / chi2_{nu, bound}, MS_resid): E[MS_seed] >= sigma2_resid,
    so seeds that agree by chance cannot buy the question df (docs/statistics.md,
    "Degrees of freedom"). With `pooled`, the seed term is sum_k c_k^2 sigma2_seed / S_k
    from the design's pooled estimate, with its nu df (`pool`). A one-seed cell leaves
    seed_df = 0: question-only variance."""
    Q = ys[0].shape[-2]
    est = sum(c * y.mean(axis=(-2, -1)) for c, y in zip(coefs, ys))
    z = sum(c * y.mean(axis=-1) for c, y in zip(coefs, ys))
    q_part = np.var(z, axis=-1, ddof=1) / Q if Q > 1 else np.zeros_like(est)
    seed_var, resid, df_terms, seed_df, single, weight = 0.0, 0.0, [], 0, False, 0.0
    for c, y in zip(coefs, ys):
        S = y.shape[-1]
        if c == 0:
            continue
        if S < 2 or Q < 2:
            single = True
            continue
        ms_s, ms_e = mean_squares(y)
        k = c * c / (Q * S)
        resid = resid + k * ms_e
        weight += c * c / S
        if pooled is None:
            seed_var = seed_var + k * (ms_s - ms_e)
            df_terms.append((k * _upper(ms_s, ms_e, S - 1, bound), S - 1))
            seed_df += S - 1
    if pooled is not None and weight > 0:
        seed_var = weight * (pooled.v - pooled.r)
        df_terms.append((weight * _upper(pooled.v, pooled.r, pooled.nu, bound), pooled.nu))
        seed_df = pooled.nu
    var = np.maximum(q_part + seed_var, FLOOR * q_part)
    df_terms.append((np.maximum(q_part - resid, 0.0), max(Q - 1, 1)))
    df = satterthwaite(df_terms)
    return Estimate(estimate=est, var=var, df=df, seed_df=0 if single else seed_df)


def _upper(ms_s, ms_e, nu: int, bound: float):
    """max(MS_seed nu / chi2_{nu, bound}, MS_resid): the df rule's stand-in for MS_seed."""
    return np.maximum(ms_s * nu / _chi2_ppf(bound, nu), ms_e)


def permutation_test(a, b) -> dict:
    """Exact two-sided randomization test of equal means over the seed labels of two
    cells (Fisher 1935, The Design of Experiments, sec. 21; Ernst 2004, Stat. Sci.
    19:676): every split of the S_a + S_b seed means into groups of S_a and S_b is
    equally likely under H0; p = share of splits whose |mean difference| is at least the
    observed one. min_p: the smallest p the design can give (the observed split the most
    extreme: 1 split of C(S_a + S_b, S_a), 2 when S_a = S_b, its mirror as extreme)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    x, na = np.concatenate([a, b]), a.size
    n = math.comb(x.size, na)
    if na == 0 or b.size == 0 or n > EXACT_LIMIT:
        return {"p": None, "min_p": None, "n_splits": n}
    idx = np.array(list(itertools.combinations(range(x.size), na)))
    sums = x[idx].sum(axis=1)
    diff = sums / na - (x.sum() - sums) / b.size
    obs = a.mean() - b.mean()
    # a split as extreme as the observed one, up to floating-point ties
    p = float(np.mean(np.abs(diff) >= abs(obs) - 1e-12 * max(1.0, abs(obs))))
    return {"p": p, "min_p": (2 if na == b.size else 1) / n, "n_splits": n}


EXACT_LIMIT = 200_000    # splits enumerated exactly (10 vs 10 seeds: 184,756)


def paired_tost(d, margin: float, alpha: float = 0.05) -> dict:
    """Equivalence of paired differences d within +-margin by two one-sided t tests
    (Schuirmann 1987, J. Pharmacokin. Biopharm. 15:657): H0- mean <= -margin and
    H0+ mean >= margin, each at alpha; p = the larger one-sided p; equivalent when
    p < alpha, i.e. the 1 - 2 alpha interval lies inside (-margin, margin)."""
    d = np.asarray(d, float)
    n = d.size
    m, se = float(d.mean()), float(d.std(ddof=1) / math.sqrt(n))
    df = n - 1
    p_lo = float(sps.t.sf((m + margin) / se, df))
    p_hi = float(sps.t.cdf((m - margin) / se, df))
    lo, hi = interval(m, se, df, 2 * alpha)
    p = max(p_lo, p_hi)
    return {"mean": m, "se": se, "df": df, "ci": [float(lo), float(hi)],
            "ci_level": 1 - 2 * alpha, "p": p, "equivalent": p < alpha}


def sign_flip_tost(d, margin: float, alpha: float = 0.05) -> dict:
    """The exact counterpart of `paired_tost`: each one-sided test is the paired
    randomization test (Fisher 1935, sec. 21) of d shifted by the margin, every one of
    the 2^n sign assignments equally likely under its null's boundary; p = the larger
    one-sided p (min_p = 2^-n, the smallest p the design can give)."""
    d = np.asarray(d, float)
    n = d.size
    signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))
    tol = 1e-12

    def one_sided(x, greater):
        means = (signs * np.abs(x)).mean(axis=1)
        obs = x.mean()
        return float(np.mean(means >= obs - tol) if greater else np.mean(means <= obs + tol))
    p = max(one_sided(d + margin, True), one_sided(d - margin, False))
    return {"p": p, "min_p": 2.0 ** -n, "equivalent": p < alpha}


# ---------------------------------------------------------------- intervals and tests
def t_quantile(p, df):
    """t_df quantile; the normal one for infinite df."""
    df = np.asarray(df, float)
    return np.where(np.isfinite(df), sps.t.ppf(p, np.where(np.isfinite(df), df, 1.0)),
                    sps.norm.ppf(p))


def interval(est, se, df, alpha: float = 0.05):
    """Two-sided 1 - alpha t interval est +- t_{df, 1-alpha/2} se (lo, hi)."""
    h = t_quantile(1 - alpha / 2, df) * se
    return est - h, est + h


def p_value(est, se, df):
    """Two-sided p of H0: contrast = 0 with the same t_df reference as `interval`, so
    p < alpha exactly when the 1 - alpha interval excludes 0. NaN when se = 0 and
    est != 0 (no variation to test against); 1 when both are 0."""
    est, se, df = (np.asarray(v, float) for v in (est, se, df))
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.abs(est) / se
    fin = np.isfinite(df)
    p = np.where(fin, 2 * sps.t.sf(t, np.where(fin, df, 1.0)), 2 * sps.norm.sf(t))
    p = np.where(se > 0, p, np.where(est == 0, 1.0, np.nan))
    return p


def wilson(m: float, se: float, df: float, n: int, alpha: float = 0.05) -> list[float]:
    """Interval for a rate m that never leaves [0, 1]: Wilson's (1927, JASA 22:209) score
    interval with the effective sample size n_eff = m(1 - m) / se^2 of the design and a
    t_df critical value (Korn & Graubard 1998, Surv. Methodol. 24:193); n_eff = n (the
    units) when every outcome is the same (m(1 - m) = 0 or se = 0)."""
    z = float(t_quantile(1 - alpha / 2, df))
    ne = m * (1 - m) / se ** 2 if se > 0 and 0 < m < 1 else float(n)
    centre = (m + z * z / (2 * ne)) / (1 + z * z / ne)
    half = z / (1 + z * z / ne) * math.sqrt(m * (1 - m) / ne + z * z / (4 * ne * ne))
    return [max(0.0, centre - half), min(1.0, centre + half)]


def log_interval(m: float, se: float, df: float, alpha: float = 0.05) -> list[float]:
    """Interval for a mean count m > 0 that never goes below 0: t interval of log m with
    the delta-method SE se/m, exponentiated (Casella & Berger 2002, sec. 5.5.4); [0, 0]
    when every count is 0."""
    if m <= 0:
        return [0.0, 0.0]
    h = float(t_quantile(1 - alpha / 2, df)) * se / m
    return [m * math.exp(-h), m * math.exp(h)]


def iqm(x) -> float:
    """Interquartile mean: the mean of the middle 50% (scipy trim_mean, 25% cut at each
    end), the aggregate of Agarwal et al. (2021, NeurIPS, sec. 4); with under 4 values
    nothing is cut and it is the mean."""
    return float(sps.trim_mean(np.asarray(x, float), 0.25))


def verdict(est: float, se: float, df: float, p_adj: float | None, sesoi: float,
            alpha: float = 0.05, lower_is_better: bool = False,
            reachable: bool = True) -> str | None:
    """better / worse: the adjusted test rejects Delta = 0 (better: Delta > 0, or Delta < 0
    for a metric where lower is better, e.g. idle test runs); equivalent: the 1 - 2 alpha
    interval lies inside (-sesoi, +sesoi) (two one-sided tests, Schuirmann 1987, J.
    Pharmacokinet. Biopharm. 15:657; Lakens 2017, Soc. Psychol. Personal. Sci. 8:355);
    inconclusive: neither. None when there is no test (p_adj None). With reachable False
    (the design cannot show equivalence: `equivalence_seeds`) never "equivalent"."""
    if p_adj is None or not math.isfinite(p_adj):
        return None
    if p_adj < alpha:
        return "better" if (est > 0) != lower_is_better else "worse"
    lo, hi = interval(est, se, df, 2 * alpha)
    if reachable and -sesoi < float(lo) and float(hi) < sesoi:
        return "equivalent"
    return "inconclusive"


def holm(p) -> np.ndarray:
    """Holm (1979) step-down adjusted p-values; same operations as statsmodels'
    multipletests(method="holm")."""
    p = np.asarray(p, float)
    m = p.size
    if m == 0:
        return p.copy()
    order = np.argsort(p)
    ps = np.take(p, order)
    adj = np.maximum.accumulate(ps * np.arange(m, 0, -1))
    adj[adj > 1] = 1
    out = np.empty_like(adj)
    out[order] = adj
    return out


def benjamini_hochberg(p) -> np.ndarray:
    """Benjamini & Hochberg (1995) adjusted p-values (step-up); same operations as
    scipy.stats.false_discovery_control(method="bh")."""
    p = np.asarray(p, float)
    m = p.size
    if m == 0:
        return p.copy()
    order = np.argsort(p)
    ps = np.take_along_axis(p, order, axis=-1)
    i = np.arange(1, m + 1, dtype=ps.dtype)
    ps = ps * (m / i)
    np.minimum.accumulate(ps[::-1], out=ps[::-1])
    out = np.empty_like(ps)
    out[order] = ps
    return np.clip(out, 0.0, 1.0)


def prob_improvement(a_seeds, b_seeds) -> float:
    """P(X_a > X_b) over seeds, ties counting one half: the Mann-Whitney probability of
    improvement of rliable (Agarwal et al. 2021, NeurIPS)."""
    a, b = np.asarray(a_seeds, float), np.asarray(b_seeds, float)
    if a.size == 0 or b.size == 0:
        return float("nan")
    gt = (a[:, None] > b[None, :]).sum()
    eq = (a[:, None] == b[None, :]).sum()
    return float((gt + 0.5 * eq) / (a.size * b.size))


# ---------------------------------------------------------------- planning
def mde(se, df, alpha: float = 0.05, power: float = 0.8):
    """Minimum detectable effect (t_{1-alpha/2} + t_{power}) x SE of a two-sided level
    alpha test with the given power (Cohen 1988; Bloom 1995, Eval. Rev. 19:547)."""
    return (t_quantile(1 - alpha / 2, df) + t_quantile(power, df)) * se


def planned(S: int, Q: int, comps: dict, S_b: int | None = None,
            bound: float = SEED_BOUND) -> tuple[float, float]:
    """Var and df of a two-cell difference with S (and S_b) seeds and Q shared questions
    when every mean square equals its expectation under the components sigma2_seed,
    tau2 (question x cell variance of the difference) and sigma2_resid: the variance
    and the df rule of `contrast`; with comps["pool_cells"] = m, the seed variance pooled
    over m cells of S seeds (m (S - 1) df, `pool`)."""
    S_b = S if S_b is None else S_b
    s2a, tau2, s2e = comps["sigma2_seed"], comps["tau2"], comps["sigma2_resid"]
    var = tau2 / Q + sum(s2a / s + s2e / (s * Q) for s in (S, S_b))
    terms = [(tau2 / Q, Q - 1)]
    if min(S, S_b) < 2:
        return var, math.nan
    m = comps.get("pool_cells")
    if m:
        nu = m * (min(S, S_b) - 1)
        up = (s2e + Q * s2a) * nu / _chi2_ppf(bound, nu)
        terms.append((max(up, s2e) * (1 / S + 1 / S_b) / Q, nu))
        return var, float(satterthwaite(terms))
    for s in (S, S_b):
        up = (s2e + Q * s2a) * (s - 1) / _chi2_ppf(bound, s - 1)
        terms.append((max(up, s2e) / (Q * s), s - 1))
    return var, float(satterthwaite(terms))


@lru_cache(maxsize=None)
def _chi2_ppf(p: float, nu: int) -> float:
    return float(sps.chi2.ppf(p, nu))


def planned_mde(S: int, Q: int, comps: dict, alpha=0.05, power=0.8) -> float:
    """MDE of a two-cell comparison with S seeds per cell and Q shared questions."""
    return _planned_mde(S, Q, comps["sigma2_seed"], comps["tau2"], comps["sigma2_resid"],
                        comps.get("pool_cells"), alpha, power)


@lru_cache(maxsize=65536)
def _planned_mde(S, Q, s2a, tau2, s2e, pool_cells, alpha, power) -> float:
    v, df = planned(S, Q, {"sigma2_seed": s2a, "tau2": tau2, "sigma2_resid": s2e,
                           "pool_cells": pool_cells})
    return float(mde(math.sqrt(v), df, alpha, power))


def mde_grid(seeds, questions, comps: dict, alpha=0.05, power=0.8) -> np.ndarray:
    """planned_mde on ascending grids (len(seeds), len(questions)), made non-increasing
    along both axes: a design with more seeds or questions can always analyse fewer."""
    m = np.array([[planned_mde(S, Q, comps, alpha, power) for Q in questions]
                  for S in seeds])
    return np.minimum.accumulate(np.minimum.accumulate(m, axis=0), axis=1)


def seeds_needed(effect: float, Q: int, comps: dict, alpha=0.05, power=0.8,
                 max_seeds: int = 50) -> int | None:
    """Smallest seeds per cell whose planned MDE at Q questions is <= |effect|."""
    seeds = list(range(2, max_seeds + 1))
    m = mde_grid(seeds, [Q], comps, alpha, power)[:, 0]
    hit = np.nonzero(m <= abs(effect))[0]
    return seeds[hit[0]] if hit.size else None


def tost_reachable(var: float, df: float, sesoi: float, alpha=0.05, power=0.8) -> bool:
    """A design can show equivalence within +-sesoi: two one-sided tests at level alpha
    reach `power` at a true difference of 0 when (t_{1-alpha} + t_{1-(1-power)/2}) SE <=
    sesoi (Chow, Shao & Wang 2008, Sample Size Calculations in Clinical Research, sec.
    3.2.3), SE from the planning variance (`planned`)."""
    if not (math.isfinite(var) and math.isfinite(df)):
        return False
    k = float(t_quantile(1 - alpha, df) + t_quantile(1 - (1 - power) / 2, df))
    return k * math.sqrt(var) <= sesoi


def equivalence_seeds(sesoi: float, Q: int, comps: dict, alpha=0.05, power=0.8,
                      max_seeds: int = 200) -> int | None:
    """Smallest seeds per cell at which equivalence within +-sesoi is reachable
    (`tost_reachable`) with Q questions; None beyond max_seeds."""
    return _equivalence_seeds(sesoi, Q, comps["sigma2_seed"], comps["tau2"],
                              comps["sigma2_resid"], comps.get("pool_cells"), alpha, power,
                              max_seeds)


@lru_cache(maxsize=4096)
def _equivalence_seeds(sesoi, Q, s2a, tau2, s2e, pool_cells, alpha, power, max_seeds):
    comps = {"sigma2_seed": s2a, "tau2": tau2, "sigma2_resid": s2e, "pool_cells": pool_cells}

    def ok(S):
        return tost_reachable(*planned(S, Q, comps), sesoi, alpha, power)
    if not ok(max_seeds):
        return None
    lo, hi = 2, max_seeds                # reachability only grows with S: bisect
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid + 1, hi)
    return lo


def variance_interval(terms, alpha: float = 0.05) -> tuple[float, float, float]:
    """Satterthwaite df of an estimated variance sum_i w_i s2_i (terms (w_i s2_i, nu_i))
    and its 1 - alpha interval nu V / chi2_{nu, 1-alpha/2} .. nu V / chi2_{nu, alpha/2}
    (Satterthwaite 1946, eq. 6; Burdick & Graybill 1992, Confidence Intervals on
    Variance Components, sec. 2.2): (df, lo, hi)."""
    v = sum(t for t, _ in terms)
    nu = float(satterthwaite(terms))
    if not (v > 0 and math.isfinite(nu)):
        return nu, v, v
    return nu, nu * v / sps.chi2.ppf(1 - alpha / 2, nu), nu * v / sps.chi2.ppf(alpha / 2, nu)


def mde_range(S: int, Q: int, comps: dict, alpha=0.05, power=0.8) -> list[float] | None:
    """95% range of the planned MDE of a two-cell difference from the uncertainty of the
    variance components (their df: comps' nu_seed, nu_tau2, nu_resid), the MDE scaling
    with the square root of the planned variance (`variance_interval`)."""
    need = ("nu_seed", "nu_tau2", "nu_resid")
    if any(comps.get(k) in (None, 0) for k in need):
        return None
    terms = [(2 * comps["sigma2_seed"] / S, comps["nu_seed"]),
             (comps["tau2"] / Q, comps["nu_tau2"]),
             (2 * comps["sigma2_resid"] / (S * Q), comps["nu_resid"])]
    terms = [(t, nu) for t, nu in terms if t > 0]
    if not terms:
        return None
    _, lo, hi = variance_interval(terms)
    m = planned_mde(S, Q, comps, alpha, power)
    v = sum(t for t, _ in terms)
    return [m * math.sqrt(lo / v), m * math.sqrt(hi / v)]


QUESTION_GRID = (50, 100, 200, 500, 1000, 2000, 5000, 10000)


def questions_needed(effect: float, S: int, comps: dict, alpha=0.05, power=0.8,
                     grid=QUESTION_GRID) -> int | None:
    """Smallest question count on `grid` whose planned MDE at S seeds is <= |effect|."""
    m = mde_grid([S], list(grid), comps, alpha, power)[0]
    hit = np.nonzero(m <= abs(effect))[0]
    return grid[hit[0]] if hit.size else None


@lru_cache(maxsize=64)
def pocock_nominal(looks: int, alpha: float = 0.05) -> float:
    """Two-sided nominal level of each of `looks` equally spaced analyses whose overall
    type I error is alpha (Pocock 1977): the constant c with P(max_k |Z_k| < c) = 1 - alpha,
    Z_k the cumulative z at look k, corr(Z_i, Z_j) = sqrt(i / j) for i <= j."""
    k = np.arange(1, looks + 1)
    corr = np.sqrt(np.minimum.outer(k, k) / np.maximum.outer(k, k))
    mvn = sps.multivariate_normal(mean=np.zeros(looks), cov=corr, seed=0)

    def excess(c: float) -> float:
        inside = mvn.cdf(np.full(looks, c), lower_limit=np.full(looks, -c)) if looks > 1 \
            else 1 - 2 * sps.norm.sf(c)
        return inside - (1 - alpha)

    c = brentq(excess, sps.norm.isf(alpha / 2) - 1e-9, 5.0, xtol=1e-8)
    return float(2 * sps.norm.sf(c))
