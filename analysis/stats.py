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

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy import stats as sps

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


def contrast(ys: list[np.ndarray], coefs, bound: float = SEED_BOUND) -> Estimate:
    """sum_k c_k ybar_k for complete ys[k] (..., Q, S_k) on the same Q questions.

    Var-hat = var_q(sum_k c_k ybar_kq) / Q + sum_k c_k^2 (MS_seed,k - MS_resid,k) / (Q S_k):
    the first term carries the question and residual variance, the second the seed
    variance, each counted once (expected mean squares, Searle et al. 1992, eq. 4.38);
    unbiased, floored at FLOOR x the first term. df: Satterthwaite (1946, eq. 6) with
    the seed terms c^2 MS_seed/(Q S) (S - 1 df) and the rest (Q - 1 df), where MS_seed is
    replaced by max(MS_seed nu / chi2_{nu, bound}, MS_resid): E[MS_seed] >= sigma2_resid,
    so seeds that agree by chance cannot buy the question df (docs/statistics.md,
    "Degrees of freedom"). A one-seed cell leaves seed_df = 0: question-only variance."""
    Q = ys[0].shape[-2]
    est = sum(c * y.mean(axis=(-2, -1)) for c, y in zip(coefs, ys))
    z = sum(c * y.mean(axis=-1) for c, y in zip(coefs, ys))
    q_part = np.var(z, axis=-1, ddof=1) / Q if Q > 1 else np.zeros_like(est)
    seed_var = np.zeros_like(est)
    resid = np.zeros_like(est)
    df_terms = []
    seed_df = 0
    single = False
    for c, y in zip(coefs, ys):
        S = y.shape[-1]
        if c == 0:
            continue
        if S < 2 or Q < 2:
            single = True
            continue
        ms_s, ms_e = mean_squares(y)
        k = c * c / (Q * S)
        seed_var = seed_var + k * (ms_s - ms_e)
        resid = resid + k * ms_e
        upper = np.maximum(ms_s * (S - 1) / _chi2_ppf(bound, S - 1), ms_e)
        df_terms.append((k * upper, S - 1))
        seed_df += S - 1
    var = np.maximum(q_part + seed_var, FLOOR * q_part)
    df_terms.append((np.maximum(q_part - resid, 0.0), max(Q - 1, 1)))
    df = satterthwaite(df_terms)
    return Estimate(estimate=est, var=var, df=df, seed_df=0 if single else seed_df)


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


def verdict(est: float, se: float, df: float, p_adj: float | None, sesoi: float,
            alpha: float = 0.05, lower_is_better: bool = False) -> str | None:
    """better / worse: the adjusted test rejects Delta = 0 (better: Delta > 0, or Delta < 0
    for a metric where lower is better, e.g. idle test runs); equivalent: the 1 - 2 alpha
    interval lies inside (-sesoi, +sesoi) (two one-sided tests, Schuirmann 1987, J.
    Pharmacokinet. Biopharm. 15:657; Lakens 2017, Soc. Psychol. Personal. Sci. 8:355);
    inconclusive: neither. None when there is no test (p_adj None)."""
    if p_adj is None or not math.isfinite(p_adj):
        return None
    if p_adj < alpha:
        return "better" if (est > 0) != lower_is_better else "worse"
    lo, hi = interval(est, se, df, 2 * alpha)
    if -sesoi < float(lo) and float(hi) < sesoi:
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
    and the df rule of `contrast`."""
    S_b = S if S_b is None else S_b
    s2a, tau2, s2e = comps["sigma2_seed"], comps["tau2"], comps["sigma2_resid"]
    var = tau2 / Q + sum(s2a / s + s2e / (s * Q) for s in (S, S_b))
    terms = [(tau2 / Q, Q - 1)]
    for s in (S, S_b):
        if s < 2:
            return var, math.nan
        up = (s2e + Q * s2a) * (s - 1) / _chi2_ppf(bound, s - 1)
        terms.append((max(up, s2e) / (Q * s), s - 1))
    return var, float(satterthwaite(terms))


@lru_cache(maxsize=None)
def _chi2_ppf(p: float, nu: int) -> float:
    return float(sps.chi2.ppf(p, nu))


def planned_mde(S: int, Q: int, comps: dict, alpha=0.05, power=0.8) -> float:
    """MDE of a two-cell comparison with S seeds per cell and Q shared questions."""
    return _planned_mde(S, Q, comps["sigma2_seed"], comps["tau2"], comps["sigma2_resid"],
                        alpha, power)


@lru_cache(maxsize=65536)
def _planned_mde(S, Q, s2a, tau2, s2e, alpha, power) -> float:
    v, df = planned(S, Q, {"sigma2_seed": s2a, "tau2": tau2, "sigma2_resid": s2e})
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


QUESTION_GRID = (50, 100, 200, 500, 1000, 2000, 5000, 10000)


def questions_needed(effect: float, S: int, comps: dict, alpha=0.05, power=0.8,
                     grid=QUESTION_GRID) -> int | None:
    """Smallest question count on `grid` whose planned MDE at S seeds is <= |effect|."""
    m = mde_grid([S], list(grid), comps, alpha, power)[0]
    hit = np.nonzero(m <= abs(effect))[0]
    return grid[hit[0]] if hit.size else None
