"""Build summary.json for a sweep: cells, comparisons (on shared questions, with
verdicts against a smallest effect of interest), planning tables and warnings."""
from __future__ import annotations

import itertools
import math

import numpy as np

from analysis import estimates as est
from analysis import labels as lb
from analysis import stats as st
from analysis.collect import AnalysisError, Sweep, cell_label, match_cell
from analysis.compare import evaluate, rows_of, shared, simultaneous

SEED_GRID = (2, 3, 5, 10, 20)
QUESTION_GRID = (100, 250, 500, 1000)
DEFAULT_SESOI = 0.03          # 3 accuracy points


def _clean(x):
    """JSON-safe values (inf/nan -> None, numpy scalars -> Python)."""
    if isinstance(x, (np.floating,)):
        x = float(x)
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.bool_,)):
        return bool(x)
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def _select_steps(sweep: Sweep, step, failed: list) -> dict:
    steps = {}
    for c in sweep.cells:
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
    return steps


def _fields(metric: str, rewards: list[str]) -> dict:
    f = {metric: (metric, float)}
    f.update({n: (key, tr) for n, (_, key, tr) in est.BEHAVIOUR.items() if n != metric})
    f.update({r: (r, float) for r in rewards if r != metric})
    return f


def clip(ci):
    """A mean of values in [0, 1] cannot leave [0, 1]: the interval is clipped to it."""
    return [max(0.0, ci[0]), min(1.0, ci[1])] if ci else ci


def _cell_summary(c, mats, metric, alpha, names, clip_metric, with_curves,
                  fields, steps, warnings) -> dict:
    d = mats[metric]
    r = evaluate([d], {0: 1.0}, alpha)
    hops = sorted({h for h in d.hops.values() if h is not None}, key=str)
    by_hops = {}
    for h in hops:
        qs = [q for q in d.questions if d.hops[q] == h]
        rh = evaluate([d], {0: 1.0}, alpha, questions=qs)
        by_hops[str(h)] = {"mean": rh["estimate"], "ci": clip_metric(rh["ci"]),
                           "n_questions": len(qs)}
    extra = {}
    for name, dd in mats.items():
        if name == metric or dd.y.size == 0:
            continue
        re = evaluate([dd], {0: 1.0}, alpha)
        ci = clip(re["ci"]) if name in est.RATES else re["ci"]
        extra[name] = {"mean": re["estimate"], "ci": ci, "n_questions": re["n_questions"]}
    out = {
        "factors": c.factors, "label": c.label, "short_label": lb.cell_name(c.factors, names),
        "n_seeds": d.n_seeds, "n_questions": len(d.questions), "samples": d.samples,
        "mean": r["estimate"], "ci": clip_metric(r["ci"]), "se": r["se"], "df": r["df"],
        "seed_means": [float(v) for v in d.y.mean(axis=0)], "seeds": list(c.seeds),
        "step": d.steps[0] if len(d.steps) == 1 else list(d.steps),
        "question_noise_only": not r["inferential"],
        "interval": "seeds and questions" if r["inferential"] else "questions only (one seed)",
        "variance_components": st.components(d.y),
        "by_hops": by_hops,
        "behaviour": {n: v for n, v in extra.items() if n in est.BEHAVIOUR},
        "reward": {n: v for n, v in extra.items() if n not in est.BEHAVIOUR},
        "runs": [str(run.path) for run in c.runs],
    }
    out["change"] = _changes(c, mats, fields, steps, alpha, warnings)
    out["compute"] = _compute(c, steps)
    if with_curves:
        out["curve"] = _curve(c, metric, alpha, clip_metric)
        out["train_curves"] = est.train_curves(c)
    return out


def _changes(c, mats: dict, fields: dict, steps: dict, alpha: float,
             warnings: list) -> dict:
    """Per field: the within-cell change from each seed's first evaluation to the analysed
    one, paired by seed and question (y_last - y_first per question and seed, then the
    same seeds x questions estimate as a cell mean). {} when a seed has one step."""
    first = {str(r.path): min(x["step"] for x in r.eval_rows()) for r in c.runs}
    single = [k for k in first if first[k] == steps[k]]
    if single and len(single) < len(first):
        warnings.append(f"{c.label}: no change from the first evaluation ({single[0]} has "
                        "only the analysed step)")
    if single:
        return {}
    before = est.cell_matrices(c, first, fields, [], required=(next(iter(fields)),))
    out = {}
    for name, d1 in mats.items():
        d0 = before.get(name)
        if d0 is None or d1.y.size == 0 or d0.y.size == 0:
            continue
        pos0 = {q: i for i, q in enumerate(d0.questions)}
        pos1 = {q: i for i, q in enumerate(d1.questions)}
        qs = [q for q in d1.questions if q in pos0]
        if not qs:
            continue
        y = d1.y[[pos1[q] for q in qs]] - d0.y[[pos0[q] for q in qs]]
        r = evaluate([est.CellData(y=y, questions=qs, seeds=d1.seeds)], {0: 1.0}, alpha)
        out[name] = {"from_step": sorted(set(first.values())), "mean": r["estimate"],
                     "se": r["se"], "df": r["df"], "ci": r["ci"], "p": r["p"],
                     "inferential": r["inferential"], "n_questions": r["n_questions"]}
    return out


def _compute(c, steps: dict) -> dict:
    """Training compute per seed (metrics.jsonl): sampled tokens, step seconds (wall) and,
    where every step logged it, step CPU seconds (`step_cpu_s`) summed over the optimizer
    steps up to the analysed one, mean over the seeds that logged them; {} without
    metrics."""
    per_seed = []
    for r in c.runs:
        rows = [m for m in r.metrics_rows() if m["step"] <= steps[str(r.path)]
                and est.is_number(m.get("generated_tokens")) and est.is_number(m.get("step_s"))]
        if rows:
            cpu = (sum(m["step_cpu_s"] for m in rows)
                   if all(est.is_number(m.get("step_cpu_s")) for m in rows) else None)
            per_seed.append((sum(m["generated_tokens"] for m in rows),
                             sum(m["step_s"] for m in rows), cpu))
    if not per_seed:
        return {}
    out = {"generated_tokens": float(np.mean([t for t, _, _ in per_seed])),
           "train_seconds": float(np.mean([s for _, s, _ in per_seed])),
           "n_seeds": len(per_seed)}
    if all(cpu is not None for _, _, cpu in per_seed):
        out["train_cpu_seconds"] = float(np.mean([cpu for _, _, cpu in per_seed]))
    return out


def _curve(cell, metric: str, alpha: float, clip_metric) -> dict:
    """Per evaluation step: the cell mean with the same interval as the tables."""
    steps, mean, lo, hi = [], [], [], []
    for s, d in est.curve_matrices(cell, metric).items():
        r = evaluate([d], {0: 1.0}, alpha)
        ci = clip_metric(r["ci"])
        steps.append(s)
        mean.append(r["estimate"])
        lo.append(ci[0])
        hi.append(ci[1])
    return {"steps": steps, "mean": mean, "lo": lo, "hi": hi}


def _differences(data, i, j) -> list[str]:
    """Loud warnings when two cells were not evaluated alike."""
    a, b = data[i], data[j]
    w = []
    if set(a.questions) != set(b.questions):
        n = len(set(a.questions) & set(b.questions))
        w.append(f"different question sets ({len(a.questions)} vs {len(b.questions)}); "
                 f"compared on the {n} shared")
    if a.steps != b.steps:
        w.append(f"evaluated at different steps ({'/'.join(map(str, a.steps))} vs "
                 f"{'/'.join(map(str, b.steps))})")
    if a.samples != b.samples:
        w.append(f"different samples per question (eval.samples {a.samples} vs {b.samples})")
    return w


def _comparison(data, coefs, alpha, ia, ib, a, b, kind, names, family) -> dict:
    r = evaluate(data, coefs, alpha)
    keys = lb.differing(a, b) or list(a)
    same = [k for k in a if k not in keys]
    vs = lb.cell_name(b, names, keys)
    if family == "all_pairs" and same:        # several pairs differ in the same factors
        vs += f" (at {lb.cell_name(a, names, same)})"
    row = {"a": a, "b": b, "kind": kind, "family": family,
           "a_label": cell_label(a), "b_label": cell_label(b),
           "label": lb.cell_name(a, names, keys), "vs": vs,
           "tex_label": (lb.compact(a, names, keys) if family == "confirmatory"
                         else lb.pair_label(a, b, keys, same)),
           "n_questions": r["n_questions"], "warnings": [], "ia": ia, "ib": ib}
    if ia is not None:
        row["warnings"] = _differences(data, ia, ib)
    if r["estimate"] is None:
        row["warnings"].append("no shared questions: not compared")
        row.update(delta=None, ci=None, p=None, se=None, df=None, inferential=False,
                   error="no shared questions")
        return row
    row.update(delta=r["estimate"], ci=r["ci"], p=r["p"], se=r["se"], df=r["df"],
               inferential=r["inferential"])
    if not r["inferential"]:
        row["warnings"].append("a cell has one seed: no test (question-only interval)")
    elif r["p"] is None:
        row["warnings"].append("no variation within the cells (SE = 0): no test")
    return row


def _main_effects(sweep, cells, base, data, alpha, names) -> list[dict]:
    """Each level of each factor against the baseline's level, averaged over the
    combinations of the other factors present at both levels. A level present in one
    pair only, whose partner is the baseline cell, is that cell's own comparison (an
    L-shaped design: each factor varied alone): not tested twice in the family."""
    out = []
    if len(sweep.factors) < 2:
        return out
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
                partner = [str(c.factors[k]) for k in sweep.factors]
                partner[f_i] = str(b_level)
                k = keyof.get(tuple(partner))
                if k is not None:
                    coefs[j] = coefs.get(j, 0.0) + 1.0
                    coefs[k] = coefs.get(k, 0.0) - 1.0
                    m += 1
            if m == 0 or (m == 1 and coefs.get(base) == -1.0):
                continue
            coefs = {k: v / m for k, v in coefs.items()}
            row = _comparison(data, coefs, alpha, None, None, {f: level}, {f: b_level},
                              "main_effect", names, "confirmatory")
            row["n_pairs"] = m
            row["label"] = f"{names[f]}={lb.value(level)} (main effect)"
            row["tex_label"] = f"{names[f]}={lb.value(level)} (main)"
            out.append(row)
    return out


def planning_components(data, pairs) -> dict | None:
    """Pooled seed and residual variance (mean of the per-cell moment estimates) and the
    question x cell variance tau2 of a difference (median over the compared pairs)."""
    comps = [st.components(d.y) for d in data]
    comps = [c for c in comps if c is not None]
    if not comps:
        return None
    s2a = float(np.mean([c["sigma2_seed"] for c in comps]))
    s2e = float(np.mean([c["sigma2_resid"] for c in comps]))
    taus = []
    for i, j in pairs:
        qs = shared(data, [i, j])
        if len(qs) < 2:
            continue
        ya, yb = rows_of(data[i], qs), rows_of(data[j], qs)
        dq = ya.mean(axis=1) - yb.mean(axis=1)
        taus.append(max(0.0, float(np.var(dq, ddof=1))
                        - s2e * (1 / ya.shape[1] + 1 / yb.shape[1])))
    assumed = not taus
    tau2 = float(np.median(taus)) if taus else 2 * float(np.mean(
        [c["sigma2_question"] for c in comps]))
    return {"sigma2_seed": s2a, "sigma2_resid": s2e, "tau2": tau2, "tau2_assumed": assumed,
            "n_cells": len(comps), "n_cells_total": len(data)}


def planning(comps, sesoi, Q_now, alpha, power) -> dict | None:
    if comps is None:
        return None
    qs = sorted(set(QUESTION_GRID) | {Q_now})
    m = st.mde_grid(SEED_GRID, qs, comps, alpha, power)
    return {"mde_table": {"questions": qs, "rows": [{"seeds": S, "mde": [float(v) for v in r]}
                                                     for S, r in zip(SEED_GRID, m)]},
            "seeds_needed": {"effect": sesoi, "questions": qs,
                             "seeds": [st.seeds_needed(sesoi, q, comps, alpha, power)
                                       for q in qs]},
            "questions_needed": {"effect": sesoi, "seeds": list(SEED_GRID),
                                 "questions": [st.questions_needed(sesoi, s, comps, alpha, power)
                                               for s in SEED_GRID]}}


def _family(rows, adjust, correction, alpha, sesoi, lower_is_better=False):
    tested = [r for r in rows if r.get("p") is not None]
    padj = adjust([r["p"] for r in tested])
    for r, pa in zip(tested, padj):
        r["p_adj"] = float(pa)
    for r in rows:
        r.setdefault("p_adj", None)
        r["correction"] = correction
        r["verdict"] = (st.verdict(r["delta"], r["se"], r["df"], r["p_adj"], sesoi, alpha,
                                   lower_is_better) if r["p_adj"] is not None else None)


def analyse(sweep: Sweep, metric: str = "correct", step: int | None = None,
            B: int = 10_000, rng_seed: int = 0, baseline: dict | None = None,
            alpha: float = 0.05, power: float = 0.8, sesoi: float = DEFAULT_SESOI,
            all_pairs: bool = False, with_curves: bool = True,
            baseline_source: str = "--baseline", lower_is_better: bool = False) -> dict:
    failed, warnings = list(sweep.failed), list(sweep.warnings)
    steps = _select_steps(sweep, step, failed)
    cells = [c for c in sweep.cells if c.runs]
    if not cells:
        raise AnalysisError("no complete runs to analyse (use --include-incomplete to "
                            "analyse runs without a COMPLETE marker)")
    names = lb.short_names(sweep.factors)
    fields = _fields(metric, est.reward_fields(cells, steps))
    exclusions: list = []
    mats = [est.cell_matrices(c, steps, fields, warnings, (metric,), exclusions)
            for c in cells]
    for c, m in zip(cells, mats):
        if metric not in m or m[metric].y.size == 0:
            raise AnalysisError(f"{c.runs[0].eval_file}: no '{metric}' values at step "
                                f"{steps[str(c.runs[0].path)]} (cell {c.label})")
    data = [m[metric] for m in mats]
    eval_keys = [f for f in sweep.factors if f.startswith("eval.")]
    if eval_keys:
        warnings.append("cells differ in evaluation settings (" + ", ".join(eval_keys)
                        + "): their scores are not measured alike")

    finite = np.concatenate([d.y.ravel() for d in data])
    bounded = finite.size > 0 and finite.min() >= 0.0 and finite.max() <= 1.0

    def clip_metric(ci):
        return clip(ci) if bounded else ci

    out_cells = [_cell_summary(c, m, metric, alpha, names, clip_metric, with_curves,
                               fields, steps, warnings) for c, m in zip(cells, mats)]

    if baseline is None and len(cells) > 1:
        raise AnalysisError("no baseline: name it with --baseline KEY=VAL,... or `baseline:` "
                            "in the experiment's analysis.yaml; cells are: "
                            + "; ".join(c.label for c in cells))
    base = match_cell(cells, baseline) if baseline else 0
    confirm, pairs = _comparisons(sweep, cells, data, base, alpha, names, sesoi, all_pairs,
                                  lower_is_better)
    comps = planning_components(data, [(r["ia"], r["ib"]) for r in confirm if r["kind"] == "cell"])
    _annotate(confirm + pairs, data, comps, base, B, rng_seed, sesoi, alpha, power)
    warnings += [f"{r['label']} vs {r['vs']}: {w}" for r in confirm + pairs for w in r["warnings"]]
    comparisons = [{k: v for k, v in r.items() if k not in ("ia", "ib")} for r in confirm + pairs]

    Q_now = max(len(d.questions) for d in data)
    plan = planning(comps, sesoi, Q_now, alpha, power)
    summary = {
        "cells": out_cells, "comparisons": comparisons,
        "bootstrap": {"B": B, "rng_seed": rng_seed, "method":
                      "Monte Carlo (multivariate t) critical value of the simultaneous "
                      "max-|t| intervals; cell and comparison intervals are analytic "
                      "(docs/statistics.md)"},
        "method": "method-of-moments variance of the crossed seeds x questions design, t "
                  "interval with bounded-seed Satterthwaite df (docs/statistics.md)",
        "metric": metric, "metric_words": lb.metric_words(metric), "alpha": alpha,
        "power": power, "sesoi": sesoi, "all_pairs": all_pairs,
        "lower_is_better": lower_is_better,
        "factors": sweep.factors, "short_names": names, "levels": sweep.levels,
        "baseline": cells[base].factors, "baseline_label": cells[base].label,
        "baseline_short": lb.cell_name(cells[base].factors, names),
        "baseline_source": baseline_source if baseline else "only cell",
        "steps": sorted(set(steps.values()), key=str), "n_questions": Q_now,
        "hops": sorted({h for c in out_cells for h in c["by_hops"]}, key=str),
        "factor_levels": _factor_levels(sweep, cells, data, alpha),
        "variance_components": comps,
        "mde_table": plan["mde_table"] if plan else None,
        "planning": plan, "warnings": warnings,
        "incomplete": sweep.incomplete, "failed": failed, "missing": sweep.missing,
        "duplicates": sweep.duplicates, "exclusions": exclusions,
    }
    return _clean(summary)


def _comparisons(sweep, cells, data, base, alpha, names, sesoi, all_pairs, lower_is_better):
    """The confirmatory family (cells and main effects vs the baseline, Holm) and, when
    asked for, all pairs (Benjamini-Hochberg), each row with its verdict."""
    fac = [c.factors for c in cells]
    confirm = [_comparison(data, {i: 1.0, base: -1.0}, alpha, i, base, fac[i], fac[base],
                           "cell", names, "confirmatory") for i in range(len(cells)) if i != base]
    confirm += _main_effects(sweep, cells, base, data, alpha, names)
    _family(confirm, st.holm, "holm", alpha, sesoi, lower_is_better)
    pairs = []
    if all_pairs:
        pairs = [_comparison(data, {i: 1.0, j: -1.0}, alpha, i, j, fac[i], fac[j], "cell",
                             names, "all_pairs")
                 for i, j in itertools.combinations(range(len(cells)), 2)]
        _family(pairs, st.benjamini_hochberg, "bh", alpha, sesoi, lower_is_better)
    return confirm, pairs


def _annotate(rows, data, comps, base, B, rng_seed, sesoi, alpha, power) -> None:
    """Planning MDE, seeds needed for the SESOI, P(A > B) over seeds, and the
    simultaneous intervals of the tested cell-vs-baseline comparisons."""
    tested = [r for r in rows if r["family"] == "confirmatory" and r["kind"] == "cell"
              and r["delta"] is not None and r["inferential"]]
    sim = simultaneous(tested, data, base, alpha, B, rng_seed) if tested else None
    for r, ci in zip(tested, sim or []):
        r["ci_simultaneous"] = ci
    for r in rows:
        r["mde"] = _mde(r, data, comps, alpha, power)
        if r["kind"] == "cell" and r["delta"] is not None:
            r["p_improvement"] = st.prob_improvement(data[r["ia"]].y.mean(axis=0),
                                                     data[r["ib"]].y.mean(axis=0))
        if comps is not None and r["kind"] == "cell":
            r["seeds_needed"] = st.seeds_needed(sesoi, max(r["n_questions"], 2), comps,
                                                alpha, power)


def _mde(r, data, comps, alpha, power):
    """Planning MDE (variance components, not the observed SE) at the comparison's seeds
    and shared questions; a main effect over m pairs counts m x the seeds."""
    if comps is None or r["n_questions"] < 2:
        return None
    if r["kind"] == "cell":
        Sa, Sb = data[r["ia"]].n_seeds, data[r["ib"]].n_seeds
    else:
        Sa = Sb = r["n_pairs"] * min(d.n_seeds for d in data)
    v, df = st.planned(Sa, r["n_questions"], comps, S_b=Sb)
    if not math.isfinite(df):
        return None
    return float(st.mde(math.sqrt(v), df, alpha, power))


def _factor_levels(sweep, cells, data, alpha) -> list[dict]:
    out = []
    for f in sweep.factors:
        for level in sweep.levels[f]:
            members = [j for j, c in enumerate(cells) if str(c.factors[f]) == str(level)]
            if not members:
                continue
            r = evaluate(data, {j: 1.0 / len(members) for j in members}, alpha)
            if r["estimate"] is None:
                continue
            out.append({"factor": f, "level": level, "mean": r["estimate"], "ci": r["ci"],
                        "n_cells": len(members), "n_questions": r["n_questions"]})
    return out
