"""Regenerate an experiment's committed results from its committed inputs.

    python -m analysis.publish experiments/<name> [--sweep outputs/multirun/<name>]

With --sweep, first copy the sweep's analysis inputs to experiments/<name>/results/runs
(analysis.export). Then run the analysis of results/runs (and of the run directories
listed under `include:` in experiments/<name>/analysis.yaml, relative to it: runs this
experiment reuses from another) into results/report, with the settings of that
analysis.yaml, and rewrite the headline table of experiments/<name>/README.md between its
`<!-- results:begin -->` and `<!-- results:end -->` markers from
results/report/summary.json, after running the experiment's own scripts (analysis.yaml
`scripts:`); last, render the README's findings templates and those of the index READMEs
(analysis/claims.py), so that no number in a README is typed by hand.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from analysis import claims, cli
from analysis import figures as figs
from analysis.collect import AnalysisError, read_config
from analysis.estimates import BEHAVIOUR, RATES
from analysis import hygiene
from analysis.endpoint import endpoint_table
from analysis.export import export
from analysis.labels import behaviour_words, cell_words, in_words, level
from analysis.tables import (baseline_comparisons, fmt, fmt_ci, fmt_est, fmt_p, has_change,
                             has_curves, has_lifelong, has_training, is_pct, not_drawn,
                             p_words)

BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"


# behaviour columns of the headline table unless analysis.yaml names others
# (`headline_behaviour:`, names of analysis/estimates.py BEHAVIOUR)
HEADLINE_BEHAVIOUR = ("answer_rate", "idk_rate")
SHORT_WORDS = {"idk_rate": "\"I don't know\""}


def _cell_row(c: dict, comp: dict | None, metric: str, pct: bool,
              behaviour: tuple = HEADLINE_BEHAVIOUR) -> str:
    beh = c.get("behaviour", {})
    vs = (["baseline", "", ""] if comp is None else
          [f"{fmt(comp['delta'], pct, True)} {fmt_ci(comp['ci'], pct, True)}",
           fmt_p(comp.get("p_quoted", comp["p_adj"])) + (f" ({comp['hypothesis']})"
                                                         if comp.get("hypothesis") else ""),
           comp["verdict"] or "no test"])
    cols = [c["words"], f"{c['n_seeds']} x {c['n_questions']}", fmt_est(c, pct),
            fmt_est(c.get("change", {}).get(metric), pct, True),
            *(fmt_est(beh.get(n), n in RATES) for n in behaviour), *vs]
    return "| " + " | ".join(cols) + " |"


def _behaviour_head(behaviour: tuple, env: str | None = None) -> str:
    return " | ".join(SHORT_WORDS.get(n, behaviour_words(n, env)) + (" (%)" if n in RATES else "")
                      for n in behaviour)


def compute_table(summary: dict, pct: bool) -> list[str]:
    """Training compute and what it bought: sampled tokens and step seconds per seed
    (metrics.jsonl, mean over seeds) per unit (a point, if a percentage) of the change
    from the first evaluation."""
    metric = summary["metric"]
    rows = [c for c in summary["cells"] if c.get("compute") and c.get("change", {}).get(metric)]
    if not rows:
        return []
    unit = "point" if pct else "unit"
    # CPU seconds where every cell logged them (a cost); else wall seconds, which
    # neighbours on a shared machine inflate
    cpu = all("train_cpu_seconds" in c["compute"] for c in rows)
    L = ["", f"Training compute per seed (mean over seeds, up to the analysed step) and per "
         f"{unit} of change (– where the change's {level(summary['alpha'])} interval "
         "includes 0 or lies below it: "
         "a ratio to a gain that may be nothing is not a cost):", "",
         f"| cell | sampled tokens | training {'CPU ' if cpu else ''}minutes | change | "
         f"tokens per {unit} | minutes per {unit} |", "|---|---:|---:|---:|---:|---:|"]
    for c in rows:
        tok = c["compute"]["generated_tokens"]
        sec = c["compute"]["train_cpu_seconds" if cpu else "train_seconds"]
        change = c["change"][metric]["mean"]
        units = change * (100 if pct else 1)
        gained = (c["change"][metric].get("ci") or [0.0])[0] > 0
        per = ((f"{tok / units:,.0f}", f"{sec / 60 / units:.2f}") if gained
               else ("–", "–"))
        L.append(f"| {cell_words(summary, c)} | {tok:,.0f} | {sec / 60:.1f} | "
                 f"{fmt(change, pct, True)} | {per[0]} | {per[1]} |")
    return L


def headline_behaviour(settings: dict, where) -> tuple:
    """The headline's behaviour columns: analysis.yaml's `headline_behaviour`, or the
    default; an unknown name is an error naming the file."""
    behaviour = tuple(settings.get("headline_behaviour") or HEADLINE_BEHAVIOUR)
    unknown = [n for n in behaviour if n not in BEHAVIOUR]
    if unknown:
        raise AnalysisError(f"{where}: headline_behaviour {unknown} unknown; allowed: "
                            f"{', '.join(BEHAVIOUR)}")
    return behaviour


def headline(summary: dict, report_rel: str,
             behaviour: tuple = HEADLINE_BEHAVIOUR) -> str:
    """The README's headline table and figure, from summary.json; `behaviour`: the
    behaviour columns (names of analysis/estimates.py BEHAVIOUR)."""
    pct = is_pct(summary)
    unit = " (%)" if pct else ""
    steps = "/".join(map(str, summary["steps"]))
    base = baseline_comparisons(summary)
    words = summary["metric_words"]
    L = [f"{words[:1].upper()}{words[1:]} at step {steps} (seeds x questions; "
         f"{level(summary['alpha'])} "
         f"intervals over seeds and questions), its change from the first evaluation "
         f"(paired by seed and question), and each cell against the baseline "
         f"**{in_words(summary, summary['baseline'])}** ({p_words(summary)}; verdicts against ±"
         f"{fmt(summary['sesoi'], pct)}{' points' if pct else ''}). Generated by `python -m analysis.publish` "
         f"from [{report_rel}/summary.json]({report_rel}/summary.json); the full report is "
         f"[{report_rel}/report.md]({report_rel}/report.md).", "",
         f"| cell | seeds x questions | {summary['metric_words']}{unit} | change | "
         f"{_behaviour_head(behaviour, summary.get('env'))} | Δ vs baseline | p | verdict |",
         "|---|---:|---:|---:|" + "---:|" * len(behaviour) + "---:|---:|---|"]
    if summary.get("exploratory"):           # before the table: intro, "", here, ""
        L[2:2] = [f"**Exploratory, not confirmatory** (analysis.yaml): "
                  f"{summary['exploratory'].rstrip('.')}.", ""]
    L += [_cell_row({**c, "words": cell_words(summary, c)}, base.get(c["label"]),
                    summary["metric"], pct, behaviour) for c in summary["cells"]]
    L += endpoint_table(summary)
    L += compute_table(summary, pct)
    problems = len(summary.get("failed", [])) + len(summary.get("incomplete", []))
    if problems:
        L += ["", f"{problems} run(s) failed or incomplete: listed in the report."]
    skip = not_drawn(summary)
    figures = [f"![the pre-registered primary comparison: each seed, the difference with its "
               f"interval and p]({report_rel}/finding.png)"] * bool(
                   summary.get("primary") and "finding" not in skip)
    if has_curves(summary) and "learning_curves" not in skip:
        figures.append(f"![held-out learning curves and the paired change]"
                       f"({report_rel}/learning_curves.png)")
    if has_change(summary) and "change" not in skip:
        figures.append(f"![change from the first evaluation, paired by seed and question]"
                       f"({report_rel}/change.png)")
    if summary.get("trend"):
        figures.append(f"![the pre-registered trend test: seed means per level and the exact "
                       f"null of its statistic]({report_rel}/trend.png)")
    if has_training(summary):
        figures.append(f"![training accuracy, answer rate and reward]({report_rel}/training.png)")
    if has_lifelong(summary):
        figures.append(f"![lifelong curves: library, skills used, held-out solve rate, "
                       f"forgetting]({report_rel}/lifelong.png)")
    L += ([""] + figures) if figures else []
    return "\n".join(L)


def rewrite_readme(readme: Path, block: str) -> None:
    text = readme.read_text()
    if BEGIN not in text or END not in text:
        raise AnalysisError(f"{readme}: no {BEGIN} ... {END} markers for the headline table")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(f"{head}{BEGIN}\n{block}\n{END}{tail}")


def publish(exp: Path, sweep: Path | None = None, figures: bool = True) -> Path:
    runs, out = exp / "results" / "runs", exp / "results" / "report"
    if sweep is not None:
        export(sweep, runs)
    spec = exp / "analysis.yaml"
    settings = read_config(spec) if spec.exists() else {}
    # `include`: runs of another experiment this one reuses (paths relative to exp)
    reused = [str(exp / d) for d in (settings.get("include") or [])]
    behaviour = headline_behaviour(settings, spec)
    hygiene.check(exp, settings, exp.parent)
    argv = [str(runs), *reused, "--out", str(out)]
    if spec.exists():
        argv += ["--spec", str(spec)]
    if cli.main(argv + ([] if figures else ["--no-figures"])) != 0:
        raise AnalysisError(f"the analysis of {runs} failed (message above)")
    run_scripts(exp, settings, out, spec)
    if figures:
        missing = figs.script_captions(out)
        if missing:
            raise AnalysisError(f"{spec}: scripts: the figure(s) {', '.join(missing)} have no "
                                "caption: the script writes NAME.caption.txt beside NAME.png")
    summary = json.loads((out / "summary.json").read_text())
    rewrite_readme(exp / "README.md", headline(summary, "results/report", behaviour))
    # its prose, then every file whose findings may quote it (the indexes, docs/*.md)
    exps = claims.all_experiments()
    for md in dict.fromkeys((exp / "README.md", *claims.default_files())):
        if md.is_file():
            md.write_text(claims.render_file(md, exps))
    return out


def run_scripts(exp: Path, settings: dict, out: Path, spec: Path) -> None:
    """The experiment's own figure and quantity scripts (analysis.yaml `scripts:`, paths
    relative to exp), each run as `python SCRIPT REPORT_DIR` from the repository root:
    it reads results/runs and writes its figures and JSON into the report."""
    for rel in settings.get("scripts") or []:
        script = exp / rel
        if not script.is_file():
            raise AnalysisError(f"{spec}: scripts: {rel} does not exist")
        env = {**os.environ, "PYTHONPATH": str(claims.ROOT), "MPLBACKEND": "Agg"}
        done = subprocess.run([sys.executable, str(script.resolve()), str(out.resolve())],
                              cwd=claims.ROOT, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise AnalysisError(f"{script}: exit {done.returncode}: {last}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m analysis.publish",
                                description=__doc__.split("\n")[0])
    p.add_argument("experiment", type=Path, help="experiments/<name>")
    p.add_argument("--sweep", type=Path, default=None, help="copy this sweep's inputs first")
    p.add_argument("--no-figures", action="store_true")
    args = p.parse_args(argv)
    try:
        out = publish(args.experiment, args.sweep, figures=not args.no_figures)
    except AnalysisError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"report: {out}; headline: {args.experiment / 'README.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
