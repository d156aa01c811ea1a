"""LaTeX (booktabs) and CSV tables, rendered from the summary dict only, so that every
number in a table is the number in summary.json. Comparison tables have one family
each and four columns, to fit a single-column float."""
from __future__ import annotations

import csv
import math
import re
from pathlib import Path

from analysis.estimates import BEHAVIOUR, RATES
from analysis.hypotheses import decision_words
from analysis.labels import (breakdown_file, breakdown_word, cell_words, comparison_words,
                             differing, env_word, factor_words, hop_words, in_words, level,
                             level_words, own_behaviour)
from analysis.lifelong import KIND

PCT_METRICS = {"correct", "answered", "read_after_hit"}
BEHAVIOUR_TABLE = ["keywords_per_search", "searches", "answer_rate", "idk_rate",
                   "fabricated_source_rate", "edits", "test_runs", "idle_test_runs",
                   "failing_submission_rate", "mean_turns"]
BEHAVIOUR_HEAD = {"keywords_per_search": "Keywords", "searches": "Searches",
                  "answer_rate": "Answered", "idk_rate": "IDK", "fabricated_source_rate":
                  "Fabricated", "edits": "Edits", "test_runs": "Test runs",
                  "idle_test_runs": "Idle runs", "failing_submission_rate": "Failing subm.",
                  "mean_turns": "Turns"}
VERDICT_TEX = {"better": "better", "worse": "worse", "equivalent": "equivalent",
               "inconclusive": "inconclusive", None: "no test"}


# ---------------------------------------------------------------- formatting
def is_pct(summary: dict) -> bool:
    return summary.get("metric", "correct") in PCT_METRICS


def has_curves(summary: dict) -> bool:
    """A held-out learning curve needs three evaluation steps in some cell (two are a
    change, drawn as a paired difference: has_change; an evaluation-only sweep has one)."""
    return any(len((c.get("curve") or {}).get("steps", [])) >= 3 for c in summary["cells"])


def has_change(summary: dict) -> bool:
    """Some cell has a change from its first evaluation (figures.change)."""
    return any((c.get("change") or {}).get(summary["metric"]) for c in summary["cells"])


def has_training(summary: dict) -> bool:
    """Some cell logged optimizer steps (metrics.jsonl): the training figure has data."""
    return any(cur.get("steps") for c in summary["cells"]
               for cur in c.get("train_curves", {}).values())


def behaviour_panels(summary: dict) -> tuple[list[str], dict[str, float]]:
    """The behaviour fields the behaviour figure draws, and those it only names: a field
    that is one point (zero-width interval) at the same value in every cell, such as
    turns = 1 in a one-turn task, has nothing to show."""
    cells = summary["cells"]
    names = [n for n in BEHAVIOUR_TABLE + own_behaviour(summary)
             if any(n in c.get("behaviour", {}) for c in cells)]
    constant = constant_fields(cells, "behaviour", names)
    return [n for n in names if n not in constant], constant


def constant_fields(cells: list[dict], key: str, names: list[str]) -> dict[str, float]:
    """Of `names`, those that every cell's `key` (behaviour, change) holds as one point at
    the same value, with that value."""
    out = {}
    for n in names:
        vs = [(c.get(key) or {}).get(n) for c in cells]
        pts = {(v["mean"], *v["ci"]) for v in vs if v is not None}
        if None not in vs and len(pts) == 1 and len(set(pts.pop())) == 1:
            out[n] = vs[0]["mean"]
    return out


def fmt(x, pct: bool = True, signed: bool = False) -> str:
    """Accuracy-like values in percentage points with one decimal, else 3 decimals."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "--"
    v = 100 * x if pct else x
    d = 1 if pct else (2 if abs(v) >= 1 else 3)
    s = f"{v:+.{d}f}" if signed else f"{v:.{d}f}"
    return s.lstrip("+-") if float(s) == 0 else s


def fmt_ci(ci, pct: bool = True, signed: bool = False) -> str:
    if not ci:
        return "--"
    return f"[{fmt(ci[0], pct, signed)}, {fmt(ci[1], pct, signed)}]"


def fmt_est(v: dict | None, pct: bool = True, signed: bool = False) -> str:
    """An estimate {mean, ci} as 'mean [lo, hi]'; '–' when there is none."""
    if v is None or v.get("mean") is None:
        return "–"
    return f"{fmt(v['mean'], pct, signed)} {fmt_ci(v['ci'], pct, signed)}"


def fmt_p(p) -> str:
    if p is None:
        return "--"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def p_is(p) -> str:
    """'p = 0.008' / 'p < 0.001' (fmt_p in words)."""
    s = fmt_p(p)
    return f"p {s[0]} {s[1:]}" if s.startswith("<") else f"p = {s}"


# characters outside ASCII as plain pdflatex reads them (issue 65: a raw λ or − in a
# caption stops pdflatex): math symbols in math mode, dashes and quotes as TeX ligatures
TEX_UNICODE = {"λ": r"$\lambda$", "−": "$-$", "×": r"$\times$", "±": r"$\pm$",
               "σ": r"$\sigma$", "τ": r"$\tau$", "Δ": r"$\Delta$", "α": r"$\alpha$",
               "β": r"$\beta$", "μ": r"$\mu$", "µ": r"$\mu$", "ε": r"$\epsilon$",
               "²": "$^{2}$", "³": "$^{3}$", "⁴": "$^{4}$", "≤": r"$\leq$", "≥": r"$\geq$",
               "≈": r"$\approx$", "≠": r"$\neq$", "→": r"$\to$", "←": r"$\leftarrow$",
               "∞": r"$\infty$", "·": r"$\cdot$", "√": r"$\surd$", "∈": r"$\in$",
               "–": "--", "—": "---", "“": "``", "”": "''", "‘": "`", "’": "'",
               "…": r"\ldots{}", "†": r"\dag{}", "é": r"\'e", "è": r"\`e", "ü": r'\"u',
               "ö": r'\"o', "ä": r'\"a', "ß": r"\ss{}", "°": r"$^{\circ}$", "\u00a0": "~",
               "⁹": "$^{9}$", "¹": "$^{1}$", "⁰": "$^{0}$"}


def tex_escape(s) -> str:
    s = str(s)
    for a, b in (("\\", r"\textbackslash{}"), ("&", r"\&"), ("%", r"\%"), ("$", r"\$"),
                 ("#", r"\#"), ("_", r"\_"), ("{", r"\{"), ("}", r"\}"), ("~", r"\~{}"),
                 ("^", r"\^{}")):
        s = s.replace(a, b)
    return "".join(c if ord(c) < 128 else TEX_UNICODE.get(c, _ascii(c)) for c in s)


def _ascii(c: str) -> str:
    """A character TEX_UNICODE lacks: its ASCII base letter (NFKD), else '?'."""
    import unicodedata
    base = unicodedata.normalize("NFKD", c).encode("ascii", "ignore").decode()
    return base or "?"


def factor_name(k: str, summary: dict | None = None) -> str:
    if summary and k in summary.get("short_names", {}):
        return summary["short_names"][k]
    return k.removesuffix(".name")


def _zero_point(v) -> bool:
    """An estimate that is 0 with a zero-width interval ({mean or delta, ci})."""
    if not v or not v.get("ci") or None in v["ci"]:
        return False
    m = v.get("mean", v.get("delta"))
    return m == 0 and v["ci"][0] == 0 and v["ci"][1] == 0


def not_drawn(summary: dict) -> dict[str, str]:
    """figure name -> why it is not drawn: a figure of a field constant or zero in every
    cell, or one that repeats a table, says nothing a reader needs (issue 46: the report
    says so instead). The figures and the report read this one rule."""
    cells, why = summary["cells"], {}
    comps = [c for c in summary.get("comparisons", [])
             if c["family"] == "confirmatory" and c.get("delta") is not None]
    if comps and all(_zero_point(c) for c in comps):
        why["forest"] = "every difference to the baseline is 0 with a zero-width interval"
    primary = summary.get("primary") or []
    if primary and all(_zero_point(q) for q in primary):
        why["finding"] = ("every primary difference is 0 with a zero-width interval "
                          "(hypotheses and comparisons tables)")
    if len(summary.get("factors") or []) <= 1:
        why["factor_intervals"] = "one factor: its levels' means are the cells' (results table)"
    if len({v for c in cells for v in c.get("seed_means", [])}) <= 1:
        why["seeds"] = "every seed of every cell has the same mean"
    metric = summary.get("metric", "correct")
    if has_change(summary) and all(
            _zero_point(c["change"][metric]) for c in cells
            if (c.get("change") or {}).get(metric)) and not _changed_fields(summary):
        why["change"] = "no cell changed in the metric or any behaviour field"
    if has_curves(summary) and len({round(v, 12) for c in cells
                                    for v in (c.get("curve") or {}).get("mean", [])}) <= 1:
        why["learning_curves"] = "the metric is the same at every evaluation step"
    return why


def _changed_fields(summary: dict) -> list[str]:
    """Behaviour fields whose change is not a single 0 in every cell."""
    cells = [c for c in summary["cells"] if c.get("change")]
    names = {n for c in cells for n in c["change"] if n != summary.get("metric")}
    same = constant_fields(cells, "change", sorted(names))
    return sorted(n for n in names if same.get(n) != 0)


def baseline_comparisons(summary: dict) -> dict:
    """cell label -> its confirmatory comparison against the baseline."""
    return {c["a_label"]: c for c in summary["comparisons"]
            if c["family"] == "confirmatory" and c.get("kind") == "cell"}


def legend_text(summary: dict) -> str:
    return "; ".join(f"{tex_escape(factor_words(summary, k))} = \\texttt{{{tex_escape(k)}}}"
                     for k in summary.get("factors") or [])


COLUMN_CHARS = 56     # text of a row that fits a single column at \\footnotesize (3.3 in)


def visible(tex: str) -> str:
    """The characters a LaTeX cell prints (commands, braces and math marks removed)."""
    return re.sub(r"\\[a-zA-Z]+|[{}$^]", "", tex)


def stacked(value: str, ci: str) -> str:
    """A value over its interval in one cell (a nested tabular; no extra package), so
    that tables of intervals stay narrow."""
    return (rf"\begin{{tabular}}[t]{{@{{}}r@{{}}}}{value}\\ "
            rf"{{[}}{ci[1:-1]}{{]}}\end{{tabular}}")


def cell_width(tex: str) -> int:
    """Printed characters of a cell: the longest line of a stacked cell."""
    inner = re.sub(r"\\(begin|end)\{tabular\}(\[t\])?(\{@\{\}r@\{\}\})?", "", tex)
    return max(len(visible(part)) for part in inner.split("\\\\"))


def tex_minus(cell: str) -> str:
    """A minus sign, not a hyphen, before digits that are not part of a word."""
    return re.sub(r"(?<![A-Za-z0-9.])-(?=\d)", "$-$", cell)


def _tabular(header: list[str], rows: list[list[str]], caption: str, label: str,
             align: str, wide: bool = False) -> str:
    """A booktabs float; full width (table*) when asked or when a row is too long for
    one column."""
    rows = [[tex_minus(c) for c in r] for r in rows]
    wide = wide or any(sum(cell_width(c) + 1 for c in r) > COLUMN_CHARS
                       for r in rows + [header])
    env = "table*" if wide else "table"
    lines = [rf"\begin{{{env}}}[t]", r"\centering", r"\footnotesize",
             r"\setlength{\tabcolsep}{3pt}",
             rf"\caption{{{caption}}}", rf"\label{{{label}}}",
             rf"\begin{{tabular}}{{{align}}}", r"\toprule",
             " & ".join(header) + r" \\", r"\midrule"]
    lines += [" & ".join(r) + r" \\" for r in rows]
    lines += [r"\bottomrule", r"\end{tabular}", rf"\end{{{env}}}", ""]
    return "\n".join(lines)


def _write_csv(path: Path, header: list[str], rows: list[list]) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)


def p_words(summary: dict) -> str:
    """How the table's p were made: one phrase per distinct kind (a comparison that is a
    pre-registered hypothesis is quoted with the hypothesis' p: analysis.hypotheses.quote)."""
    kinds: dict = {}                       # words -> the hypotheses quoted with them
    for c in baseline_comparisons(summary).values():
        if c.get("p_quoted_words"):
            words = c["p_quoted_words"].split(": ", 1)[-1]
            kinds.setdefault(words, []).extend([c["hypothesis"]] if c.get("hypothesis") else [])
    return "; ".join(f"{w} ({', '.join(sorted(h))})" if h else w
                     for w, h in kinds.items()) or "Holm-adjusted p"


def _interval_words(summary: dict) -> str:
    return (f"each value over its {level(summary['alpha'], tex=True)} t interval from the "
            "seed, question and residual "
            "variance (method of moments; one-seed cells: question noise only)")


# ---------------------------------------------------------------- tables
def results_table(summary: dict, out: Path) -> None:
    """One row per cell: seeds, questions, mean [CI], difference to the baseline [CI]."""
    pct = is_pct(summary)
    factors = summary["factors"]
    base = baseline_comparisons(summary)
    unit = " (\\%)" if pct else ""
    header = [tex_escape(factor_words(summary, f)) for f in factors] + [
        "$S$", "$Q$", f"Mean{unit}", r"$\Delta$"]
    rows, csv_rows = [], []
    for c in summary["cells"]:
        comp = base.get(c["label"])
        if comp is None:
            delta = "baseline"
        else:
            mark = "$^{*}$" if comp.get("verdict") in ("better", "worse") else ""
            delta = stacked(f"{fmt(comp['delta'], pct, True)}{mark}",
                            fmt_ci(comp["ci"], pct, True))
        rows.append([tex_escape(level_words(summary, f, c["factors"][f])) for f in factors]
                    + [str(c["n_seeds"]), str(c["n_questions"]),
                       stacked(fmt(c["mean"], pct) + ("$^{\\dagger}$" if c["question_noise_only"]
                                                      else ""), fmt_ci(c["ci"], pct)),
                       delta])
        csv_rows.append([c["factors"][f] for f in factors] + [
            c["n_seeds"], c["n_questions"], c["samples"], c["mean"], c["ci"][0], c["ci"][1],
            None if comp is None else comp["delta"],
            None if comp is None or not comp["ci"] else comp["ci"][0],
            None if comp is None or not comp["ci"] else comp["ci"][1],
            None if comp is None else comp.get("p_quoted", comp["p_adj"]),
            None if comp is None else comp["verdict"]])
    words = summary.get("metric_words", summary["metric"])
    legend = legend_text(summary)
    caption = (f"{words.capitalize()} by cell: mean over seeds of per-seed means over "
               f"questions; {_interval_words(summary)}. $S$ seeds, $Q$ questions. "
               f"$\\Delta$: difference to the baseline "
               f"({tex_escape(in_words(summary, summary['baseline']))}); $^{{*}}$: "
               f"$p<{summary['alpha']}$ ({tex_escape(p_words(summary))}). $^{{\\dagger}}$: one seed, question noise only."
               + (f" Factors: {legend}." if legend else ""))
    (out / "results.tex").write_text(_tabular(header, rows, caption, "tab:results",
                                              "l" * len(factors) + "rrrr"))
    _write_csv(out / "results.csv", factors + [
        "n_seeds", "n_questions", "samples", "mean", "ci_lo", "ci_hi", "delta_vs_baseline",
        "delta_ci_lo", "delta_ci_hi", "p", "verdict"], csv_rows)


MAIN_MARK = "\x00m"   # a main effect's row: $^{m}$ after escaping (caption says so)


def _row_words(summary: dict, c: dict) -> str:
    """A confirmatory row: the cell's side in words (the caption names the baseline);
    a pair of the exploratory family: both sides."""
    if c["family"] != "confirmatory" or "a" not in c:
        return comparison_words(summary, c)
    keys = differing(c["a"], c["b"]) or list(c["a"])
    text = (in_words(summary, c["a"], keys) if len(keys) == 1 else
            "/".join(level_words(summary, k, c["a"][k]) for k in keys))
    return text + (MAIN_MARK if c.get("kind") == "main_effect" else "")


def _comparison_rows(comps, pct, summary=None):
    rows = []
    for c in comps:
        name = tex_escape(c["tex_label"] if summary is None else _row_words(summary, c)
                          ).replace(MAIN_MARK, "$^{m}$")
        if c["delta"] is None:
            rows.append([name, "--", "--", "not compared"])
            continue
        rows.append([name, stacked(fmt(c["delta"], pct, True), fmt_ci(c["ci"], pct, True)),
                     fmt_p(c.get("p_quoted", c["p_adj"])),
                     VERDICT_TEX.get(c["verdict"], str(c["verdict"]))])
    return rows


def comparisons_table(summary: dict, out: Path) -> None:
    """comparisons.tex: the confirmatory family (Holm); comparisons_all_pairs.tex: the
    exploratory family (Benjamini-Hochberg) when requested; comparisons.csv: both."""
    pct = is_pct(summary)
    unit = " (points)" if pct else ""
    words = summary.get("metric_words", summary["metric"])
    sesoi = fmt(summary.get("sesoi"), pct)
    for family, name, corr, short in (
            ("confirmatory", "comparisons", "Holm", "Holm"),
            ("all_pairs", "comparisons_all_pairs", "Benjamini--Hochberg", "BH")):
        comps = [c for c in summary["comparisons"] if c["family"] == family]
        if family == "all_pairs" and not comps:
            continue
        header = ["Comparison", r"$\Delta$", rf"$p_\mathrm{{{short}}}$",
                  "Verdict"]
        order = "/".join(factor_words(summary, f) for f in summary["factors"])
        against = (f"against the baseline "
                   f"({tex_escape(in_words(summary, summary['baseline']))}); rows name "
                   "the factors that differ from it (several: their levels as "
                   f"{tex_escape(order)}; $^{{m}}$: a factor's main effect)"
                   if family == "confirmatory"
                   else "between every pair of cells (exploratory); rows name the factors "
                   "that differ")
        caption = (f"Differences in {words}{unit} {against}, on the questions both cells "
                   f"evaluated; {_interval_words(summary)}; $p$ adjusted by {corr}. "
                   f"Better/worse: adjusted $p<{summary['alpha']}$; equivalent: the "
                   f"{level(2 * summary['alpha'], tex=True)} interval lies within "
                   f"$\\pm${sesoi}{unit} (TOST).")
        (out / f"{name}.tex").write_text(_tabular(header, _comparison_rows(comps, pct, summary),
                                                  caption, f"tab:{name}", "lrrl"))
    _write_csv(out / "comparisons.csv", [
        "family", "correction", "kind", "a", "b", "label", "n_questions", "delta", "ci_lo",
        "ci_hi", "se", "df", "p", "p_adj", "mde", "verdict", "p_improvement", "sim_ci_lo",
        "sim_ci_hi", "seeds_needed", "warnings"],
        [[c["family"], c["correction"], c.get("kind"), c["a_label"], c["b_label"],
          c["label"], c["n_questions"], c["delta"], *(c["ci"] or [None, None]), c["se"],
          c["df"], c["p"], c["p_adj"], c["mde"], c["verdict"], c.get("p_improvement"),
          *(c.get("ci_simultaneous") or [None, None]), c.get("seeds_needed"),
          "; ".join(c["warnings"])] for c in summary["comparisons"]])


def _upper(words: str) -> str:
    """The first letter upper case, the rest as written (a world's label as a heading)."""
    return words[:1].upper() + words[1:]


def behaviour_table(summary: dict, out: Path) -> None:
    """The behaviour table of the case study, each value with its 95% interval; a
    world's own columns (environment.json) after the built-in ones, headed by its label."""
    own = (summary.get("world") or {}).get("behaviour_labels") or {}
    names = [n for n in BEHAVIOUR_TABLE + list(own)
             if any(n in c.get("behaviour", {}) for c in summary["cells"])]
    extra = [n for n in BEHAVIOUR if n not in BEHAVIOUR_TABLE
             and any(n in c.get("behaviour", {}) for c in summary["cells"])]
    header = ["Cell"] + [_upper(tex_escape(own[n])) if n in own else BEHAVIOUR_HEAD[n]
                         + (" (\\%)" if n in RATES else "") for n in names]
    rows, csv_rows = [], []
    for c in summary["cells"]:
        vals = [c["behaviour"].get(n) for n in names]
        rows.append([tex_escape(cell_words(summary, c))] + [
            "--" if v is None else stacked(fmt(v["mean"], n in RATES),
                                           fmt_ci(v["ci"], n in RATES))
            for n, v in zip(names, vals)])
        row = [c["label"]]
        for v in vals + [c["behaviour"].get(n) for n in extra]:
            row += [None, None, None] if v is None else [v["mean"], *v["ci"]]
        csv_rows.append(row)
    caption = ("Behaviour at the analysed step (mean over seeds of per-seed means over "
               f"questions), {_interval_words(summary)}. Keywords per search; searches per "
               "episode; episodes with an answer; episodes ending in \\emph{I don't know}; "
               "episodes citing a message never seen; turns per episode."
               + "".join(f" {_upper(tex_escape(own[n]))}: the world's own column "
                         f"\\texttt{{{tex_escape(n)}}}." for n in names if n in own))
    (out / "behaviour.tex").write_text(_tabular(header, rows, caption, "tab:behaviour",
                                                "l" + "r" * len(names), wide=True))
    _write_csv(out / "behaviour.csv", ["cell"] + [f"{x}_{n}" for n in names + extra
                                                  for x in ("mean", "ci_lo", "ci_hi")],
               csv_rows)


def hops_table(summary: dict, out: Path) -> None:
    pct = is_pct(summary)
    hops = summary.get("hops", [])
    stem = breakdown_file(summary)    # the world's breakdown_label (issue 63)
    if not hops:     # one task level: no breakdown (analysis/summary.py); none left over
        for name in (f"{stem}.tex", f"{stem}.csv"):
            (out / name).unlink(missing_ok=True)
        return
    word = breakdown_word(summary)
    header = ["Cell"] + [hop_words(h, word) for h in hops]
    rows, csv_rows = [], []
    for c in summary["cells"]:
        cells = [c["by_hops"].get(h) for h in hops]
        rows.append([tex_escape(cell_words(summary, c))] + [
            "--" if v is None else stacked(fmt(v["mean"], pct), fmt_ci(v["ci"], pct))
            for v in cells])
        row = [c["label"]]
        for v in cells:
            row += [None, None, None] if v is None else [v["mean"], *v["ci"]]
        csv_rows.append(row)
    words = summary.get("metric_words", summary["metric"])
    caption = (f"{words.capitalize()} by {word}, "
               f"{_interval_words(summary)}.")
    (out / f"{stem}.tex").write_text(_tabular(header, rows, caption, f"tab:{stem}",
                                              "l" + "r" * len(hops), wide=len(hops) > 2))
    _write_csv(out / f"{stem}.csv", ["cell"] + [f"{x}_{h}" for h in hops
                                                for x in ("mean", "ci_lo", "ci_hi")], csv_rows)


def mde_tables(summary: dict, out: Path) -> None:
    t = summary.get("mde_table")
    if not t:
        return
    pct = is_pct(summary)
    plan = summary["planning"]
    header = ["Seeds"] + [f"$Q={q}$" for q in t["questions"]]
    ranges = [r.get("range") or [None] * len(r["mde"]) for r in t["rows"]]
    rows = [[str(r["seeds"])] + [fmt(v, pct) + (f" {fmt_ci(g, pct)}" if g else "")
                                 for v, g in zip(r["mde"], rg)]
            for r, rg in zip(t["rows"], ranges)]
    need = plan["seeds_needed"]["seeds"]
    rows.append([f"Seeds for {fmt(summary['sesoi'], pct)}"]
                + [">50" if s is None else str(s) for s in need])
    unit = " (points)" if pct else ""
    caption = (f"Minimum detectable difference{unit} between two cells (two-sided "
               f"$\\alpha={summary['alpha']}$, {int(100 * summary['power'])}\\% power) by "
               "seeds per cell and questions, from the variance components of this sweep, "
               "with its 95\\% range from the components' uncertainty (their df); last row: seeds per cell needed to detect the smallest effect of interest.")
    (out / "mde.tex").write_text(_tabular(header, rows, caption, "tab:mde",
                                          "l" + "r" * len(t["questions"]),
                                          wide=len(t["questions"]) > 4))
    _write_csv(out / "mde.csv", ["seeds"] + [f"q{q}{x}" for q in t["questions"]
                                             for x in ("", "_lo", "_hi")],
               [[r["seeds"]] + [x for v, g in zip(r["mde"], rg) for x in (v, *(g or (None,) * 2))]
                for r, rg in zip(t["rows"], ranges)])


def hypotheses_tables(summary: dict, out: Path) -> None:
    hyps = summary.get("hypotheses")
    if not hyps:
        return
    pct = is_pct(summary)
    rows, csv_rows = [], []
    for h in hyps:
        for i, q in enumerate(h["parts"]):
            first = i == 0
            rows.append([h["name"] if first else "", h["join"] if first else "",
                         tex_escape(f"{q['label']} vs {q['vs']} ({q['expect']})"),
                         fmt(q["delta"], pct, True), fmt_ci(q["ci"], pct, True),
                         fmt_p(h.get("p_decision")) if first else "",
                         (h["verdict"] or "") if first else ""])
            csv_rows.append([h["name"], h["join"], q["label"], q["vs"], q["expect"],
                             q["delta"], *(q["ci"] or [None, None]), q["p"], q["p_perm"],
                             q["direction_ok"], h["p"], h["p_holm"], h["p_perm"],
                             h["p_perm_holm"], h.get("p_decision"), h["verdict"]])
    unit = " (points)" if pct else ""
    lv = level(summary["alpha"], tex=True)
    caption = ("Pre-registered hypotheses: each part's difference" + unit + f" with its {lv} "
               "interval; $p$: the hypothesis' joint p by the stated rule (all: "
               "intersection-union, any: Bonferroni), "
               + tex_escape(decision_words(hyps[0])) + ".")
    (out / "hypotheses.tex").write_text(_tabular(
        ["Hypothesis", "Join", "Part", "$\\Delta$", f"{lv} CI", "$p$", "Verdict"], rows,
        caption, "tab:hypotheses", "lllrrrl", wide=True))
    _write_csv(out / "hypotheses.csv",
               ["hypothesis", "join", "part", "vs", "expect", "delta", "ci_lo", "ci_hi", "p",
                "p_perm", "direction_ok", "joint_p", "joint_p_holm", "joint_p_perm",
                "joint_p_perm_holm", "p_decision", "verdict"], csv_rows)


LIFELONG_HEAD = {"library_size": "Library", "skills_used": "Skills used",
                 "solve_rate": "Held-out solved (\\%)", "forgetting": "Forgotten (\\%)"}


def has_lifelong(summary: dict) -> bool:
    """A design with skill-library cells (analysis.lifelong): lifelong figure and table."""
    return any(c.get("lifelong") for c in summary["cells"])


def lifelong_table(summary: dict, out: Path) -> None:
    """The lifelong quantities at each cell's last step, with 95% intervals: the eval
    quantities over seeds and questions (bounded to [0, 1]), the library ones over seeds
    (log scale, never below 0); '--' where a cell has none."""
    if not has_lifelong(summary):
        return
    names = list(LIFELONG_HEAD)
    rows, csv_rows = [], []
    for c in summary["cells"]:
        last = c["lifelong"]["last"]
        vals = [last.get(n) for n in names]
        rows.append([tex_escape(cell_words(summary, c))] + [
            "--" if v is None else stacked(fmt(v["mean"], KIND[n] == "rate"),
                                           fmt_ci(v["ci"], KIND[n] == "rate"))
            for n, v in zip(names, vals)])
        row = [c["label"]]
        for v in vals:
            row += [None] * 5 if v is None else [v["step"], v["mean"],
                                                  *(v["ci"] or [None, None]), v["n_seeds"]]
        csv_rows.append(row)
    env = summary.get("env")
    caption = (f"Lifelong quantities at the last step: skills in the library and skills "
               f"used per training episode (metrics.jsonl; "
               f"{level(summary['alpha'], tex=True)} t interval over seeds, "
               f"log scale), {env_word('held-out solve rate', env)} and "
               f"{env_word('held-out tasks forgotten', env)} (eval rows; "
               f"{_interval_words(summary)}).")
    (out / "lifelong.tex").write_text(_tabular(["Cell"] + [LIFELONG_HEAD[n] for n in names],
                                               rows, caption, "tab:lifelong", "lrrrr"))
    _write_csv(out / "lifelong.csv", ["cell"] + [f"{x}_{n}" for n in names for x in (
        "step", "mean", "ci_lo", "ci_hi", "n_seeds")], csv_rows)


def write_all(summary: dict, out: Path) -> list[Path]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    results_table(summary, out)
    comparisons_table(summary, out)
    behaviour_table(summary, out)
    hops_table(summary, out)
    mde_tables(summary, out)
    hypotheses_tables(summary, out)
    lifelong_table(summary, out)
    return sorted(out.glob("*.tex")) + sorted(out.glob("*.csv"))
