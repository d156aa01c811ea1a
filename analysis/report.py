"""report.md: a results section in prose, rendered from the summary dict only."""
from __future__ import annotations

from analysis.tables import baseline_comparisons, fmt, fmt_ci, fmt_p, is_pct


def _unit(pct: bool) -> str:
    return " points" if pct else ""


def _sentence(c: dict, pct: bool, alpha: float) -> str:
    u = _unit(pct)
    adj = "Holm" if c["correction"] == "holm" else "BH"
    core = (f"{c['a_label']} vs {c['b_label']}: Δ = {fmt(c['delta'], pct, True)}{u} "
            f"(95% CI {fmt(c['ci'][0], pct, True)} to {fmt(c['ci'][1], pct, True)}; "
            f"p = {fmt_p(c['p'])}, {adj}-adjusted p = {fmt_p(c['p_adj'])}")
    if c.get("p_improvement") is not None:
        core += f"; P(A>B over seeds) = {c['p_improvement']:.2f}"
    core += ")"
    if c["verdict"] == "significant":
        word = "higher" if c["delta"] > 0 else "lower"
        return f"- **{core}** — significant: A is {word} after correction."
    if c["verdict"] == "inconclusive":
        need = c.get("seeds_needed")
        tail = (f" Detecting a difference of this size needs about {need} seeds per cell."
                if need else " A difference this small needs more than 100 seeds per cell.")
        return (f"- {core} — inconclusive: |Δ| is below the minimum detectable effect "
                f"({fmt(c['mde'], pct)}{u}), so this is not evidence of no effect.{tail}")
    return (f"- {core} — not significant after correction (|Δ| ≥ MDE "
            f"{fmt(c['mde'], pct)}{u}).")


def render(summary: dict) -> str:
    pct = is_pct(summary)
    alpha = summary.get("alpha", 0.05)
    u = _unit(pct)
    cells = summary["cells"]
    b = summary["bootstrap"]
    L = []
    L.append(f"# Results: {summary['metric']}")
    L.append("")
    n_seeds = sorted({c["n_seeds"] for c in cells})
    steps = summary.get("steps", [])
    L.append(
        f"We analyse {len(cells)} cell(s) over the factor(s) "
        f"{', '.join('`' + f + '`' for f in summary['factors']) or '(none)'}, "
        f"with {'/'.join(map(str, n_seeds))} seed(s) per cell and "
        f"{summary['n_questions']} held-out questions, at step(s) "
        f"{', '.join(map(str, steps))}. Each question's accuracy is first averaged over its "
        f"samples; a seed's score is the mean over questions and a cell's score the mean over "
        f"its seeds. Intervals are 95% two-level bootstrap intervals (B = {b['B']}, RNG seed "
        f"{b['rng_seed']}): seeds are resampled within each cell with deviations inflated by "
        f"√(S/(S−1)), question weights are drawn once per replicate and shared by all cells so "
        f"that differences are paired, and the percentile interval is widened by t/z with "
        f"the Satterthwaite degrees of freedom of the seed + question variance.")
    L.append("")

    # ------------------------------------------------------------ main table
    L.append("## Cell estimates")
    L.append("")
    L.append(f"| cell | seeds | mean{' (%)' if pct else ''} | 95% CI | analytic CI | "
             f"Δ vs baseline | Holm p |")
    L.append("|---|---:|---:|---:|---:|---:|---:|")
    base = baseline_comparisons(summary)
    best = max(c["mean"] for c in cells)
    for c in cells:
        comp = base.get(c["label"])
        mean = fmt(c["mean"], pct)
        if c["mean"] == best:
            mean = f"**{mean}**"
        L.append(f"| {c['label']} | {c['n_seeds']} | {mean} | {fmt_ci(c['ci'], pct)} | "
                 f"{fmt_ci(c['ci_analytic'], pct)} | "
                 + ("baseline" if comp is None else
                    f"{fmt(comp['delta'], pct, True)} {fmt_ci(comp['ci'], pct, True)}")
                 + f" | {'' if comp is None else fmt_p(comp['p_adj'])} |")
    L.append("")
    single = [c["label"] for c in cells if c["question_noise_only"]]
    if single:
        L.append(f"Only one seed was run for {', '.join(single)}: the interval of "
                 f"{'this cell' if len(single) == 1 else 'these cells'} covers question "
                 f"noise only and says nothing about seed-to-seed variation, which is usually "
                 f"the larger error term.")
        L.append("")
    flagged = [c for c in cells if c["intervals_disagree"]]
    if flagged:
        L.append("The bootstrap and the analytic (Satterthwaite t) intervals disagree "
                 "materially for: " + "; ".join(
                     f"{c['label']} (bootstrap {fmt_ci(c['ci'], pct)}, analytic "
                     f"{fmt_ci(c['ci_analytic'], pct)})" for c in flagged)
                 + ". Treat these intervals with caution (few seeds, skewed seed scores or "
                 "accuracy near 0 or 1).")
    else:
        L.append("The bootstrap and analytic (Satterthwaite t) intervals agree for every cell.")
    L.append("")

    # ------------------------------------------------------------ confirmatory
    conf = [c for c in summary["comparisons"] if c["family"] == "confirmatory"]
    L.append(f"## Confirmatory comparisons against the baseline ({summary['baseline_label']})")
    L.append("")
    if conf:
        sig = [c for c in conf if c["verdict"] == "significant"]
        inc = [c for c in conf if c["verdict"] == "inconclusive"]
        L.append(f"The family holds {len(conf)} comparison(s) (each cell and each factor main "
                 f"effect against the baseline), Holm-adjusted. {len(sig)} "
                 f"{'is' if len(sig) == 1 else 'are'} significant at α = {alpha}, "
                 f"{len(inc)} inconclusive.")
        L.append("")
        for c in conf:
            L.append(_sentence(c, pct, alpha))
        sim = [c for c in conf if c.get("ci_simultaneous")]
        if sim:
            L.append("")
            L.append("Simultaneous 95% intervals (max-|t|) for the cell-vs-baseline family: "
                     + "; ".join(f"{c['a_label']} {fmt_ci(c['ci_simultaneous'], pct, True)}"
                                 for c in sim) + ".")
    else:
        L.append("Only one cell: there is nothing to compare.")
    L.append("")

    # ------------------------------------------------------------ all pairs
    pairs = [c for c in summary["comparisons"] if c["family"] == "all_pairs"]
    if pairs:
        sig = [c for c in pairs if c["verdict"] == "significant"]
        L.append("## Exploratory: all pairs (Benjamini–Hochberg)")
        L.append("")
        L.append(f"{len(sig)} of {len(pairs)} pairwise differences are significant at a false "
                 f"discovery rate of {alpha}; "
                 f"{sum(c['verdict'] == 'inconclusive' for c in pairs)} are inconclusive.")
        L.append("")
        for c in pairs:
            L.append(_sentence(c, pct, alpha))
        L.append("")

    # ------------------------------------------------------------ power
    t = summary.get("mde_table")
    L.append("## How many seeds a claim needs")
    L.append("")
    if t:
        vc = summary["variance_components"]
        L.append(f"Minimum detectable difference between two cells (two-sided α = {alpha}, "
                 f"{int(100 * summary.get('power', 0.8))}% power), from the variance "
                 f"components of this sweep (seed variance {vc['sigma2_seed']:.2e}, "
                 f"question-by-cell variance {vc['tau2']:.2e}, residual "
                 f"{vc['sigma2_resid']:.2e}){', in' + u if pct else ''}:")
        L.append("")
        L.append("| seeds per cell | " + " | ".join(f"{q} questions" for q in t["questions"])
                 + " |")
        L.append("|---:|" + "---:|" * len(t["questions"]))
        for r in t["rows"]:
            L.append(f"| {r['seeds']} | " + " | ".join(fmt(v, pct) for v in r["mde"]) + " |")
        L.append("")
        L.append("With one seed per cell the seed variance cannot be estimated, so no valid "
                 "test of a difference between training recipes exists.")
    else:
        L.append("No cell has two or more seeds, so the seed variance — usually the largest "
                 "error term — cannot be estimated; every interval covers question noise only.")
    L.append("")

    # ------------------------------------------------------------ hops, behaviour
    hops = summary.get("hops", [])
    if hops:
        L.append("## Accuracy by hop count")
        L.append("")
        L.append("| cell | " + " | ".join(f"{h} hop{'' if h == '1' else 's'}" for h in hops)
                 + " |")
        L.append("|---|" + "---:|" * len(hops))
        for c in cells:
            vals = [c["by_hops"].get(h) for h in hops]
            L.append(f"| {c['label']} | " + " | ".join(
                "–" if v is None else f"{fmt(v['mean'], pct)} {fmt_ci(v['ci'], pct)}"
                for v in vals) + " |")
        L.append("")
    names = []
    for c in cells:
        names += [n for n in c.get("behaviour", {}) if n not in names]
    if names:
        L.append("## Behaviour")
        L.append("")
        L.append("| cell | " + " | ".join(n.replace("_", " ") for n in names) + " |")
        L.append("|---|" + "---:|" * len(names))
        for c in cells:
            L.append(f"| {c['label']} | " + " | ".join(
                fmt(c["behaviour"].get(n, {}).get("mean"), False) for n in names) + " |")
        L.append("")

    # ------------------------------------------------------------ bookkeeping
    problems = [("Incomplete runs (no COMPLETE marker)", summary.get("incomplete", [])),
                ("Failed runs", summary.get("failed", [])),
                ("Missing cells of the grid", summary.get("missing", [])),
                ("Duplicate runs (first kept)", summary.get("duplicates", []))]
    if any(v for _, v in problems):
        L.append("## Missing, incomplete and failed runs")
        L.append("")
        for title, items in problems:
            if items:
                L.append(f"{title}:")
                for it in items:
                    where = it.get("path", "")
                    L.append(f"- {', '.join(f'{k}={v}' for k, v in it['factors'].items())}"
                             + (f", seed {it['seed']}" if "seed" in it else "")
                             + (f" ({it['reason']})" if it.get("reason") else "")
                             + (f" — `{where}`" if where else ""))
                L.append("")
    L.append("Figures: learning_curves, forest, hops, behaviour, factor_intervals, training "
             "(.png, .pdf). Tables: results, comparisons, hops, behaviour, mde (.tex, .csv).")
    L.append("")
    return "\n".join(L)
