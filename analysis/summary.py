"""Build the summary (DESIGN.md section 5 contract, plus extra fields) for a sweep."""
from __future__ import annotations

import itertools
import math

import numpy as np

from analysis import estimates as est
from analysis import stats as st
from analysis.bootstrap import two_level_replicates
from analysis.collect import AnalysisError, Sweep, cell_label, match_cell
from analysis.compare import Contrasts, disagree, simultaneous, verdict

SEED_GRID = (2, 3, 5, 10, 20)   # one seed per cell: no valid seed-level test
QUESTION_GRID = (100, 250, 500, 1000)


def _clean(x):
    """JSON-safe floats (inf/nan -> None)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, (np.floating,)):
        return _clean(float(x))
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def _public(r: dict) -> dict:
    return {k: v for k, v in r.items() if k != "reps"}


def analyse(sweep: Sweep, metric: str = "correct", step: int | None = None,
            B: int = 10_000, rng_seed: int = 0, baseline: dict | None = None,
            alpha: float = 0.05, power: float = 0.8, progress: bool | None = None,
            with_curves: bool = True) -> dict:
    cells = [c for c in sweep.cells]
    failed = list(sweep.failed)
    # the step each run is analysed at
    steps = {}
    for c in cells:
        keep = []
        for run in c.runs:
            s = est.select_step(run, step)
            if s is None:
                failed.append({"path": str(run.path), "factors": c.factors, "seed": run.seed,
                               "reason": f"no evaluation at step {step}"})
                continue
            steps[str(run.path)] = s
            keep.append(run)
        c.runs = keep
    cells = [c for c in cells if c.runs]
    if not cells:
        raise AnalysisError("no complete runs to analyse (use --include-incomplete to "
                            "analyse runs without a COMPLETE marker)")
    questions, hops = est.question_index(cells, steps)
    data = est.metric_matrix(cells, steps, metric, questions)
    hop_values = sorted({h for h in hops.values() if h is not None})
    masks = [np.array([hops[q] == h for q in questions]) for h in hop_values]
    reps = two_level_replicates(data, B=B, rng_seed=rng_seed, extra=masks, progress=progress)
    n = len(cells)
    con = Contrasts(data, reps[:, :n], alpha, power)

    # ---------------------------------------------------------------- cells
    extras = est.cell_extras(cells, steps, questions)
    # a mean of values in [0, 1] (accuracy) cannot leave [0, 1]: the t/z-widened interval
    # is clipped to the metric's range so a table never reports 101%
    finite = np.concatenate([d.y[~np.isnan(d.y)] for d in data]) if data else np.array([])
    bounded = finite.size > 0 and finite.min() >= 0.0 and finite.max() <= 1.0

    def clip(ci):
        return [max(0.0, ci[0]), min(1.0, ci[1])] if bounded else ci

    out_cells = []
    for i, c in enumerate(cells):
        r = con.evaluate({i: 1.0})
        y = data[i].y
        n_q = int((~np.isnan(y)).any(axis=1).sum())
        by_hops = {}
        for h_i, (h, m) in enumerate(zip(hop_values, masks)):
            yh = np.where(m[:, None], y, np.nan)
            if np.isnan(yh).all():
                continue
            sub = Contrasts([data[i].__class__(y=yh, seeds=data[i].seeds)],
                            reps[:, [(h_i + 1) * n + i]], alpha, power)
            rh = sub.evaluate({0: 1.0})
            by_hops[str(h)] = {"mean": rh["estimate"], "ci": clip(rh["ci"]),
                               "n_questions": int((~np.isnan(yh)).any(axis=1).sum())}
        run_steps = sorted({steps[str(run.path)] for run in c.runs})
        cell = {
            "factors": c.factors, "label": c.label,
            "n_seeds": len(c.runs), "n_questions": n_q,
            "mean": r["estimate"], "ci": clip(r["ci"]),
            "seed_means": [float(v) for v in con.seed_means[i]],
            "seeds": list(c.seeds), "step": run_steps[0] if len(run_steps) == 1 else run_steps,
            "ci_analytic": clip(r["ci_analytic"]), "df": r["df"],
            "se_boot": r["se_boot"], "se_analytic": r["se_analytic"],
            "intervals_disagree": disagree(r["ci"], r["ci_analytic"]),
            "question_noise_only": len(c.runs) < 2,
            "variance_components": st.anova_components(y),
            "by_hops": by_hops, **extras[i],
            "runs": [str(run.path) for run in c.runs],
        }
        if with_curves:
            cell["curve"] = est.curves(c, metric)
            cell["behaviour_curves"] = {
                name: est.curves(c, f, tr) for name, (f, tr) in est.BEHAVIOUR.items()
                if name in cell["behaviour"]}
            cell["train_curves"] = est.train_curves(c)
        out_cells.append(cell)

    # ---------------------------------------------------------------- comparisons
    base = match_cell(cells, baseline) if baseline else 0
    confirm, pairs = [], []
    for i in range(n):
        if i != base:
            r = con.evaluate({i: 1.0, base: -1.0})
            r.update(a=cells[i].factors, b=cells[base].factors, kind="cell", ia=i, ib=base)
            confirm.append(r)
    # factor main effects (with >= 2 factors): average paired difference between a level
    # and the baseline's level over the combinations of the other factors present in both
    if len(sweep.factors) >= 2:
        keyof = {tuple(str(c.factors[k]) for k in sweep.factors): j for j, c in enumerate(cells)}
        for f_i, f in enumerate(sweep.factors):
            b_level = cells[base].factors[f]
            for level in sweep.levels[f]:
                if str(level) == str(b_level):
                    continue
                coefs, m = {}, 0
                for j, c in enumerate(cells):
                    if str(c.factors[f]) != str(level):
                        continue
                    partner = list(str(c.factors[k]) for k in sweep.factors)
                    partner[f_i] = str(b_level)
                    k = keyof.get(tuple(partner))
                    if k is not None:
                        coefs[j] = coefs.get(j, 0.0) + 1.0
                        coefs[k] = coefs.get(k, 0.0) - 1.0
                        m += 1
                if m == 0:
                    continue
                coefs = {k: v / m for k, v in coefs.items()}
                r = con.evaluate(coefs)
                r.update(a={f: level}, b={f: b_level}, kind="main_effect", n_pairs=m)
                confirm.append(r)
    for i, j in itertools.combinations(range(n), 2):
        r = con.evaluate({i: 1.0, j: -1.0})
        r.update(a=cells[i].factors, b=cells[j].factors, kind="cell", ia=i, ib=j)
        pairs.append(r)

    p_holm = st.holm([r["p"] for r in confirm])
    p_bh = st.benjamini_hochberg([r["p"] for r in pairs])
    sim_ci = simultaneous([r for r in confirm if r["kind"] == "cell"], alpha)
    comps_var = pooled_components(con, data, [r for r in confirm if r["kind"] == "cell"])
    Q_now = len(questions)
    comparisons = []
    k_sim = 0
    for family, rs, padj in (("confirmatory", confirm, p_holm), ("all_pairs", pairs, p_bh)):
        for r, pa in zip(rs, padj):
            row = {"a": r["a"], "b": r["b"], "delta": r["estimate"], "ci": r["ci"],
                   "p": r["p"], "p_adj": float(pa), "family": family, "mde": r["mde"],
                   "kind": r["kind"],
                   "correction": "holm" if family == "confirmatory" else "bh",
                   "a_label": cell_label(r["a"]), "b_label": cell_label(r["b"]),
                   "ci_analytic": r["ci_analytic"], "se_boot": r["se_boot"],
                   "se_analytic": r["se_analytic"], "df": r["df"], "p_boot": r["p_boot"],
                   "verdict": verdict(r["estimate"], float(pa), r["mde"], alpha)}
            if r["kind"] == "cell":
                row["p_improvement"] = st.prob_improvement(con.seed_means[r["ia"]],
                                                           con.seed_means[r["ib"]])
                if family == "confirmatory":
                    row["ci_simultaneous"] = sim_ci[k_sim]
                    k_sim += 1
            else:
                row["n_pairs"] = r["n_pairs"]
            if row["verdict"] != "significant" and comps_var is not None:
                row["seeds_needed"] = st.seeds_needed(r["estimate"], Q_now, comps_var,
                                                      alpha, power)
            comparisons.append(row)

    # ---------------------------------------------------------------- per-factor levels
    factor_levels = []
    for f in sweep.factors:
        for level in sweep.levels[f]:
            members = [j for j, c in enumerate(cells) if str(c.factors[f]) == str(level)]
            if not members:
                continue
            r = con.evaluate({j: 1.0 / len(members) for j in members})
            factor_levels.append({"factor": f, "level": level, "mean": r["estimate"],
                                  "ci": r["ci"], "n_cells": len(members)})

    all_steps = sorted(set(steps.values()), key=str)
    summary = {
        "cells": out_cells,
        "comparisons": comparisons,
        "bootstrap": {"B": B, "rng_seed": rng_seed, "method":
                      "two-level (seeds within cell, questions shared across cells), "
                      "seed deviations x sqrt(S/(S-1)); percentile intervals widened "
                      "by t_df/z with Satterthwaite df"},
        "metric": metric, "alpha": alpha, "power": power,
        "factors": sweep.factors, "levels": sweep.levels,
        "baseline": cells[base].factors, "baseline_label": cells[base].label,
        "steps": all_steps, "n_questions": Q_now,
        "hops": [str(h) for h in hop_values],
        "factor_levels": factor_levels,
        "variance_components": comps_var,
        "mde_table": mde_table(comps_var, Q_now, alpha, power),
        "incomplete": sweep.incomplete, "failed": failed, "missing": sweep.missing,
        "duplicates": sweep.duplicates,
    }
    return _clean(summary)


def pooled_components(con: Contrasts, data, base_results: list[dict]) -> dict | None:
    """Seed, residual and question-by-cell variance pooled over the sweep, for planning."""
    comps = [st.anova_components(d.y) for d in data]
    comps = [c for c in comps if c is not None]
    if not comps:
        return None
    s2_seed = float(np.mean([c["sigma2_seed"] for c in comps]))
    s2_res = float(np.mean([c["sigma2_resid"] for c in comps]))
    taus = []
    for r in base_results:
        ya, yb = data[r["ia"]].y, data[r["ib"]].y
        dq = st.nanmean(ya, axis=1) - st.nanmean(yb, axis=1)
        dq = dq[~np.isnan(dq)]
        if dq.size > 1:
            taus.append(max(0.0, float(np.var(dq, ddof=1))
                            - s2_res * (1 / ya.shape[1] + 1 / yb.shape[1])))
    if not taus:   # a single cell: use the question variance of the cell means
        taus = [2 * float(np.mean([c["sigma2_question"] for c in comps]))]
    return {"sigma2_seed": s2_seed, "sigma2_resid": s2_res, "tau2": float(np.median(taus))}


def mde_table(comps: dict | None, Q_now: int, alpha: float, power: float) -> dict | None:
    """MDE of a two-cell comparison for seeds-per-cell x questions."""
    if comps is None:
        return None
    qs = sorted(set(QUESTION_GRID) | {Q_now})
    rows = []
    for S in SEED_GRID:
        vals = []
        for Q in qs:
            v, df = st.planned_variance(S, Q, comps["sigma2_seed"], comps["tau2"],
                                        comps["sigma2_resid"])
            vals.append(st.mde(math.sqrt(v), df, alpha, power))
        rows.append({"seeds": S, "mde": vals})
    return {"questions": qs, "rows": rows}
