"""A binary per-seed endpoint (analysis.yaml `endpoint:`): each seed either has the outcome
(collapsed, solved, hacked, ...) or not, by a rule fixed in the yaml; each cell's rate
with its exact (Clopper-Pearson) interval and each cell against the baseline by Fisher's
exact test, Holm over the cells (issue 65: an outcome that is bimodal by design is read
as a rate, not only as a difference of means).

    endpoint:
      name: collapsed
      words: its training groups stopped differing and it stopped answering for the last
        4 steps, or it ended more than half its held-out episodes with "I don't know"
      any:                               # the seed has the outcome when any rule holds
        - {eval: idk, above: 0.5}        # share of its held-out episodes at the analysed step
        - {train: [mixed_groups, answered], at_most: 0.0, last: 4}
      expect: less                       # the cells' rate vs the baseline's (Fisher's side)
      added: after the results           # absent: pre-registered

`eval:` names a field of the eval rows (a share or mean over the seed's episodes at the
analysed step) or `idk` (an episode that ended with a final answer that submitted none:
"I don't know"); `train:` names metrics.jsonl fields that must all be at most `at_most` in
each of the seed's `last` optimizer steps up to the analysed one. Exact interval: Clopper
& Pearson 1934, Biometrika 26:404 (scipy.stats.binomtest); exact test: Fisher 1935, The
Design of Experiments, sec. 2 (scipy.stats.fisher_exact); Holm 1979.
"""
from __future__ import annotations

import numpy as np
from scipy import stats as sps

from analysis import estimates as est
from analysis.errors import AnalysisError
from analysis.stats import holm

SIDES = {"less": "less", "greater": "greater", "two-sided": "two-sided"}
# the test's side in words (the report's endpoint table and the endpoint figure)
SIDE_WORDS = {"two-sided": "two-sided", "less": "one-sided, rate below the baseline's",
              "greater": "one-sided, rate above the baseline's"}


def clopper_pearson(k: int, n: int, alpha: float = 0.05) -> list[float]:
    """The exact 1 - alpha interval of a binomial rate k / n."""
    ci = sps.binomtest(int(k), int(n)).proportion_ci(1 - alpha, method="exact")
    return [float(ci.low), float(ci.high)]


def fisher(k_a: int, n_a: int, k_b: int, n_b: int, side: str = "two-sided") -> float:
    """Fisher's exact p that cell a's rate k_a / n_a differs from b's (side: less /
    greater: a's rate below / above b's)."""
    table = [[k_a, n_a - k_a], [k_b, n_b - k_b]]
    return float(sps.fisher_exact(table, alternative=SIDES[side]).pvalue)


def _check(spec, where: str) -> dict:
    if not isinstance(spec, dict) or not spec.get("name") or not spec.get("any"):
        raise AnalysisError(f"{where}: endpoint needs a name and `any:` (a list of rules "
                            "such as {eval: idk, above: 0.5})")
    if spec.get("expect", "two-sided") not in SIDES:
        raise AnalysisError(f"{where}: endpoint.expect is {spec.get('expect')!r}; allowed: "
                            + ", ".join(SIDES))
    for i, r in enumerate(spec["any"]):
        ok = isinstance(r, dict) and (("eval" in r and "above" in r) or
                                      ("train" in r and "at_most" in r and "last" in r))
        if not ok:
            raise AnalysisError(f"{where}: endpoint.any[{i}] is {r!r}; expected {{eval: "
                                "FIELD, above: X}} or {train: [FIELD...], at_most: X, last: N}")
    return spec


def _eval_share(rows: list[dict], field: str) -> float | None:
    if field == "idk":
        vals = [r.get("end_reason") == "answer" and not r.get("answered") for r in rows]
    else:
        vals = [float(r[field]) for r in rows if est.is_number(r.get(field))
                or isinstance(r.get(field), bool)]
    return float(np.mean(vals)) if vals else None


def _holds(rule: dict, run, step: int) -> bool:
    if "eval" in rule:
        rows = [r for r in run.eval_rows() if r["step"] == step
                and r.get("decoding", "sampled") == "sampled"]
        v = _eval_share(rows, rule["eval"])
        return v is not None and v > float(rule["above"])
    fields = [rule["train"]] if isinstance(rule["train"], str) else list(rule["train"])
    m = sorted((x for x in run.metrics_rows() if x["step"] <= step), key=lambda x: x["step"])
    last = m[-int(rule["last"]):]
    return len(last) == int(rule["last"]) and all(
        est.is_number(x.get(f)) and x[f] <= float(rule["at_most"]) for x in last
        for f in fields)


def seed_outcomes(cell, spec: dict, step_of) -> list[dict]:
    """[{seed, outcome, rules: [which rules held]}] of one cell's runs."""
    out = []
    for run in cell.runs:
        step = step_of(run)
        held = [i for i, rule in enumerate(spec["any"]) if _holds(rule, run, step)]
        out.append({"seed": run.seed, "outcome": bool(held), "rules": held})
    return out


def from_spec(spec, sweep, summary: dict, where: str, step=None) -> dict | None:
    """summary["endpoint"]: each cell's count, rate and exact interval; each cell vs the
    baseline by Fisher's exact test (Holm over them: `p_holm`, the one p quoted)."""
    if not spec:
        return None
    spec = _check(spec, where)
    alpha = summary["alpha"]
    labels = {c["label"]: c for c in summary["cells"]}
    cells = []
    for c in sweep.cells:
        if c.label not in labels or not c.runs:
            continue
        seeds = seed_outcomes(c, spec, lambda run: est.select_step(run, step))
        k, n = sum(s["outcome"] for s in seeds), len(seeds)
        cells.append({"label": c.label, "factors": c.factors, "n": n, "k": k,
                      "rate": k / n, "ci": clopper_pearson(k, n, alpha),
                      "seeds": [s["seed"] for s in seeds if s["outcome"]],
                      "by_rule": [sum(i in s["rules"] for s in seeds)
                                  for i in range(len(spec["any"]))]})
    return {"name": spec["name"], "words": " ".join(str(spec.get("words", "")).split()),
            "rules": spec["any"], "expect": spec.get("expect", "two-sided"),
            "added": spec.get("added"), "alpha": alpha, "cells": cells,
            "comparisons": _versus(cells, summary, spec.get("expect", "two-sided"))}


def _versus(cells: list[dict], summary: dict, side: str) -> list[dict]:
    base = next((c for c in cells if c["label"] == summary["baseline_label"]), None)
    if base is None:
        return []
    rows = [{"label": c["label"], "vs": base["label"], "diff": c["rate"] - base["rate"],
             "side": side, "p": fisher(c["k"], c["n"], base["k"], base["n"], side),
             # either direction (a one-sided endpoint's split may go the other way)
             "p_two_sided": fisher(c["k"], c["n"], base["k"], base["n"], "two-sided"),
             "ranks": {"all seeds": _ranks(summary, c, base, keep_outcome=True),
                       "seeds without the outcome":
                       _ranks(summary, c, base, keep_outcome=False)}}
            for c in cells if c is not base]
    for r, pa in zip(rows, holm([r["p"] for r in rows])):
        r["p_quoted"] = float(pa)        # the one p quoted: Fisher's, Holm over the cells
    return rows


def _ranks(summary: dict, c: dict, base: dict, keep_outcome: bool) -> dict | None:
    """Secondary: the metric's seed means of cell c against the baseline's, all seeds or
    only those without the outcome, by the exact two-sample rank test (Jonckheere-
    Terpstra over two groups is Mann-Whitney's U, exact with ties: analysis.trend),
    two-sided; unadjusted."""
    from analysis.trend import jt_test
    by = {x["label"]: x for x in summary["cells"]}

    def means(cell: dict) -> list[float]:
        x = by[cell["label"]]
        return [m for sd, m in zip(x["seeds"], x["seed_means"])
                if keep_outcome or sd not in cell["seeds"]]
    a, b = means(c), means(base)
    if not a or not b:
        return None
    r = jt_test([b, a], "increasing")
    return {"n": len(a), "n_baseline": len(b), "mean": float(np.mean(a)),
            "mean_baseline": float(np.mean(b)), "p": r["p"],
            "p_a_higher": r["p_increasing"]}


def endpoint_table(summary: dict) -> list[str]:
    """The binary per-seed endpoint (analysis.endpoint): per cell the seeds with the
    outcome, the rate with its exact interval, and Fisher's exact p against the baseline
    (Holm over the cells); marked when it was added after the results."""
    from analysis.labels import cell_words, level
    from analysis.tables import fmt, fmt_ci, fmt_p
    e = summary.get("endpoint")
    if not e:
        return []
    lv = level(summary["alpha"])
    vs = {c["label"]: c for c in e["comparisons"]}
    added = f" Added {e['added']}." if e.get("added") else " Pre-registered."
    side = SIDE_WORDS[e["expect"]]
    L = ["", f"A seed counts as **{e['name']}** when {e['words']}. Per cell: the seeds "
         f"that did, their rate with its exact (Clopper-Pearson) {lv} interval, and "
         f"Fisher's exact test against the baseline ({side}; Holm over the cells)."
         f"{added}", "",
         f"| cell | {e['name']} seeds | rate (%) [exact {lv}] | seeds | p |",
         "|---|---:|---:|---|---:|"]
    for c in e["cells"]:
        cmp = vs.get(c["label"])
        L.append(f"| {cell_words(summary, c)} | {c['k']} of {c['n']} | "
                 f"{fmt(c['rate'], True)} {fmt_ci(c['ci'], True)} | "
                 f"{', '.join(map(str, c['seeds'])) or '–'} | "
                 f"{fmt_p(cmp['p_quoted']) if cmp else 'baseline'} |")
    return L


def endpoint_lines(summary: dict) -> list[str]:
    """report.md's section on the binary endpoint (the README's table, analysis.publish)."""
    if not summary.get("endpoint"):
        return []
    e = summary["endpoint"]
    head = f"## Binary endpoint: {e['name']}" + (" (added after the results)"
                                                 if e.get("added") else "")
    return [head] + endpoint_table(summary) + [""]
