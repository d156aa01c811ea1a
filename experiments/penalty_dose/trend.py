"""penalty_dose's trend test and dose-response quantities (README, "Endpoint and
hypotheses"): the exact Jonckheere-Terpstra test of a monotone trend in held-out
accuracy across the wrong-answer weight lambda (`reward.weights.wrong`), by permutation
over seeds; lambda = 4 vs lambda = 0 by exact permutation; Holm over the two (the
primary family); and, secondary and unadjusted, the same trend test per question class
(1-hop, 2-hop) and on the submission rate, how each seed's episodes ended, whether
each arm's interval excludes the collapse the pilot predicts (pilots/sizing.json), the
same for the submission rate of each class predicted to stop submitting (Welch over
seeds), and the arm means at every evaluated step (which class fell first).

Registered in analysis.yaml `scripts:` (publish runs it as `python trend.py REPORT_DIR`):
writes REPORT_DIR/trend.json (the README's quantities) and the figure "dose_response"
(accuracy and submission rate against lambda, per seed, with each class's predicted
threshold lambda* = p / (1 - p) as a vertical line). Without REPORT_DIR it prints the
per-seed table and the tests only.

    PYTHONPATH=. python experiments/penalty_dose/trend.py [REPORT_DIR] [--runs RUNS] [--step N]
    # defaults: results/runs, the last evaluated step

The exact Jonckheere-Terpstra test itself is analysis/trend.py's (the analysis computes
the primary family from analysis.yaml `trend:` and `hypotheses:`, so that the README,
the table and the figures quote one p: issue 65); given the report's summary.json this
script takes the primary family from it and checks that its own computation agrees.
"""
from __future__ import annotations

import argparse
import json
import math
from collections import Counter
from pathlib import Path

import numpy as np

from analysis.collect import find_run_dirs, flatten, read_config, read_jsonl
from analysis.stats import holm, interval, permutation_test, satterthwaite
from analysis.trend import jt_null, jt_statistic, jt_test  # noqa: F401 (tests use them here)

HERE = Path(__file__).resolve().parent
FACTOR = "reward.weights.wrong"
ENDINGS = ("submitted", "idk", "max_turns", "max_tokens", "malformed")
ALPHA = 0.05


# ------------------------------------------------------------------ per-seed values
def per_seed(runs: Path, step: int | None = None) -> list[dict]:
    """One row per run: lambda, seed, step, and at that step (default: the run's last)
    accuracy and submission rate overall and per hop class (sampled rows; a question's
    samples averaged, then the questions), and how its episodes ended."""
    out = []
    for lam, seed, rows in _sampled(runs):
        at = max(r["step"] for r in rows) if step is None else step
        mine = [r for r in rows if r["step"] == at]
        if mine:
            out.append(_seed_row(lam, seed, at, mine))
    return sorted(out, key=lambda r: (r["lambda"], r["seed"]))


def _sampled(runs: Path):
    """(lambda, seed, its sampled eval rows) per run, each eval.jsonl read once."""
    for run, cfg_file in find_run_dirs(runs):
        c = flatten(read_config(cfg_file))
        rows, _ = read_jsonl(run / "eval.jsonl", required=("step", "task_id", "correct"))
        yield (float(c.get(FACTOR)), int(c.get("seed")),
               [r for r in rows if r.get("decoding", "sampled") == "sampled"])


def _seed_row(lam: float, seed: int, step: int, mine: list[dict]) -> dict:
    row = {"lambda": lam, "seed": seed, "step": step, "episodes": len(mine), **_rates(mine)}
    for h in sorted({r.get("hops") for r in mine if r.get("hops") is not None}):
        row[f"hops{h}"] = _rates([r for r in mine if r.get("hops") == h])
    row["endings"] = _endings(mine)
    return row


def _rates(rows: list[dict]) -> dict:
    by_q: dict = {}
    for r in rows:
        by_q.setdefault(r["task_id"], []).append(r)
    acc = [np.mean([bool(r["correct"]) for r in v]) for v in by_q.values()]
    sub = [np.mean([bool(r.get("answered")) for r in v]) for v in by_q.values()]
    n_sub = sum(bool(r.get("answered")) for r in rows)
    n_right = sum(bool(r.get("answered")) and bool(r["correct"]) for r in rows)
    return {"questions": len(by_q), "accuracy": float(np.mean(acc)),
            "submitted": float(np.mean(sub)),
            "right_when_submitted": (n_right / n_sub) if n_sub else None}


def _endings(rows: list[dict]) -> dict:
    c = Counter({k: 0 for k in ENDINGS})
    for r in rows:
        if r.get("end_reason") == "answer":
            c["submitted" if r.get("answered") else "idk"] += 1
        else:
            c[str(r.get("end_reason"))] += 1
    return dict(c)


def _value(row: dict, metric: str, cls: str | None):
    return (row[cls] if cls else row)[metric] if (cls is None or cls in row) else None


def arms(rows: list[dict], metric: str = "accuracy", cls: str | None = None) -> dict:
    """{lambda: [value per seed, in seed order]} of one metric (one class, or overall)."""
    out: dict = {}
    for r in rows:
        v = _value(r, metric, cls)
        if v is not None:
            out.setdefault(r["lambda"], []).append(v)
    return dict(sorted(out.items()))


# ------------------------------------------------------------------ the analysis
def analyse(rows: list[dict], sizing: dict | None = None, summary: dict | None = None,
            steps: dict | None = None, runs: Path | None = None) -> dict:
    """trend.json: the primary family (JT on accuracy; lambda max vs lambda 0 by exact
    permutation; Holm over the two), the secondary trend tests (unadjusted), per-arm
    means, endings per seed, the collapse each arm's interval excludes, and (given
    `steps`, {step: per_seed rows at that step}) the per-arm means at every evaluation
    and (given `runs` too) the seeds that ended mostly in "I don't know" (`collapsed`)."""
    acc = arms(rows)
    lams = list(acc)
    lo, hi = lams[0], lams[-1]
    jt = jt_test(list(acc.values()))
    perm = permutation_test(acc[hi], acc[lo])
    delta = float(np.mean(acc[hi]) - np.mean(acc[lo]))
    pair_ok = delta < 0
    p_pair = perm["p"]
    adj = holm([jt["p"], p_pair if p_pair is not None else 1.0])
    primary = {
        "trend": {**jt, "p_holm": float(adj[0]),
                  "supported": bool(adj[0] < ALPHA and jt["direction"] == "decreasing")},
        "pair": {"a": hi, "b": lo, "delta": delta, "p_perm": p_pair,
                 "p_perm_min": perm["min_p"], "p_holm": float(adj[1]),
                 "expect": "less", "direction_ok": bool(pair_ok),
                 "supported": bool(adj[1] < ALPHA and pair_ok)}}
    secondary = {}
    for metric in ("accuracy", "submitted"):
        for cls in (None, "hops1", "hops2"):
            if metric == "accuracy" and cls is None:
                continue
            g = arms(rows, metric, cls)
            if len(g) == len(lams) and all(len(v) for v in g.values()):
                secondary[f"{metric}{'_' + cls if cls else ''}"] = jt_test(list(g.values()))
    if summary and summary.get("trend"):
        primary = from_summary(primary, summary)
    out = {"factor": FACTOR, "lambdas": lams, "step": max(r["step"] for r in rows),
           "alpha": ALPHA, "primary": primary, "secondary": secondary,
           "arms": arm_means(rows), "per_seed": rows}
    if steps:
        out["by_step"] = {str(s): arm_means(r, endings=False) for s, r in sorted(steps.items())}
        out["collapsed"] = collapsed(runs, steps) if runs else None
        out["quiet_spells"] = quiet_spells(runs) if runs else None
    if sizing:
        out["thresholds"] = sizing.get("thresholds")
        out["collapse"] = collapse(summary, sizing, lams) if summary else None
        out["class_submission"] = class_submission(rows, sizing.get("thresholds") or {})
    return out


def from_summary(own: dict, summary: dict) -> dict:
    """The primary family as the analysis computed it (summary.json `trend` and H1, the
    p every output quotes: issue 65), after checking that this script's own computation
    from the rows gives the same tests (else an error: the two would quote different p)."""
    t = summary["trend"]
    h = next(h for h in summary["hypotheses"] if h["name"] == "H1")
    for mine, theirs, what in ((own["trend"]["p"], t["p"], "trend p"),
                               (own["pair"]["p_perm"], h["p_perm"], "H1 permutation p"),
                               (own["trend"]["p_holm"], t["p_decision"], "trend Holm p"),
                               (own["pair"]["p_holm"], h["p_decision"], "H1 Holm p")):
        if theirs is None or abs(mine - theirs) > 1e-9:
            raise SystemExit(f"trend.py: {what} {mine} differs from summary.json's {theirs}")
    return {"trend": {**own["trend"], "p_holm": t["p_decision"],
                      "supported": t["verdict"] == "supported"},
            "pair": {**own["pair"], "p_holm": h["p_decision"],
                     "supported": h["verdict"] == "supported"}}


def arm_means(rows: list[dict], endings: bool = True) -> dict:
    """{lambda: the seeds, the arm's mean accuracy, submission rate and P(right |
    submitted), overall and per class (a mean over seeds), and each seed's endings}."""
    means = {}
    for lam in sorted({r["lambda"] for r in rows}):
        mine = [r for r in rows if r["lambda"] == lam]
        means[_key(lam)] = {
            "seeds": [r["seed"] for r in mine],
            **{f"{m}{'_' + c if c else ''}": _mean([_value(r, m, c) for r in mine])
               for m in ("accuracy", "submitted", "right_when_submitted")
               for c in (None, "hops1", "hops2")}}
        if endings:
            means[_key(lam)]["endings"] = {str(r["seed"]): r["endings"] for r in mine}
    return means


def _key(lam: float) -> str:
    return f"{lam:g}"


def _mean(v: list) -> float | None:
    v = [x for x in v if x is not None]
    return float(np.mean(v)) if v else None


def collapse(summary: dict, sizing: dict, lams: list[float]) -> list[dict]:
    """Per lambda > 0: the analysis's difference from lambda 0 (its interval) and the
    collapse the pilot predicts there (pilots/sizing.json `predicted_drop`: the warm
    start's accuracy on the classes whose threshold lambda* lies below lambda), and
    whether the interval's lower end lies above minus that drop (a collapse of the
    predicted size excluded) and above minus half of it."""
    pred = {float(k): v for k, v in (sizing.get("predicted_drop") or {}).items()}
    out = []
    for cmp in (summary.get("comparisons") or []):
        lam = (cmp.get("a") or {}).get(FACTOR)
        if lam is None or (cmp.get("b") or {}).get(FACTOR) != lams[0]:
            continue
        lam = float(lam)
        drop = pred.get(lam)
        ci = cmp.get("ci")
        out.append({"lambda": lam, "delta": cmp.get("delta"), "ci": ci,
                    "predicted_drop": drop,
                    "excludes_predicted": (None if drop is None or not ci
                                           else bool(ci[0] > -drop)),
                    "excludes_half": (None if drop is None or not ci
                                      else bool(ci[0] > -drop / 2))})
    return sorted(out, key=lambda r: r["lambda"])


def welch(a: list[float], b: list[float]) -> dict:
    """mean(a) - mean(b) with its 1 - ALPHA Welch t interval over seeds (Welch 1947,
    Biometrika 34:28; Satterthwaite df); conditional on the questions evaluated."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    se = math.sqrt(va + vb)
    d = float(a.mean() - b.mean())
    if se == 0:
        return {"delta": d, "ci": [d, d], "se": 0.0, "df": None}
    df = float(satterthwaite([(va, a.size - 1), (vb, b.size - 1)]))
    lo, hi = interval(d, se, df, ALPHA)
    return {"delta": d, "ci": [float(lo), float(hi)], "se": se, "df": float(df)}


def class_submission(rows: list[dict], thresholds: dict) -> list[dict]:
    """Per lambda > 0 and each class whose threshold lambda* lies below it (the class
    predicted to stop submitting): its submission rate's difference from lambda 0
    (`welch`), the full fall (to no submissions: minus lambda 0's rate) and whether the
    interval's lower end lies above minus it and above minus half of it."""
    out = []
    lams = sorted({r["lambda"] for r in rows})
    for cls, t in sorted(thresholds.items()):
        rates = arms(rows, "submitted", cls)
        base = rates.get(lams[0])
        for lam in lams[1:]:
            mine = rates.get(lam)
            if t is None or lam <= t or not base or not mine or len(base) < 2 or len(mine) < 2:
                continue
            w = welch(mine, base)
            full = float(np.mean(base))
            out.append({"lambda": lam, "class": cls, "threshold": t, **w, "full_fall": full,
                        "excludes_full": bool(w["ci"][0] > -full),
                        "excludes_half": bool(w["ci"][0] > -full / 2)})
    return out


def collapsed(runs: Path, steps: dict) -> list[dict]:
    """Post hoc, descriptive (added after the grid was read: README, "Results"): each
    seed whose last evaluation ends more than half its episodes with "I don't know", its
    submission rate at every evaluation, and the last training step with a group whose
    rollouts' rewards differ (metrics.jsonl `mixed_groups`): after it every group's
    rewards are equal, so every GRPO advantage (r - mean) / std is 0 (Shao et al. 2024,
    DeepSeekMath sec. 4.1) and, with no KL or entropy term, no update moves the policy."""
    sub = {s: {(x["lambda"], x["seed"]): x["submitted"] for x in rows}
           for s, rows in sorted(steps.items())}
    mixed = {}
    for run, cfg_file in find_run_dirs(runs):
        c = flatten(read_config(cfg_file))
        if (run / "metrics.jsonl").is_file():
            m, _ = read_jsonl(run / "metrics.jsonl", required=("step",))
            mixed[(float(c.get(FACTOR)), int(c.get("seed")))] = [
                x["step"] for x in m if (x.get("mixed_groups") or 0) > 0]
    out = []
    for r in steps[max(steps)]:
        key = (r["lambda"], r["seed"])
        if r["endings"]["idk"] * 2 > r["episodes"]:
            out.append({"lambda": r["lambda"], "seed": r["seed"], "idk": r["endings"]["idk"],
                        "episodes": r["episodes"], "accuracy": r["accuracy"],
                        "submitted_by_step": {str(s): v.get(key) for s, v in sub.items()},
                        "last_mixed_step": max(mixed.get(key) or [None])})
    return out


def quiet_spells(runs: Path) -> list[dict]:
    """Post hoc (issue 65): per seed, its longest run of consecutive training steps in
    which no group's rewards differed (metrics.jsonl `mixed_groups` 0), where it started,
    and whether a mixed group came after it (the seed recovered): one seed that never
    recovered is not a rule that a quiet spell means a dead cell."""
    out = []
    for run, cfg_file in find_run_dirs(runs):
        if not (run / "metrics.jsonl").is_file():
            continue
        c = flatten(read_config(cfg_file))
        m, _ = read_jsonl(run / "metrics.jsonl", required=("step",))
        quiet = [(x["step"], (x.get("mixed_groups") or 0) == 0)
                 for x in sorted(m, key=lambda x: x["step"])]
        best, start, length, first = 0, None, 0, None
        for step, q in quiet:
            length, first = (length + 1, first if length else step) if q else (0, None)
            if length > best:
                best, start = length, first
        end = (start + best - 1) if best else None
        out.append({"lambda": float(c.get(FACTOR)), "seed": int(c.get("seed")),
                    "longest": best, "from_step": start,
                    "recovered": bool(best) and any(s > end and not q for s, q in quiet)})
    return sorted(out, key=lambda r: (r["lambda"], r["seed"]))


def steps_of(runs: Path) -> dict:
    """{step: per_seed(runs, step)} for every step some run evaluated (sampled rows),
    reading each run once."""
    out: dict = {}
    for lam, seed, rows in _sampled(runs):
        for s in sorted({r["step"] for r in rows}):
            out.setdefault(s, []).append(
                _seed_row(lam, seed, s, [r for r in rows if r["step"] == s]))
    return {s: sorted(v, key=lambda r: (r["lambda"], r["seed"]))
            for s, v in sorted(out.items())}


# ------------------------------------------------------------------ the figure
def figure(q: dict, out: Path) -> list[Path]:
    """Accuracy and submission rate against lambda: each seed a dot, each class's arm
    mean a line, each class's predicted threshold a vertical line."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lams = q["lambdas"]
    colours = {None: "#333333", "hops1": "#4c72b0", "hops2": "#c44e52"}
    words = {None: "all questions", "hops1": "1-hop", "hops2": "2-hop"}
    fig, axes = plt.subplots(1, 2, figsize=(8.4, 3.4), sharex=True)
    for ax, metric, title in ((axes[0], "accuracy", "held-out accuracy"),
                              (axes[1], "submitted", "submission rate")):
        for i, cls in enumerate((None, "hops1", "hops2")):
            g = arms(q["per_seed"], metric, cls)
            for lam, v in g.items():
                off = (i - 1) * 0.08
                ax.plot([lam + off] * len(v), v, "o", ms=3.5, alpha=0.7,
                        color=colours[cls], mec="none")
            ax.plot(list(g), [np.mean(v) for v in g.values()], "-", lw=1.2,
                    color=colours[cls], label=words[cls])
        for cls, t in (q.get("thresholds") or {}).items():
            if t is not None and math.isfinite(t) and t <= max(lams) * 1.1:
                ax.axvline(t, ls="--", lw=1, color=colours.get(cls, "#777777"),
                           label=f"{words.get(cls, cls)} λ* = {t:.2f} (pilot)")
        ax.set_xticks(lams, [f"{x:g}" for x in lams])
        ax.set_xlabel("wrong-answer weight λ (reward.weights.wrong)")
        ax.set_ylim(-0.02, 1.02)
        ax.set_ylabel(f"{title} (share of episodes)" if metric == "submitted" else title)
        ax.set_title(f"{title} at step {q['step']}", fontsize=10)
    fig.tight_layout()
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=5,
               fontsize=8, frameon=False)
    paths = []
    for ext in ("png", "pdf"):
        p = out / f"dose_response.{ext}"
        fig.savefig(p, dpi=150, bbox_inches="tight",
                    metadata={"CreationDate": None} if ext == "pdf" else None)
        paths.append(p)
    plt.close(fig)
    th = q.get("thresholds") or {}
    thr = "; ".join(f"{'1-hop' if k == 'hops1' else '2-hop' if k == 'hops2' else k} "
                    f"λ* = {v:.2f}" for k, v in th.items() if v is not None)
    (out / "dose_response.caption.txt").write_text(
        f"Held-out accuracy (left) and submission rate (right) at step {q['step']} against "
        "the wrong-answer weight λ: each dot one seed (all questions in black, 1-hop in "
        "blue, 2-hop in red, offset sideways), lines the arm means. Dashed vertical lines: "
        f"the threshold λ* = p / (1 − p) the pilot predicts for each class ({thr}); above "
        "it, answering is worth less than abstaining to a reward-maximising agent. No "
        "interval.\n")
    return paths


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("report", nargs="?", default=None,
                    help="write trend.json and the figure here (publish passes the report dir)")
    ap.add_argument("--runs", default=str(HERE / "results" / "runs"))
    ap.add_argument("--step", type=int, default=None, help="default: each run's last step")
    a = ap.parse_args(argv)
    rows = per_seed(Path(a.runs), a.step)
    sizing_file = HERE / "pilots" / "sizing.json"
    sizing = json.loads(sizing_file.read_text()) if sizing_file.exists() else None
    summary = None
    if a.report and (Path(a.report) / "summary.json").exists():
        summary = json.loads((Path(a.report) / "summary.json").read_text())
    q = analyse(rows, sizing, summary, steps_of(Path(a.runs)) if a.step is None else None,
                Path(a.runs))
    print("| λ | seed | step | accuracy | 1-hop | 2-hop | submitted | 1-hop | 2-hop |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['lambda']:g} | {r['seed']} | {r['step']} | {r['accuracy']:.3f} | "
              f"{r.get('hops1', {}).get('accuracy', float('nan')):.3f} | "
              f"{r.get('hops2', {}).get('accuracy', float('nan')):.3f} | "
              f"{r['submitted']:.3f} | {r.get('hops1', {}).get('submitted', float('nan')):.3f} | "
              f"{r.get('hops2', {}).get('submitted', float('nan')):.3f} |")
    t, p = q["primary"]["trend"], q["primary"]["pair"]
    print(f"JT (accuracy, decreasing in λ): J = {t['J']:g} (null mean {t['null_mean']:g}), "
          f"exact two-sided p = {t['p']:.4g}, Holm {t['p_holm']:.4g}, {t['direction']}")
    print(f"λ={p['a']:g} vs λ={p['b']:g}: Δ = {p['delta']:+.4f}, exact permutation p = "
          f"{p['p_perm']}, Holm {p['p_holm']:.4g}")
    if a.report:
        out = Path(a.report)
        out.mkdir(parents=True, exist_ok=True)
        (out / "trend.json").write_text(json.dumps(q, indent=1, sort_keys=True) + "\n")
        figure(q, out)


if __name__ == "__main__":
    main()
