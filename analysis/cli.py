"""python -m analysis RUN_DIR... --out DIR: summary.json, report.md, tables, figures."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from analysis import endpoint, figures as figs, hypotheses, objective, report, tables, trend
from analysis import endpoint_figure, trend_figure
from analysis import labels as lb
from analysis.deviations import deviations
from analysis.collect import (REPO, AnalysisError, collect, parse_assignments, read_config,
                              shown)
from analysis.summary import DEFAULT_SESOI, analyse

EXPERIMENTS = REPO / "experiments"


# the variance models of the seed term (docs/statistics.md sec. 2): no pretest chooses
SEED_VARIANCE = ("welch", "pooled")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m analysis", description=__doc__)
    p.add_argument("run_dirs", nargs="+", type=Path, help="run or multirun directories")
    p.add_argument("--out", type=Path, default=None,
                   help="output directory (default: <first RUN_DIR>/analysis)")
    p.add_argument("--spec", type=Path, default=None,
                   help="analysis.yaml of an experiment (baseline, sesoi, metric, B, "
                        "rng_seed, step, alpha, all_pairs); command-line options override "
                        "it (default: experiments/<experiment>/analysis.yaml of the runs' "
                        "`experiment`, when there is one)")
    p.add_argument("--baseline", default=None,
                   help="baseline cell as KEY=VAL,... (required with more than one cell, "
                        "unless the --spec file names it)")
    p.add_argument("--sesoi", type=float, default=None,
                   help="smallest effect size of interest, in metric units, for the "
                        f"better/worse/equivalent verdicts (default {DEFAULT_SESOI})")
    p.add_argument("--all-pairs", action="store_true",
                   help="also compare every pair of cells (exploratory, Benjamini-Hochberg)")
    p.add_argument("--step", type=int, default=None,
                   help="evaluation step to analyse (default: each run's last)")
    p.add_argument("--B", type=int, default=None,
                   help="Monte Carlo draws for the simultaneous intervals (default 10000)")
    p.add_argument("--rng-seed", type=int, default=None, help="Monte Carlo RNG seed (default 0)")
    p.add_argument("--metric", default=None, help="eval.jsonl field to analyse (default correct)")
    p.add_argument("--alpha", type=float, default=None)
    p.add_argument("--lower-is-better", action="store_true", default=None,
                   help="the metric improves downwards (e.g. idle_test_runs): a significant "
                        "negative difference is 'better'")
    p.add_argument("--seed-variance", choices=SEED_VARIANCE, default=None,
                   help="welch: each cell's own seed variance (default); pooled: one over "
                        "the cells, where the experiment pre-registered it")
    p.add_argument("--include-incomplete", action="store_true",
                   help="also analyse runs without a COMPLETE marker")
    p.add_argument("--allow-duplicates", action="store_true",
                   help="keep the first of eval.jsonl rows that repeat a (step, task_id, "
                        "sample, decoding) key (default: such a repeat is an error)")
    p.add_argument("--no-figures", action="store_true")
    return p


def experiment_spec(sweep) -> Path | None:
    """experiments/<name>/analysis.yaml of the one experiment preset the runs came from
    (their top-level `experiment` key), if the repository has it."""
    names = {r.config.get("experiment") for c in sweep.cells for r in c.runs} - {None}
    if len(names) != 1:
        return None
    path = EXPERIMENTS / str(names.pop()) / "analysis.yaml"
    return path if path.exists() else None


# keys an analysis.yaml may hold (analysis.publish reads include, headline_behaviour,
# scripts and quantities; analysis.claims reads quantities; docs/statistics.md sec. 4)
SPEC_KEYS = ("metric", "baseline", "B", "rng_seed", "sesoi", "alpha", "step", "all_pairs",
             "lower_is_better", "evaluation_only", "exploratory", "include",
             "headline_behaviour", "hypotheses", "names", "seed_variance", "primary",
             "scripts", "quantities", "preregistration", "results_commit", "unrun",
             "decide_by", "trend", "endpoint")


def settings(args, spec: dict, spec_path) -> tuple[dict | None, str, bool]:
    """Fill unset options from the spec, check them; (baseline, its source, all_pairs)."""
    unknown = sorted(set(spec) - set(SPEC_KEYS))
    if unknown:
        raise AnalysisError(f"{spec_path}: unknown key(s) {', '.join(unknown)}; allowed: "
                            + ", ".join(SPEC_KEYS))
    defaults = {"B": 10_000, "rng_seed": 0, "metric": "correct", "alpha": 0.05, "step": None,
                "sesoi": DEFAULT_SESOI, "lower_is_better": False, "seed_variance": "welch"}
    for key, default in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, spec.get(key, default))
    all_pairs = args.all_pairs or bool(spec.get("all_pairs", False))
    baseline, source = None, "--baseline"
    if args.baseline is not None:
        baseline = parse_assignments(args.baseline)
    elif spec.get("baseline") is not None:
        baseline, source = spec["baseline"], shown(spec_path)
        if not isinstance(baseline, dict):
            raise AnalysisError(f"{spec_path}: baseline is {baseline!r}; expected a mapping "
                                "such as {reward.name: shaped}")
    if not (isinstance(args.sesoi, (int, float)) and not isinstance(args.sesoi, bool)
            and args.sesoi > 0):
        where = "--sesoi" if spec_path is None else f"{spec_path}: sesoi (or --sesoi)"
        raise AnalysisError(f"{where} is {args.sesoi!r}; expected a positive number in "
                            "metric units, e.g. 0.03 for 3 accuracy points")
    if not isinstance(args.lower_is_better, bool):
        raise AnalysisError(f"{spec_path}: lower_is_better is {args.lower_is_better!r}; "
                            "expected true or false")
    if args.seed_variance not in SEED_VARIANCE:
        raise AnalysisError(f"{spec_path}: seed_variance is {args.seed_variance!r}; allowed: "
                            + ", ".join(SEED_VARIANCE))
    if args.B < 100:
        raise AnalysisError(f"--B {args.B}: use at least 100 Monte Carlo draws")
    return baseline, source, all_pairs


def run(argv=None) -> Path:
    args = build_parser().parse_args(argv)
    sweep = collect(args.run_dirs, include_incomplete=args.include_incomplete,
                    allow_duplicates=args.allow_duplicates)
    spec_path = args.spec if args.spec is not None else experiment_spec(sweep)
    spec = read_config(spec_path) if spec_path is not None else {}
    baseline, source, all_pairs = settings(args, spec, spec_path)
    objective.check_metric(args.metric, sweep)     # reward/<c>: weighted rows (issue 63)
    out = args.out or args.run_dirs[0] / "analysis"
    summary = analyse(sweep, metric=args.metric, step=args.step, B=args.B,
                      rng_seed=args.rng_seed, baseline=baseline, alpha=args.alpha,
                      sesoi=float(args.sesoi), all_pairs=all_pairs, baseline_source=source,
                      lower_is_better=bool(args.lower_is_better),
                      evaluation_only=spec.get("evaluation_only"),
                      seed_variance_model=args.seed_variance)
    summary["exploratory"] = spec.get("exploratory")
    summary["ran"] = objective.what_ran([c for c in sweep.cells if c.runs])
    # words for factors and levels in figures and tables (analysis.yaml `names`)
    lb.check_names(spec.get("names"), summary["factors"], summary["levels"], spec_path)
    summary["words"] = lb.words_table(summary["factors"], summary["levels"],
                                      summary["short_names"], spec.get("names"))
    # the pre-registered family: analysis.yaml `trend:` (analysis.trend) and `hypotheses:`,
    # Holm over them, decided by `decide_by` (t or permutation); then every comparison's
    # one quoted p (hypotheses.quote)
    summary["trend"] = trend.from_summary(spec.get("trend"), summary, str(spec_path))
    summary["hypotheses"] = hypotheses.evaluate(spec.get("hypotheses"), summary,
                                                str(spec_path),
                                                decide_by=spec.get("decide_by", "t"),
                                                trend=summary["trend"])
    hypotheses.quote(summary)
    summary["endpoint"] = endpoint.from_spec(spec.get("endpoint"), sweep, summary,
                                             str(spec_path), args.step)
    summary["primary"] = hypotheses.primary(spec.get("primary"), summary, str(spec_path))
    summary["deviations"] = deviations(spec, str(spec_path), ran=[
        v.get("commit") for row in summary.get("code") or [] for v in row["versions"]])
    try:
        write_outputs(summary, out, figures=not args.no_figures)
    except OSError as e:     # a read-only file system, a file in the way (issue 64 item 12)
        raise AnalysisError(f"--out {out}: cannot write there ({e.strerror or e}: "
                            f"{e.filename or out}); name a writable directory with --out"
                            ) from None
    return out


def write_outputs(summary: dict, out: Path, figures: bool = True) -> None:
    """summary.json, then report.md, tables and figures rendered from the JSON just
    written (so their numbers are the same)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    summary = json.loads((out / "summary.json").read_text())
    (out / "report.md").write_text(report.render(summary))
    tables.write_all(summary, out)
    if figures:
        figs.write_all(summary, out)
        trend_figure.write(summary, out)    # the `trend:` test's figure (issue 65)
        endpoint_figure.write(summary, out)  # the `endpoint:` rates' figure (issue 65)


def main(argv=None) -> int:
    try:
        out = run(argv)
    except AnalysisError as e:
        print(f"analysis: error: {e}", file=sys.stderr)
        return 2
    print(f"analysis: wrote {out}/summary.json, report.md, tables and figures")
    return 0
