"""What was learned, and how much: per arm and seed, the held-out questions gained and
lost between the first and the last evaluation (greedy decoding, one answer per question,
so each question is right or wrong at each step) with the exact McNemar p of that
change; and accuracy on "repeat" questions (the answer equals the last term shown:
copying is right) against the others (the rule must be applied) at every evaluation,
with how much of the change each class carries and the most a copy-the-last-term
shortcut could add (every repeat question right).

Registered in analysis.yaml `scripts:` (publish runs it as `python repeat_vs_other.py
REPORT_DIR`): writes REPORT_DIR/repeat_vs_other.json (the README's quantities) and the
figure "repeat vs other questions over steps" (repeat_vs_other.png/.pdf).

    PYTHONPATH=. python experiments/smollm_reasoning_gym/repeat_vs_other.py REPORT_DIR [--runs RUNS]
"""
from __future__ import annotations

import argparse
import json
import sys
from math import comb
from pathlib import Path

from omegaconf import OmegaConf

from analysis.collect import find_run_dirs

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from shortcut import classes  # noqa: E402  (the question classes, one definition)

ARM_WORDS = {"grpo": "GRPO", "dr_grpo": "Dr.GRPO"}


def mcnemar_exact(gained: int, lost: int) -> float:
    """Two-sided exact McNemar p: the discordant questions as Binomial(gained + lost, 1/2)."""
    n = gained + lost
    if n == 0:
        return 1.0
    k = min(gained, lost)
    return min(1.0, 2 * sum(comb(n, i) for i in range(k + 1)) / 2 ** n)


def per_run(runs: Path) -> list[dict]:
    """One record per run: arm, seed, {step: {task: correct}} (greedy rows), classes."""
    out, cache = [], {}
    for run, cfg_file in find_run_dirs(runs):
        cfg = OmegaConf.load(cfg_file)
        key = json.dumps(OmegaConf.to_container(cfg.env), sort_keys=True)
        if key not in cache:
            cache[key] = classes(cfg)
        by_step: dict = {}
        for line in (run / "eval.jsonl").open():
            r = json.loads(line)
            if r.get("decoding", "greedy") != "greedy":
                continue
            by_step.setdefault(int(r["step"]), {})[r["task_id"]] = bool(r["correct"])
        out.append({"arm": str(cfg.algo.name), "seed": int(cfg.seed), "steps": by_step,
                    "kind": cache[key]})
    return sorted(out, key=lambda r: (r["arm"], r["seed"]))


def quantities(runs: list[dict]) -> dict:
    arms: dict = {}
    for r in runs:
        steps = sorted(r["steps"])
        first, last = r["steps"][steps[0]], r["steps"][steps[-1]]
        tasks = sorted(first)
        gained = sum(1 for t in tasks if last[t] and not first[t])
        lost = sum(1 for t in tasks if first[t] and not last[t])
        n_class = {c: sum(1 for t in tasks if r["kind"][t] == c) for c in ("repeat", "other")}
        acc = {c: {str(s): sum(r["steps"][s][t] for t in tasks if r["kind"][t] == c) / n_class[c]
                   for s in steps} for c in n_class}
        gained_by = {c: sum(1 for t in tasks if r["kind"][t] == c and last[t] and not first[t])
                     for c in n_class}
        lost_by = {c: sum(1 for t in tasks if r["kind"][t] == c and first[t] and not last[t])
                   for c in n_class}
        arms.setdefault(r["arm"], {"words": ARM_WORDS.get(r["arm"], r["arm"]), "seeds": {}})
        arms[r["arm"]]["seeds"][str(r["seed"])] = {
            "first_step": steps[0], "last_step": steps[-1], "questions": len(tasks),
            "correct_first": sum(first.values()), "correct_last": sum(last[t] for t in tasks),
            "gained": gained, "lost": lost, "p_mcnemar": mcnemar_exact(gained, lost),
            "gained_by_class": gained_by, "lost_by_class": lost_by,
            "n_class": n_class, "accuracy": acc}
    for a in arms.values():
        seeds = list(a["seeds"].values())
        s0 = seeds[0]
        steps = sorted(s0["accuracy"]["repeat"], key=int)
        n = s0["questions"]
        mean = {c: {st: sum(x["accuracy"][c][st] for x in seeds) / len(seeds) for st in steps}
                for c in ("repeat", "other")}
        a["steps"] = [int(st) for st in steps]
        a["n_class"] = s0["n_class"]
        a["questions"] = n
        a["mean_accuracy"] = mean
        # points of overall accuracy each class adds between the first and last step
        a["contribution"] = {c: (mean[c][steps[-1]] - mean[c][steps[0]]) * s0["n_class"][c] / n
                             for c in mean}
        # the most copying could add: every repeat question right, the others unchanged
        a["shortcut_cap"] = (1 - mean["repeat"][steps[0]]) * s0["n_class"]["repeat"] / n
        for k in ("gained", "lost", "p_mcnemar", "correct_last"):
            vals = [x[k] for x in seeds]
            a[k + "_range"] = [min(vals), max(vals)]
        a["gained_other_max"] = max(x["gained_by_class"]["other"] for x in seeds)
        a["lost_other_max"] = max(x["lost_by_class"]["other"] for x in seeds)
        a["lost_repeat_max"] = max(x["lost_by_class"]["repeat"] for x in seeds)
    return {"arms": arms}


def figure(q: dict, out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = q["arms"]
    first = next(iter(arms.values()))
    fig, axes = plt.subplots(1, 2, figsize=(7.2, 3.2), sharey=True)
    styles = {"grpo": ("#4c72b0", "o"), "dr_grpo": ("#c44e52", "s")}
    for ax, c, title in zip(axes, ("repeat", "other"),
                            ("repeat questions (answer = last term shown)",
                             "other questions (the rule must be applied)")):
        for i, (arm, a) in enumerate(sorted(arms.items())):
            col, mk = styles.get(arm, (f"C{i}", "o"))
            for sd in a["seeds"].values():     # per seed, thin
                ys = [100 * sd["accuracy"][c][str(st)] for st in a["steps"]]
                ax.plot(a["steps"], ys, color=col, alpha=0.3, lw=0.8)
            ys = [100 * a["mean_accuracy"][c][str(st)] for st in a["steps"]]
            ax.plot(a["steps"], ys, color=col, marker=mk, lw=1.8,
                    label=f"{a['words']} (mean of {len(a['seeds'])} seeds; thin: each seed)")
        ax.set_title(f"{title}\n{first['n_class'][c]} questions", fontsize=9)
        ax.set_xticks(first["steps"])
        ax.set_xlabel("training step (evaluations)")
        ax.set_ylim(0, 100)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("greedy held-out accuracy (%)")
    axes[0].legend(fontsize=7, loc="lower right", frameon=False)
    fig.suptitle("Repeat vs other questions over steps (no interval drawn; thin lines: each seed)",
                 fontsize=10)
    fig.tight_layout()
    for ext in ("png", "pdf"):
        fig.savefig(out / f"repeat_vs_other.{ext}", dpi=150, bbox_inches="tight",
                    metadata={"CreationDate": None} if ext == "pdf" else None)
    plt.close(fig)
    (out / "repeat_vs_other.caption.txt").write_text(
        "Greedy held-out accuracy at each evaluation step on the questions whose answer is "
        f"the last term shown (repeat, {first['n_class']['repeat']} questions) and on the "
        f"others ({first['n_class']['other']} questions), per arm: thick lines the mean "
        "over seeds, thin lines one seed each; descriptive, no interval (the questions "
        "gained and lost per seed, with exact McNemar p, are in repeat_vs_other.json).\n")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("report", help="write repeat_vs_other.json and the figure here")
    ap.add_argument("--runs", default=str(HERE / "results" / "runs"))
    a = ap.parse_args(argv)
    out = Path(a.report)
    out.mkdir(parents=True, exist_ok=True)
    q = quantities(per_run(Path(a.runs)))
    (out / "repeat_vs_other.json").write_text(json.dumps(q, indent=1, sort_keys=True) + "\n")
    figure(q, out)
    for arm, x in sorted(q["arms"].items()):
        print(arm, "gained", x["gained_range"], "lost", x["lost_range"],
              "McNemar p", [round(p, 4) for p in x["p_mcnemar_range"]],
              "contribution", {k: round(v, 4) for k, v in x["contribution"].items()},
              "cap", round(x["shortcut_cap"], 4))


if __name__ == "__main__":
    main()
