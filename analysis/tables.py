"""LaTeX (booktabs) and CSV tables, rendered from the summary dict only, so that every
number in a table is the number in summary.json."""
from __future__ import annotations

import csv
import math
from pathlib import Path

PCT_METRICS = {"correct", "answered", "read_after_hit"}


# ---------------------------------------------------------------- formatting
def is_pct(summary: dict) -> bool:
    return summary.get("metric", "correct") in PCT_METRICS


def fmt(x, pct: bool = True, signed: bool = False) -> str:
    """Accuracy-like values in percentage points with one decimal, else 3 decimals."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "--"
    v = 100 * x if pct else x
    d = 1 if pct else 3
    s = f"{v:+.{d}f}" if signed else f"{v:.{d}f}"
    return s.lstrip("+-") if float(s) == 0 else s


def fmt_ci(ci, pct: bool = True, signed: bool = False) -> str:
    return f"[{fmt(ci[0], pct, signed)}, {fmt(ci[1], pct, signed)}]"


def fmt_p(p) -> str:
    if p is None:
        return "--"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def stars(p_adj, alpha: float = 0.05) -> str:
    if p_adj is None:
        return ""
    return "***" if p_adj < 0.001 else "**" if p_adj < 0.01 else "*" if p_adj < alpha else ""


def tex_escape(s) -> str:
    s = str(s)
    for a, b in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("$", r"\$"),
                 ("#", r"\#"), ("_", r"\_"), ("{", r"\{"), ("}", r"\}"), ("~", r"\~{}"),
                 ("^", r"\^{}")):
        s = s.replace(a, b)
    return s


def factor_name(k: str) -> str:
    return k.removesuffix(".name")


def baseline_comparisons(summary: dict) -> dict:
    """cell label -> its confirmatory comparison against the baseline."""
    return {c["a_label"]: c for c in summary["comparisons"]
            if c["family"] == "confirmatory" and c.get("kind") == "cell"}


def _tabular(header: list[str], rows: list[list[str]], caption: str, label: str,
             align: str | None = None) -> str:
    align = align or "l" * (len(header) - 1) + "r"
    lines = [r"\begin{table}[t]", r"\centering", r"\small",
             rf"\caption{{{caption}}}", rf"\label{{{label}}}",
             rf"\begin{{tabular}}{{{align}}}", r"\toprule",
             " & ".join(header) + r" \\", r"\midrule"]
    lines += [" & ".join(r) + r" \\" for r in rows]
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]
    return "\n".join(lines)


def _write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)


# ---------------------------------------------------------------- tables
def results_table(summary: dict, out: Path) -> None:
    """Main table: one row per cell, mean [CI], delta vs baseline [CI] with Holm marks;
    the best mean in bold."""
    pct = is_pct(summary)
    factors = summary["factors"]
    base = baseline_comparisons(summary)
    best = max(c["mean"] for c in summary["cells"])
    unit = " (\\%)" if pct else ""
    header = [tex_escape(factor_name(f)) for f in factors] + [
        "Seeds", f"Mean{unit} [95\\% CI]", r"$\Delta$ vs baseline [95\% CI]"]
    rows, csv_rows = [], []
    for c in summary["cells"]:
        mean = fmt(c["mean"], pct)
        if c["mean"] == best:
            mean = rf"\textbf{{{mean}}}"
        comp = base.get(c["label"])
        if comp is None:
            delta_tex = "baseline"
        else:
            delta_tex = (f"{fmt(comp['delta'], pct, True)}$^{{{stars(comp['p_adj'])}}}$ "
                         f"{fmt_ci(comp['ci'], pct, True)}" if stars(comp["p_adj"]) else
                         f"{fmt(comp['delta'], pct, True)} {fmt_ci(comp['ci'], pct, True)}")
        rows.append([tex_escape(c["factors"][f]) for f in factors]
                    + [str(c["n_seeds"]), f"{mean} {fmt_ci(c['ci'], pct)}", delta_tex])
        csv_rows.append([c["factors"][f] for f in factors] + [
            c["n_seeds"], c["n_questions"], c["mean"], c["ci"][0], c["ci"][1],
            c["ci_analytic"][0], c["ci_analytic"][1],
            None if comp is None else comp["delta"],
            None if comp is None else comp["ci"][0], None if comp is None else comp["ci"][1],
            None if comp is None else comp["p_adj"], None if comp is None else comp["verdict"]])
    caption = (f"{tex_escape(summary['metric'])} at the last evaluated step: mean over seeds "
               "of per-seed means over questions (per-question means over samples first); "
               f"two-level bootstrap 95\\% CIs (B={summary['bootstrap']['B']}). "
               f"$\\Delta$ against {tex_escape(summary['baseline_label'])}; "
               "$^{*}$, $^{**}$, $^{***}$: Holm-adjusted $p<0.05, 0.01, 0.001$. "
               "Best mean in bold.")
    (out / "results.tex").write_text(_tabular(header, rows, caption, "tab:results",
                                              "l" * len(factors) + "rrr"))
    _write_csv(out / "results.csv", factors + [
        "n_seeds", "n_questions", "mean", "ci_lo", "ci_hi", "ci_analytic_lo",
        "ci_analytic_hi", "delta_vs_baseline", "delta_ci_lo", "delta_ci_hi", "p_holm",
        "verdict"], csv_rows)


def comparisons_table(summary: dict, out: Path) -> None:
    pct = is_pct(summary)
    header = ["A", "B", r"$\Delta$ [95\% CI]", "$p$", r"$p_\mathrm{adj}$", "MDE", "Verdict"]
    rows, csv_rows = [], []
    for c in summary["comparisons"]:
        rows.append([tex_escape(c["a_label"]), tex_escape(c["b_label"]),
                     f"{fmt(c['delta'], pct, True)} {fmt_ci(c['ci'], pct, True)}",
                     fmt_p(c["p"]), fmt_p(c["p_adj"]) + (f"$^{{{stars(c['p_adj'])}}}$"
                                                          if stars(c["p_adj"]) else ""),
                     fmt(c["mde"], pct), c["verdict"]])
        csv_rows.append([c["family"], c["correction"], c.get("kind"), c["a_label"],
                         c["b_label"], c["delta"], c["ci"][0], c["ci"][1], c["p"],
                         c["p_adj"], c["mde"], c["verdict"], c.get("p_improvement"),
                         *(c.get("ci_simultaneous") or [None, None]),
                         c.get("seeds_needed")])
    caption = ("Paired differences A $-$ B (questions shared, seeds resampled within "
               "cells). Confirmatory family (each cell and factor main effect vs the "
               "baseline): Holm; all pairs: Benjamini--Hochberg. Non-significant "
               "differences below the minimum detectable effect (MDE, 80\\% power) are "
               "inconclusive.")
    (out / "comparisons.tex").write_text(_tabular(header, rows, caption, "tab:comparisons",
                                                  "llrrrrl"))
    _write_csv(out / "comparisons.csv", [
        "family", "correction", "kind", "a", "b", "delta", "ci_lo", "ci_hi", "p", "p_adj",
        "mde", "verdict", "p_improvement", "sim_ci_lo", "sim_ci_hi", "seeds_needed"],
        csv_rows)


def behaviour_table(summary: dict, out: Path) -> None:
    names = []
    for c in summary["cells"]:
        for k in c.get("behaviour", {}):
            if k not in names:
                names.append(k)
    rnames = []
    for c in summary["cells"]:
        for k in c.get("reward", {}):
            if k not in rnames:
                rnames.append(k)
    header = ["Cell"] + [tex_escape(n) for n in names + rnames]
    rows, csv_rows = [], []
    for c in summary["cells"]:
        vals = [c["behaviour"].get(n, {}).get("mean") for n in names] + \
               [c["reward"].get(n, {}).get("mean") for n in rnames]
        rows.append([tex_escape(c["label"])] + [fmt(v, False) for v in vals])
        csv_rows.append([c["label"]] + vals)
    caption = ("Behaviour metrics and reward components at the analysed step (mean over "
               "seeds of per-seed means over questions).")
    (out / "behaviour.tex").write_text(_tabular(header, rows, caption, "tab:behaviour",
                                                "l" + "r" * (len(header) - 1)))
    _write_csv(out / "behaviour.csv", ["cell"] + names + rnames, csv_rows)


def hops_table(summary: dict, out: Path) -> None:
    pct = is_pct(summary)
    hops = summary.get("hops", [])
    header = ["Cell"] + [f"{h} hop{'s' if h != '1' else ''}" for h in hops]
    rows, csv_rows = [], []
    for c in summary["cells"]:
        cells = [c["by_hops"].get(h) for h in hops]
        rows.append([tex_escape(c["label"])] + [
            "--" if v is None else f"{fmt(v['mean'], pct)} {fmt_ci(v['ci'], pct)}"
            for v in cells])
        row = [c["label"]]
        for v in cells:
            row += [None, None, None] if v is None else [v["mean"], *v["ci"]]
        csv_rows.append(row)
    caption = "Accuracy by hop count with two-level bootstrap 95\\% CIs."
    (out / "hops.tex").write_text(_tabular(header, rows, caption, "tab:hops",
                                           "l" + "r" * len(hops)))
    _write_csv(out / "hops.csv", ["cell"] + [f"{x}_{h}" for h in hops
                                             for x in ("mean", "ci_lo", "ci_hi")], csv_rows)


def mde_tables(summary: dict, out: Path) -> None:
    t = summary.get("mde_table")
    if not t:
        return
    pct = is_pct(summary)
    header = ["Seeds per cell"] + [f"{q} questions" for q in t["questions"]]
    rows = [[str(r["seeds"])] + [fmt(v, pct) for v in r["mde"]] for r in t["rows"]]
    caption = ("Minimum detectable difference between two cells (two-sided $\\alpha=0.05$, "
               "80\\% power) by seeds per cell and questions, from the seed, residual and "
               "question-by-cell variance estimated on this sweep.")
    (out / "mde.tex").write_text(_tabular(header, rows, caption, "tab:mde",
                                          "l" + "r" * len(t["questions"])))
    _write_csv(out / "mde.csv", ["seeds"] + [f"q{q}" for q in t["questions"]],
               [[r["seeds"]] + r["mde"] for r in t["rows"]])


def write_all(summary: dict, out: Path) -> list[Path]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    results_table(summary, out)
    comparisons_table(summary, out)
    behaviour_table(summary, out)
    hops_table(summary, out)
    mde_tables(summary, out)
    return sorted(out.glob("*.tex")) + sorted(out.glob("*.csv"))
