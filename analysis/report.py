"""report.md: a results section in prose, rendered from the summary dict only."""
from __future__ import annotations

from analysis.endpoint import endpoint_lines
from analysis.estimates import BEHAVIOUR, RATES
from analysis.hypotheses import decision_words
from analysis.lifelong import KIND, QUANTITIES, WORDS
from analysis.objective import ran_words
from analysis.trend import trend_lines
from analysis.labels import (breakdown_file, breakdown_word, env_word, field_words,
                             hop_words, legend, level, own_behaviour)
from analysis.tables import (BEHAVIOUR_TABLE, baseline_comparisons, behaviour_panels, fmt,
                             fmt_ci, fmt_est, fmt_p, has_change, has_curves, has_lifelong,
                             has_training, is_pct, not_drawn, p_is)

VERDICT_WORDS = {
    "better": "better: the difference is significant after correction and {good}",
    "worse": "worse: the difference is significant after correction and {bad}",
    # two one-sided tests at alpha: the 1 - 2 alpha interval (stats.verdict)
    "equivalent": "equivalent: the {tost} interval lies within ±SESOI",
    "inconclusive": "inconclusive: neither a difference nor equivalence is shown",
}


def _sentence(c: dict, pct: bool, sesoi: str, lower_is_better: bool = False,
              alpha: float = 0.05) -> str:
    u = " points" if pct else ""
    name = f"{c['label']} vs {c['vs']}"
    if c["delta"] is None:
        return f"- {name}: not compared ({'; '.join(c['warnings'])})."
    adj = "Holm" if c["correction"] == "holm" else "BH"
    core = (f"{name}: Δ = {fmt(c['delta'], pct, True)}{u} "
            f"({level(alpha)} CI {fmt(c['ci'][0], pct, True)} to {fmt(c['ci'][1], pct, True)}, "
            f"{c['n_questions']} shared questions")
    if c["verdict"] is None:
        return f"- {core}) — {'; '.join(c['warnings']) or 'no test'}."
    # one p per comparison, the one every output quotes (analysis.hypotheses.quote)
    core += (f"; {p_is(c.get('p_quoted', c['p_adj']))} "
             f"({c.get('p_quoted_words') or adj + '-adjusted'})")
    if c.get("p_perm_min") is not None and "permutation" in (c.get("p_quoted_words") or ""):
        core += f", smallest attainable {fmt_p(c['p_perm_min'])}"
    core += ")"
    signs = ("negative (lower is better)", "positive") if lower_is_better else (
        "positive", "negative")
    words = VERDICT_WORDS[c["verdict"]].replace("SESOI", sesoi + u).format(
        good=signs[0], bad=signs[1], tost=level(2 * alpha))
    text = f"- {core} — {words}."
    if c["verdict"] == "inconclusive" and c.get("mde") is not None:
        text += (f" With this design the minimum detectable difference is "
                 f"{fmt(c['mde'], pct)}{u} when planned from the pooled variance "
                 "components" + (f", {fmt(c['mde_observed'], pct)}{u} at this test's own "
                                 "standard error and df" if c.get("mde_observed") else ""))
        need = c.get("seeds_needed")
        text += (f"; detecting ±{sesoi}{u} needs about {need} seeds per cell." if need
                 else f"; detecting ±{sesoi}{u} needs more than 50 seeds per cell.")
    if c.get("equivalence_reachable") is False:
        need = c.get("equivalence_seeds")
        text += (f" Equivalence within ±{sesoi}{u} is out of this design's reach (so never "
                 "claimed); it would need "
                 + (f"about {need} seeds per cell." if need else "more than 200 seeds per cell."))
    if c["warnings"]:
        text += " **Warning: " + "; ".join(c["warnings"]) + ".**"
    return text


def _intro(summary: dict, pct: bool) -> list[str]:
    cells = summary["cells"]
    n_seeds = sorted({c["n_seeds"] for c in cells})
    n_q = sorted({c["n_questions"] for c in cells})
    factors = ", ".join(f"`{f}`" for f in summary["factors"]) or "(none)"
    src = summary["baseline_source"]
    ran = ran_words(summary)      # what ran (issue 63): world, reward scheme, weights
    L = [f"# Results: {summary['metric_words']}", ""] + [f"What ran: {ran}.", ""] * bool(ran)
    L += [f"We analyse {len(cells)} cell(s) over the factor(s) {factors}, with "
          f"{'/'.join(map(str, n_seeds))} seed(s) per cell and {'/'.join(map(str, n_q))} "
          f"held-out questions per cell, at step(s) "
          f"{', '.join(map(str, summary['steps']))}. " + _method_words(summary), ""]
    if legend(summary["short_names"]):
        L += [f"Factors are named by their shortest unambiguous key: "
              f"{legend(summary['short_names'])}.", ""]
    return L + [
        f"Baseline: **{summary['baseline_short']}** (from {src}). Smallest effect of "
        f"interest (SESOI): ±{fmt(summary['sesoi'], pct)}{' points' if pct else ''}. "
        "Every comparison uses only the questions both cells evaluated.", ""]


def _method_words(summary: dict) -> str:
    if summary.get("evaluation_only"):
        return ("No cell trained (fixed weights): the seeds are sampling streams of one "
                "policy, so they are replicates within a question, not training seeds. Each "
                "question's score is averaged over all its samples of every stream, and the "
                "question is the unit: a cell's interval is over questions (Wilson for a "
                "rate), a comparison is paired by question (t on Q - 1 df) "
                "(docs/statistics.md).")
    return ("Each question's score is first averaged over its samples; a seed's score is "
            "the mean over questions and a cell's score the mean over its seeds. Intervals "
            f"are {level(summary['alpha'])} t intervals whose variance adds the seed, "
            "question and seed × question residual components once each (method of "
            "moments for the crossed seeds × questions design), "
            + _seed_model_words(summary) + ", with "
            "degrees of freedom that do not grow when seeds agree by chance; p-values use "
            "the same t reference, so a comparison is significant exactly when its interval "
            "excludes 0. Cell intervals of rates are Wilson intervals (inside [0, 1]), of "
            "counts log-scale intervals (never below 0); "
            + ("the pre-registered hypotheses are decided by the exact permutation test "
               "over the seed labels" if _decides_by_permutation(summary) else
               "an exact permutation test over the seed labels is computed for each "
               "comparison (summary.json `p_perm`)") + " (docs/statistics.md).")


def _seed_model_words(summary: dict) -> str:
    """The seed variance the analysis used (its `seed_variance` model), not a fixed
    phrase (issue 65: the methods said pooled where each arm's own was used)."""
    sv = summary.get("seed_variance") or {}
    if sv.get("model") == "pooled":
        return ("one seed variance pooled over the cells of the design (pre-registered: "
                "analysis.yaml `seed_variance: pooled`)")
    return "each cell's own seed variance (Welch-type contrasts, Satterthwaite df)"


def _decides_by_permutation(summary: dict) -> bool:
    return any(h.get("decided_by") == "permutation" for h in summary.get("hypotheses") or [])


def _sci(v) -> str:
    return "–" if v is None else f"{v:.2e}"


def _seed_variance(summary: dict) -> list[str]:
    sv = summary.get("seed_variance")
    if not sv:
        return []
    pooled, ratio = sv["pooled"], sv.get("max_min_ratio")
    model = ("**one seed variance pooled over the cells** (pre-registered in analysis.yaml "
             "`seed_variance: pooled`)" if sv.get("model") == "pooled" else
             "**each cell's own seed variance** (Welch-type contrasts with Satterthwaite df; "
             "no pretest chooses the model)")
    L = ["## Seed variance", "",
         f"The intervals and tests use {model}. Pooled over the design's cells: "
         f"σ²_seed = {pooled['sigma2_seed']:.2e} on {pooled['df']} df"
         + (" (used by the tests and the planning tables)." if pooled.get("used") else
            " (used by the planning tables only)."),
         "", "Per-cell estimates: " + "; ".join(
             f"{c['label']} {_sci(c['sigma2_seed'])} ({c['n_seeds']} seeds)"
             for c in sv["per_cell"]) + "."
         + (f" Largest over smallest: {ratio:.1f}." if ratio is not None else "")]
    few = min(c["n_seeds"] for c in summary["cells"])
    if few < 5:
        L += ["", f"With {few} seeds per cell the t intervals rest on few seed df; the "
              "exact permutation p (exact whatever the seeds' distribution) is the one to "
              "lean on — and it cannot go below its smallest attainable value."]
    return L + [""]


def _cell_table(summary: dict, pct: bool) -> list[str]:
    lv = level(summary["alpha"])
    L = ["## Cell estimates", "",
         f"| cell | seeds | questions | mean{' (%)' if pct else ''} | {lv} CI | IQM of seeds | "
         f"seed means | Δ vs baseline [{lv} CI] | p | verdict |",
         "|---|---:|---:|---:|---:|---:|---|---:|---:|---|"]
    base = baseline_comparisons(summary)
    for c in summary["cells"]:
        comp = base.get(c["label"])
        if comp is None:
            tail = "baseline | | |"
        else:
            tail = (f"{fmt(comp['delta'], pct, True)} {fmt_ci(comp['ci'], pct, True)} | "
                    f"{fmt_p(comp.get('p_quoted', comp['p_adj']))} | "
                    f"{comp['verdict'] or 'no test'} |")
        dagger = " †" if c["question_noise_only"] else ""
        L.append(f"| {c['label']} | {c['n_seeds']} | {c['n_questions']} | "
                 f"{fmt(c['mean'], pct)} | {fmt_ci(c['ci'], pct)}{dagger} | "
                 f"{fmt(c.get('iqm'), pct)} | "
                 f"{' '.join(fmt(v, pct) for v in c['seed_means'])} | {tail}")
    L += ["", "IQM: the interquartile mean of the seed means (Agarwal et al. 2021; with "
          "under 4 seeds it is their mean); the seed means show bimodal seeds that a mean "
          "hides (figure seeds)." if not summary.get("evaluation_only") else
          "Seed means: one per sampling stream (replicates, not units, in this "
          "evaluation-only design).", ""]
    single = [c["label"] for c in summary["cells"] if c["question_noise_only"]]
    if single:
        L += [f"† One seed only ({', '.join(single)}): these intervals cover question noise "
              "only, say nothing about seed-to-seed variation (usually the larger term), and "
              "no p-value or verdict is given for comparisons involving these cells.", ""]
    return L


def _seed_source(vc: dict) -> str:
    where = f"pooled over the {vc['n_cells']} of {vc['n_cells_total']} cells with two or more seeds"
    if vc.get("seed_pooled_for_tests", True):
        return where
    return where + " (for planning only: the tests use each cell's own, above)"


def _planning(summary: dict, pct: bool) -> list[str]:
    u = " points" if pct else ""
    L = ["## How many seeds and questions a claim needs", ""]
    plan = summary.get("planning")
    if plan and plan.get("unit") == "question":
        return L + _question_planning(plan, summary, pct)
    if not plan:
        return L + ["No cell has two or more seeds, so the seed variance cannot be "
                    "estimated and no planning table can be given.", ""]
    vc = summary["variance_components"]
    if not any(vc[k] for k in ("sigma2_seed", "tau2", "sigma2_resid")):
        return L + ["Every variance component of this sweep is 0 (every score is the same, "
                    "e.g. at a floor), so a minimum detectable difference computed from "
                    "them would be 0 and say nothing: no planning table is given.", ""]
    t = plan["mde_table"]
    unit = f", in{u}" if pct else ""
    L.append(f"Minimum detectable difference between two cells (two-sided α = "
             f"{summary['alpha']}, {int(100 * summary['power'])}% power){unit}, "
             f"from the variance components of this sweep (seed {vc['sigma2_seed']:.2e} on "
             f"{vc['nu_seed']} df, {_seed_source(vc)}; question × cell {vc['tau2']:.2e}"
             f"{' (assumed)' if vc['tau2_assumed'] else ''} on {vc['nu_tau2']} df; residual "
             f"{vc['sigma2_resid']:.2e} on {vc['nu_resid']} df), not from the observed "
             "differences. Each value with its 95% range from the uncertainty of the "
             "components (their df):")
    L += ["", "| seeds per cell | " + " | ".join(f"{q} questions" for q in t["questions"]) + " |",
          "|---:|" + "---:|" * len(t["questions"])]
    for r in t["rows"]:
        L.append(f"| {r['seeds']} | " + " | ".join(
            fmt(v, pct) + (f" {fmt_ci(g, pct)}" if g else "")
            for v, g in zip(r["mde"], r.get("range") or [None] * len(r["mde"]))) + " |")
    need = plan["seeds_needed"]
    L.append(f"| seeds for ±{fmt(need['effect'], pct)}{u} | " + " | ".join(
        ">50" if s is None else str(s) for s in need["seeds"]) + " |")
    eq = plan.get("equivalence_seeds")
    if eq:
        L.append(f"| seeds to show equivalence within ±{fmt(eq['margin'], pct)}{u} | "
                 + " | ".join(">200" if s is None else str(s) for s in eq["seeds"]) + " |")
    qn = plan["questions_needed"]
    L += ["", f"Questions needed for ±{fmt(qn['effect'], pct)}{u}: " + "; ".join(
        f"{s} seeds: {'>10000' if q is None else q}" for s, q in zip(qn["seeds"],
                                                                     qn["questions"])) + ".",
          "", "With one seed per cell no valid test of a difference between training "
          "recipes exists.", ""]
    return L


def _question_planning(plan: dict, summary: dict, pct: bool) -> list[str]:
    u = " points" if pct else ""
    need = plan["questions_needed"]
    return [f"The unit is the question (fixed weights). Minimum detectable paired "
            f"difference (two-sided α = {summary['alpha']}, "
            f"{int(100 * summary['power'])}% power), from the median per-question variance "
            f"of the compared differences ({plan['var_difference']:.2e}):", "",
            "| questions | " + " | ".join(str(q) for q in plan["questions"]) + " |",
            "|---|" + "---:|" * len(plan["questions"]),
            "| MDE | " + " | ".join(fmt(v, pct) for v in plan["mde"]) + " |", "",
            f"Questions needed for ±{fmt(plan['effect'], pct)}{u}: "
            + (f"{need}." if need else f"more than {plan['questions'][-1]}."), ""]


def _behaviour(summary: dict) -> list[str]:
    names = [n for n in BEHAVIOUR_TABLE + [b for b in BEHAVIOUR if b not in BEHAVIOUR_TABLE]
             + own_behaviour(summary)
             if any(n in c.get("behaviour", {}) for c in summary["cells"])]
    if not names:
        return []
    n = sum(n in c.get("behaviour", {}) for c in summary["cells"] for n in names)
    L = ["## Behaviour (exploratory)", "",
         f"{n} intervals ({level(summary['alpha'])}, unadjusted for their number): "
         "descriptions, not tests; an interval that excludes a value here is a lead for "
         "a pre-registered experiment, "
         "not a finding.", "", "| cell | " + " | ".join(
        field_words(n, summary) + (" (%)" if n in RATES else "")
        for n in names) + " |",
         "|---|" + "---:|" * len(names)]
    for c in summary["cells"]:
        vals = [c["behaviour"].get(n) for n in names]
        L.append(f"| {c['label']} | "
                 + " | ".join(fmt_est(v, n in RATES) for n, v in zip(names, vals)) + " |")
    return L + [""]


def _changes(summary: dict, pct: bool) -> list[str]:
    """Within-cell change from the first evaluation (paired by seed and question)."""
    metric = summary["metric"]
    cells = [c for c in summary["cells"] if c.get("change", {}).get(metric)]
    if not cells:
        return []
    names = [n for n in BEHAVIOUR_TABLE + own_behaviour(summary)
             if any(n in c["change"] for c in cells)]
    L = ["## Change from the first evaluation", "",
         "Each seed's last minus first evaluation, per question, then the same seeds x "
         "questions interval as a cell mean (p: two-sided, no change; unadjusted; † one "
         f"seed: question noise only). The {len(names) * len(cells)} behaviour changes are "
         f"exploratory (unadjusted {level(summary['alpha'])} intervals over the family "
         "shown).", "",
         "| " + " | ".join(["cell", "from step", summary["metric_words"]] + [
             field_words(n, summary) + (" (%)" if n in RATES else "")
             for n in names]) + " |",
         "|---|---:|" + "---:|" * (len(names) + 1)]
    for c in cells:
        ch = c["change"]
        m = ch[metric]
        dagger = "" if m.get("inferential", True) else " †"
        cols = [c["label"], "/".join(map(str, m["from_step"])),
                f"{fmt_est(m, pct, True)}{dagger}, {p_is(m['p'])}"]
        cols += [fmt_est(ch.get(n), n in RATES, True) for n in names]
        L.append("| " + " | ".join(cols) + " |")
    return L + [""]


def _warm_start(summary: dict) -> list[str]:
    w = summary.get("warm_start")
    if not w or not w["shared"]:
        return []
    step, n = w["shared"][0]["step"], w["distinct"]
    seeds = ", ".join(str(x) for g in w["shared"] for x in g.get("seeds", [g["seed"]]))
    if any("seeds" in g for g in w["shared"]):   # one evaluation across seeds (greedy)
        who = f"the step {step} rows of every arm of seeds {seeds} are identical"
        why = ("the same weights and evaluation set, and an evaluation that does not "
               "depend on the seed, e.g. greedy decoding")
        of = "arms and seeds"
    else:
        who = f"for seed(s) {seeds} every arm's step {step} rows are identical"
        why = "the same weights, evaluation set, sampling seed and samples before any update"
        of = "arms"
    return [f"The first evaluations are {n} distinct evaluation{'s' * (n != 1)}, not "
            f"{w['evaluations']}: {who} ({why}), so each is counted once — a shared "
            f"starting point of the {of}, not independent measurements.", ""]


def _hops(summary: dict, pct: bool) -> list[str]:
    hops = summary.get("hops", [])
    if not hops:
        return []
    word = breakdown_word(summary)
    L = [f"## By {word}", "",
         "| cell | " + " | ".join(hop_words(h, word) for h in hops) + " |",
         "|---|" + "---:|" * len(hops)]
    for c in summary["cells"]:
        vals = [c["by_hops"].get(h) for h in hops]
        L.append(f"| {c['label']} | " + " | ".join(fmt_est(v, pct) for v in vals) + " |")
    return L + [""]


def _bookkeeping(summary: dict) -> list[str]:
    problems = [("Incomplete runs (no COMPLETE marker)", summary.get("incomplete", [])),
                ("Failed runs", summary.get("failed", [])),
                ("Missing cells of the grid", summary.get("missing", [])),
                ("Duplicate runs: the same cell and seed twice (the first is analysed)",
                 summary.get("duplicates", []))]
    excl = summary.get("exclusions", [])
    if not any(v for _, v in problems) and not excl:
        return []
    L = ["## Missing, incomplete, failed and duplicate runs; rows left out", ""]
    if excl:
        L += ["Rows left out of a behaviour field (no value: missing, null or NaN; the "
              "analysed metric needs a value in every row):"]
        L += [f"- {e['cell']}: '{e['field']}' {e['excluded']} of {e['rows']} rows"
              for e in excl] + [""]
    for title, items in problems:
        if items:
            L.append(f"{title}:")
            for it in items:
                where = it.get("path", "")
                L.append(f"- {', '.join(f'{k}={v}' for k, v in it['factors'].items())}"
                         + (f", seed {it['seed']}" if "seed" in it else "")
                         + (f" ({it['reason']})" if it.get("reason") else "")
                         + (f" (repeats `{it['first']}`, "
                            f"{'identical' if it['identical_rows'] else 'different'} rows)"
                            if it.get("first") else "")
                         + (f" — `{where}`" if where else ""))
            L.append("")
    return L


def _code(summary: dict) -> list[str]:
    """The code each arm ran (analysis.provenance: the runs' code.json)."""
    from analysis.provenance import name
    rows = summary.get("code") or []
    if not rows:
        return []
    L = ["## Code versions", ""]
    if not any(r["versions"] for r in rows):
        return L + ["No run recorded the code it ran (code.json: git commit, uncommitted "
                    "changes, package versions; written by ablate's cells since issue 46): "
                    "the code versions of these runs are not known.", ""]
    L += ["| cell | code (git commit; uncommitted changes: hash of the diff) | ablate | "
          "packages | seeds |", "|---|---|---|---|---|"]
    for r in rows:
        for v in r["versions"]:
            pk = ", ".join(f"{k} {x}" for k, x in sorted(v["packages"].items())) or "–"
            L.append(f"| {r['label']} | {name(v)} | {v['ablate']} | {pk} | "
                     f"{', '.join(map(str, v['seeds']))} |")
        if r["not_recorded"]:
            L.append(f"| {r['label']} | not recorded | – | – | "
                     f"{', '.join(map(str, r['not_recorded']))} |")
    return L + [""]


def _deviations(summary: dict) -> list[str]:
    """Commits to the code between pre-registration and results; arms never run
    (analysis/deviations.py)."""
    d = summary.get("deviations")
    if not d:
        return []
    what = ", ".join(f"{p}/" for p in d["paths"])
    ran = [c for c in d["commits"] if c.get("in_runs", True)]
    later = [c for c in d["commits"] if not c.get("in_runs", True)]
    L = ["## Deviations from the pre-registration", "",
         f"Pre-registered at commit {d['preregistration']}, results committed at "
         f"{d['results_commit']}. "
         + (f"{len(d['commits'])} commit(s) in between changed {what}." if d["commits"]
            else f"No commit in between changed {what}.")]
    if ran:
        L += ["", f"{len(ran)} of them are in the code the runs ran (their code.json): "
              "whether each changed what was measured is for the reader to judge from its "
              "diff:"] + [f"- {c['commit']} {c['subject']}" for c in ran]
    if later:
        L += ["", f"{len(later)} are in no run's code: only those that changed analysis/ "
              "can change these results:"] + [f"- {c['commit']} {c['subject']}" for c in later]
    L += ["", "Pre-registered but not run: " + "; ".join(d["unrun"]) + "."] if d["unrun"] \
        else ["", "Every pre-registered arm ran."]
    return L + [""]


def _lifelong(summary: dict) -> list[str]:
    """The lifelong quantities at the last step (analysis.lifelong; figure `lifelong`)."""
    if not has_lifelong(summary):
        return []
    env = summary.get("env")
    cols = [(WORDS[q], KIND[q] == "rate") for q in QUANTITIES]
    L = ["## Lifelong (skill library)", "",
         f"At each cell's last step, with {level(summary['alpha'])} intervals (library "
         "quantities: t over seeds, log scale; held-out quantities: over seeds and "
         "questions, Wilson). Forgotten: "
         "questions solved (at least half the samples correct) at an earlier evaluation "
         "and not at this one. Descriptive; the curves per seed are in figure `lifelong`.",
         "", "| cell | " + " | ".join(env_word(w, env) + (" (%)" if pct else "")
                                       for w, pct in cols) + " |",
         "|---|" + "---:|" * len(cols)]
    for c in summary["cells"]:
        last = c["lifelong"]["last"]
        L.append(f"| {c['short_label']} | " + " | ".join(
            fmt_est(last.get(q), pct) + (f" (step {last[q]['step']})" if q in last else "")
            for q, (_, pct) in zip(QUANTITIES, cols)) + " |")
    return L + [""]


def render(summary: dict) -> str:
    pct = is_pct(summary)
    sesoi = fmt(summary["sesoi"], pct)
    L = _intro(summary, pct)
    if summary.get("exploratory"):
        L += [f"**Exploratory, not confirmatory** (the experiment's analysis.yaml): "
              f"{summary['exploratory']}. Its p-values and verdicts are computed as for a "
              "confirmatory family but support no confirmatory claim.", ""]
    if summary.get("warnings"):
        L += ["## Warnings", ""] + [f"- **{w}**" for w in summary["warnings"]] + [""]
    L += _cell_table(summary, pct) + _seed_variance(summary)
    conf = [c for c in summary["comparisons"] if c["family"] == "confirmatory"]
    L += [f"## Comparisons against the baseline ({summary['baseline_short']})", ""]
    if conf:
        counts = {v: sum(c["verdict"] == v for c in conf)
                  for v in ("better", "worse", "equivalent", "inconclusive", None)}
        what = "each cell and each factor main effect" if any(
            c["kind"] == "main_effect" for c in conf) else "each cell"
        L += [f"The confirmatory family holds {len(conf)} comparison(s) ({what} against "
              f"the baseline), Holm-adjusted at α = "
              f"{summary['alpha']}: {counts['better']} better, {counts['worse']} worse, "
              f"{counts['equivalent']} equivalent within ±{sesoi}"
              f"{' points' if pct else ''}, {counts['inconclusive']} inconclusive"
              + (f", {counts[None]} without a test" if counts[None] else "") + ".", ""]
        low = bool(summary.get("lower_is_better"))
        L += [_sentence(c, pct, sesoi, low, summary["alpha"]) for c in conf]
        sim = [c for c in conf if c.get("ci_simultaneous")]
        if sim:
            L += ["", f"Simultaneous {level(summary['alpha'])} intervals (max-|t|) for the "
                  "cell comparisons: " + "; ".join(
                      f"{c['label']} {fmt_ci(c['ci_simultaneous'], pct, True)}"
                      for c in sim) + "."]
    else:
        L.append("Only one cell: there is nothing to compare.")
    L.append("")
    pairs = [c for c in summary["comparisons"] if c["family"] == "all_pairs"]
    if pairs:
        L += ["## Exploratory: all pairs (Benjamini–Hochberg)", ""]
        L += [_sentence(c, pct, sesoi, bool(summary.get("lower_is_better")), summary["alpha"])
              for c in pairs] + [""]
    L += _hypotheses(summary, pct) + trend_lines(summary) + endpoint_lines(summary)
    L += _changes(summary, pct) + _warm_start(summary)
    L += _planning(summary, pct) + _hops(summary, pct) + _behaviour(summary)
    L += _lifelong(summary) + _code(summary) + _deviations(summary) + _bookkeeping(summary)
    L += _figures_line(summary)
    return "\n".join(L)


def _figures_line(summary: dict) -> list[str]:
    """The figures drawn and the tables written; the figures not drawn, and why
    (analysis.tables.not_drawn: the figures read the same rule)."""
    skip = not_drawn(summary)
    figs = ["finding"] * bool(summary.get("primary")) \
        + ["learning_curves"] * has_curves(summary) + ["change"] * has_change(summary) + [
        "forest", "seeds"] + [breakdown_file(summary)] * bool(summary.get("hops")) + [
        "behaviour"] * bool(behaviour_panels(summary)[0]) + ["factor_intervals"] + [
        "training"] * has_training(summary) + ["lifelong"] * has_lifelong(summary) \
        + ["endpoint"] * bool((summary.get("endpoint") or {}).get("cells"))
    L = [f"Figures: {', '.join(f for f in figs if f not in skip)} (.png, .pdf; captions "
         "and LaTeX snippets: captions.md, figure_<name>.tex). Tables: results, "
         "comparisons, " + f"{breakdown_file(summary)}, " * bool(summary.get("hops"))
         + "behaviour, mde" + (", hypotheses" if summary.get("hypotheses") else "")
         + (", lifelong" if has_lifelong(summary) else "") + " (.tex, .csv).", ""]
    gone = [f for f in figs if f in skip]
    if gone:
        L += ["Not drawn: " + "; ".join(f"{f} ({skip[f]})" for f in gone) + ".", ""]
    return L


JOIN_WORDS = {"all": "every part must hold (intersection-union test: p = the largest part p)",
              "any": "one part suffices (union-intersection, Bonferroni: p = k x the "
                     "smallest part p in the predicted direction)"}


def _hypotheses(summary: dict, pct: bool) -> list[str]:
    hyps = summary.get("hypotheses") or []
    if not hyps:
        return []
    u = " points" if pct else ""
    L = ["## Pre-registered hypotheses (analysis.yaml)", "",
         f"{len(hyps)} hypothesis(es)" + (f" and the trend test {summary['trend']['name']}"
                                         if summary.get("trend") else "")
         + ", one family: joint p-values Holm-adjusted across them "
         f"at α = {summary['alpha']}; a part counts only in its predicted direction.", ""]
    for h in hyps:
        joint = (f"{p_is(h['p_decision'])} ({decision_words(h)})"
                 if h.get("p_decision") is not None else "no test")
        L.append(f"- **{h['name']}** ({JOIN_WORDS[h['join']]}): {joint} — "
                 f"**{h['verdict'] or 'no verdict'}**.")
        for q in h["parts"]:
            est = ("not compared" if q["delta"] is None else
                   f"Δ = {fmt(q['delta'], pct, True)}{u} {fmt_ci(q['ci'], pct, True)}")
            L.append(f"  - {q['label']} vs {q['vs']}, predicted {q['expect']}: {est}"
                     + ("" if q["direction_ok"] else " (not in the predicted direction)"))
    return L + [""]
