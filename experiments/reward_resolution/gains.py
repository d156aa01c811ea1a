"""Secondary, descriptive (README, "Endpoint and hypotheses"): each arm's gain in held-out
accuracy over the warm start, evaluated once (warm_start/: questions 0-199 of gen_seed 2
x 8 samples). Per seed: the mean over questions of (the cell's step-16 accuracy on the
question - the warm start's), the same questions; per arm: the mean of those seed gains
with a t interval over seeds at the analysis's alpha. The warm start is a fixed reference
here: its own question-sampling error (its interval, printed) is common to both arms and
cancels in the primary comparison, not in a gain.

Registered in analysis.yaml `scripts:` (publish runs it as `python gains.py REPORT_DIR`):
writes REPORT_DIR/gains.json (the README's quantities) and the figure "gains over the
warm-start line" (gains_over_warm_start.png/.pdf). Without REPORT_DIR it prints the JSON.

    PYTHONPATH=. python experiments/reward_resolution/gains.py [REPORT_DIR] [--runs RUNS_DIR]
    # default runs: results/runs
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import yaml
from scipy import stats as sps

from analysis import estimates as est
from analysis.collect import Run, parse_assignments

HERE = Path(__file__).resolve().parent


def per_question(run_dir: Path) -> dict:
    """{task_id: mean `correct` of the sampled rows at the run's last step}
    (analysis.estimates.per_question, as the report averages them)."""
    run = Run(run_dir, {}, None, True, run_dir / "config.yaml")
    ids, means, *_ = est.per_question(run, est.select_step(run, None),
                                      {"correct": ("correct", float)}, required=("correct",))
    return {q: float(m) for q, m in zip(ids, means["correct"])}


def t_interval(x: np.ndarray, alpha: float) -> list[float]:
    half = sps.t.ppf(1 - alpha / 2, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
    return [float(x.mean() - half), float(x.mean() + half)]


def gains(runs: Path, warm_dir: Path, alpha: float) -> dict:
    warm = per_question(warm_dir)
    w = np.array(list(warm.values()))
    out = {"warm_start": {"accuracy": float(w.mean()), "questions": len(w),
                          "ci_over_questions": t_interval(w, alpha)}, "arms": {}}
    for run in sorted(p for p in runs.iterdir() if (p / "eval.jsonl").is_file()):
        arm = parse_assignments(run.name)
        cell = per_question(run)
        g = float(np.mean([cell[q] - warm[q] for q in cell]))
        out["arms"].setdefault(arm["+reward"], {})[arm["seed"]] = g
    for name, seeds in out["arms"].items():
        x = np.array(list(seeds.values()))
        out["arms"][name] = {"seed_gains": seeds, "mean": float(x.mean()),
                             "ci_over_seeds": t_interval(x, alpha),
                             "seed_range": [float(x.min()), float(x.max())],
                             "seeds_above_warm_start": int((x > 0).sum()), "n_seeds": len(x)}
    out["alpha"] = alpha
    return out


ARM_ORDER = ("shaped", "outcome")


def figure(g: dict, out: Path) -> None:
    """Each arm's held-out accuracy at its last step as a gain over the warm start (the
    line at 0): one point per seed, the arm's mean with its t interval over seeds."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    level = 100 * (1 - g["alpha"])
    arms = [a for a in ARM_ORDER if a in g["arms"]] + sorted(set(g["arms"]) - set(ARM_ORDER))
    fig, ax = plt.subplots(figsize=(4.6, 3.4))
    ax.axhline(0, color="0.3", lw=1, ls="--",
               label=f"warm start ({100 * g['warm_start']['accuracy']:.1f}% correct, "
                     f"{g['warm_start']['questions']} questions)")
    for i, arm in enumerate(arms):
        a = g["arms"][arm]
        ys = [100 * v for _, v in sorted(a["seed_gains"].items(), key=lambda kv: int(kv[0]))]
        xs = [i - 0.12 + 0.24 * k / max(1, len(ys) - 1) for k in range(len(ys))]
        ax.scatter(xs, ys, s=14, color="0.55", zorder=2,
                   label="one seed" if i == 0 else None)
        lo, hi = (100 * c for c in a["ci_over_seeds"])
        ax.errorbar([i + 0.3], [100 * a["mean"]], yerr=[[100 * a["mean"] - lo], [hi - 100 * a["mean"]]],
                    fmt="o", color="C0", capsize=4, zorder=3,
                    label=(f"mean over seeds, {level:.2f}% t interval over seeds"
                           if i == 0 else None))
    ax.set_xticks(range(len(arms)), [f"reward: {a}" for a in arms])
    ax.set_xlim(-0.6, len(arms) - 0.4)
    ax.set_ylabel("gain over the warm start\n(points of held-out accuracy)")
    lo = min(min(100 * v for v in a["seed_gains"].values()) for a in g["arms"].values())
    hi = max(max(100 * v for v in a["seed_gains"].values()) for a in g["arms"].values())
    ax.set_ylim(min(lo, 0) - 2, max(hi, 0) + 2)
    ax.set_title("Gains over the warm-start line", fontsize=10)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), frameon=False)
    fig.tight_layout()
    for ext in ("png", "pdf"):
        fig.savefig(out / f"gains_over_warm_start.{ext}", dpi=150, bbox_inches="tight",
                    metadata={"CreationDate": None} if ext == "pdf" else None)
    plt.close(fig)
    seeds = sorted({a["n_seeds"] for a in g["arms"].values()})
    (out / "gains_over_warm_start.caption.txt").write_text(
        "Held-out accuracy of each arm at its last step as a gain over the warm start "
        f"(dashed line at 0: {100 * g['warm_start']['accuracy']:.1f}% correct on "
        f"{g['warm_start']['questions']} questions): grey points one seed each "
        f"({'/'.join(map(str, seeds))} seeds per arm), blue the mean over seeds with its "
        f"{level:.4g}% t interval over seeds (no test drawn; the arms' comparison is the "
        "report's hypotheses table).\n")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("report", nargs="?", default=None,
                    help="write gains.json and the figure here (publish passes the report dir)")
    ap.add_argument("--runs", default=str(HERE / "results" / "runs"))
    a = ap.parse_args(argv)
    alpha = yaml.safe_load((HERE / "analysis.yaml").read_text())["alpha"]
    g = gains(Path(a.runs), HERE / "warm_start", alpha)
    text = json.dumps(g, indent=2)
    if a.report is None:
        print(text)
        return
    out = Path(a.report)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gains.json").write_text(text + "\n")
    figure(g, out)


if __name__ == "__main__":
    main()
