"""Linear contrasts of cell means on shared bootstrap replicates: cell means, paired
differences, factor main effects and marginal means, with intervals and p-values."""
from __future__ import annotations

import math

import numpy as np

from analysis import stats as st
from analysis.bootstrap import CellData, percentile_interval


class Contrasts:
    """Holds the cells' data and their joint bootstrap replicates (B, n_cells)."""

    def __init__(self, data: list[CellData], reps: np.ndarray, alpha: float = 0.05,
                 power: float = 0.8):
        self.data, self.reps, self.alpha, self.power = data, reps, alpha, power
        self.seed_means = [st.nanmean(d.y, axis=0) for d in data]
        self.means = [float(np.mean(m)) for m in self.seed_means]

    def components(self, coefs: dict) -> list[tuple[float, float]]:
        """Analytic variance components of sum_k c_k mean_k: one seed component per group
        of cells that ran the same seed values (paired seed differences within the group,
        groups independent), one question component (questions paired across cells)."""
        groups: dict[tuple, list] = {}
        for k, c in coefs.items():
            groups.setdefault(tuple(self.data[k].seeds), []).append((k, c))
        comps = []
        for seeds, members in groups.items():
            S = len(seeds)
            if S < 2:
                continue
            d = None
            for k, c in members:
                term = c * self.seed_means[k] if c != 1 else self.seed_means[k]
                d = term if d is None else d + term
            comps.append((float(np.var(d, ddof=1)) / S, S - 1))
        q = None
        for k, c in coefs.items():
            qm = st.nanmean(self.data[k].y, axis=1)
            term = c * qm if c != 1 else qm
            q = term if q is None else q + term
        q = q[~np.isnan(q)]
        if q.size > 1:
            comps.append((float(np.var(q, ddof=1)) / q.size, q.size - 1))
        return comps

    def estimate(self, coefs: dict) -> float:
        est = None
        for k, c in coefs.items():
            term = c * self.means[k] if c != 1 else self.means[k]
            est = term if est is None else est + term
        return float(est)

    def replicates(self, coefs: dict) -> np.ndarray:
        r = None
        for k, c in coefs.items():
            term = c * self.reps[:, k] if c != 1 else self.reps[:, k]
            r = term if r is None else r + term
        return r

    def evaluate(self, coefs: dict) -> dict:
        """Estimate, two-level bootstrap CI (percentile, widened by t_df/z with the
        Satterthwaite df),
        analytic Satterthwaite t CI, bootstrap SE, p-values and MDE of a contrast."""
        est = self.estimate(coefs)
        reps = self.replicates(coefs)
        var, df = st.satterthwaite(self.components(coefs))
        lo, hi = percentile_interval(reps, self.alpha / 2)
        ci = st.scaled_percentile(est, float(lo[0]), float(hi[0]), self.alpha, df)
        se = float(np.std(reps, ddof=1)) if reps.size > 1 else 0.0
        return {"estimate": est, "ci": ci,
                "ci_analytic": st.t_interval(est, var, df, self.alpha),
                "se_boot": se, "se_analytic": math.sqrt(var), "df": df,
                "p": st.p_value(est, se, df), "p_boot": st.empirical_p(reps, est),
                "mde": st.mde(se, df, self.alpha, self.power), "reps": reps}


def disagree(boot_ci, analytic_ci, tol: float = 0.25) -> bool:
    """Bootstrap and analytic intervals disagree materially: widths differ by more than
    a factor 1+tol, or centres differ by more than tol x the analytic half-width."""
    wb = boot_ci[1] - boot_ci[0]
    wa = analytic_ci[1] - analytic_ci[0]
    if wa <= 0 or wb <= 0:
        return (wa <= 0) != (wb <= 0)
    ratio = wb / wa
    centre = abs((boot_ci[0] + boot_ci[1]) - (analytic_ci[0] + analytic_ci[1])) / 2
    return ratio > 1 + tol or ratio < 1 / (1 + tol) or centre > tol * wa / 2


def simultaneous(results: list[dict], alpha: float = 0.05) -> list[list[float]]:
    """Single-step max-|t| simultaneous intervals for a family (Hothorn, Bretz & Westfall
    2008), with the critical value moved to each comparison's t_df scale through the
    per-comparison level it implies (consistent with the t-widened percentile CIs)."""
    if not results:
        return []
    reps = np.column_stack([r["reps"] for r in results])
    deltas = np.array([r["estimate"] for r in results])
    ses = np.array([r["se_boot"] for r in results])
    c = st.max_t_critical(reps, deltas, ses, alpha)
    from scipy import stats as sps
    level = float(2 * sps.norm.sf(c))          # per-comparison two-sided level implied
    out = []
    for r in results:
        h = st.t_quantile(1 - level / 2, r["df"]) * r["se_boot"] if level > 0 else math.inf
        out.append([r["estimate"] - h, r["estimate"] + h])
    return out


def verdict(delta: float, p_adj: float, mde: float, alpha: float = 0.05) -> str:
    """significant / inconclusive (non-significant and |delta| < MDE) / not significant."""
    if p_adj < alpha:
        return "significant"
    if abs(delta) < mde:
        return "inconclusive"
    return "not significant"
