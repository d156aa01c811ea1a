"""Study summary, best settings and a figure of the trials, from the Optuna storage of
`python -m ablate.search sweeps/testbed.yaml` (regenerates everything in this folder):

    python experiments/testbed/summarise.py experiments/testbed/data/study.db \
        --coarse experiments/testbed/data/coarse.db \
        --baseline experiments/testbed/data/warm_start_eval.jsonl

(the committed copies of outputs/search/testbed/study.db, outputs/search/coarse/study.db
and the warm start's eval.jsonl: `python -m ablate +reward=shaped +algo=grpo
trainer.max_steps=0 eval.num_tasks=48 eval.samples=2 eval.temperature=1.0`).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib
import numpy as np
import matplotlib.ticker
import optuna
from optuna.trial import TrialState

from ablate.loop.eval_metrics import summarise
from ablate.apps.search import params_key

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent


def trials(db: Path, study: str = "testbed") -> list[dict]:
    s = optuna.load_study(study_name=study, storage=f"sqlite:///{db.resolve()}")
    return [{"number": t.number, "state": t.state.name, "value": t.value, "params": t.params,
             "intermediate": {int(k): v for k, v in t.intermediate_values.items()},
             "overrides": t.user_attrs.get("overrides")}
            for t in s.trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)
            or (t.state == TrialState.FAIL and t.intermediate_values)]  # stopped by hand


def final_rates(evals: Path, params: dict) -> dict:
    """Answer / "I don't know" / wrong rates and per-hop accuracy of a trial's last
    evaluation, from its eval.jsonl copied to evals/<params_key>.jsonl (if present)."""
    path = evals / f"{params_key(params)}.jsonl"
    if not path.exists():
        return {}
    rows = [json.loads(x) for x in path.read_text().splitlines() if x]
    last = max(r["step"] for r in rows)
    final = summarise(last, [r for r in rows if r["step"] == last], level="hops")
    return {k: v for k, v in final.items()
            if k.startswith(("eval/answer", "eval/idk", "eval/wrong", "eval/accuracy_hops"))}


def per_question(rows: list[dict]) -> dict:
    by_q: dict = {}
    for r in rows:
        by_q.setdefault(r["task_id"], []).append(float(r["correct"]))
    return {q: sum(v) / len(v) for q, v in by_q.items()}


def paired_gain(evals: Path, params: dict, warm: Path | None) -> dict:
    """Last evaluation minus the warm start, per question (avg over samples first), with
    the SE of the paired per-question differences (one seed: seed noise is not in it)."""
    path = evals / f"{params_key(params)}.jsonl"
    if warm is None or not path.exists():
        return {}
    rows = [json.loads(x) for x in path.read_text().splitlines() if x]
    last = max(r["step"] for r in rows)
    b = per_question([r for r in rows if r["step"] == last and r.get("decoding") != "greedy"])
    w = [json.loads(x) for x in warm.read_text().splitlines() if x]
    a = per_question([r for r in w if r.get("decoding") != "greedy" and r["task_id"] in b])
    d = np.array([b[q] - a[q] for q in b if q in a])
    return {"delta": float(d.mean()), "se": float(d.std(ddof=1) / np.sqrt(len(d))),
            "n_questions": len(d)}


def baseline(path: Path, n_questions: int) -> float:
    """Sampled accuracy of the warm start on the first n held-out questions."""
    path = path / "eval.jsonl" if path.is_dir() else path
    rows = [json.loads(x) for x in path.read_text().splitlines() if x]
    rows = [r for r in rows if r.get("decoding") != "greedy"]
    qs = sorted({r["task_id"] for r in rows}, key=[r["task_id"] for r in rows].index)[:n_questions]
    per_q = [sum(r["correct"] for r in rows if r["task_id"] == q)
             / sum(1 for r in rows if r["task_id"] == q) for q in qs]
    return sum(per_q) / len(per_q)


def figure(rows: list[dict], base: float | None, path: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for r in rows:
        last = r["value"] if r["value"] is not None else max(r["intermediate"].items())[1]
        colour = {"COMPLETE": "C0", "PRUNED": "C3", "FAIL": "grey"}[r["state"]]
        marker = "x" if r.get("coarse") else "o"
        axes[0].scatter(r["params"]["trainer.lr"], last, c=colour, marker=marker)
        steps = sorted(r["intermediate"])
        axes[1].plot([0, *steps], [base if base is not None else float("nan"),
                                   *[r["intermediate"][s] for s in steps]],
                     color=colour, marker=marker, alpha=0.7)
    for ax in axes:
        if base is not None:
            ax.axhline(base, color="grey", ls="--", lw=1, label="warm start")
        ax.set_ylabel("held-out sampled accuracy (avg@2, T=1)")
    axes[0].set_xscale("log")
    axes[0].xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    axes[0].set_xlabel("trainer.lr (x: coarse pass; red: pruned; grey: stopped)")
    axes[1].set_xlabel("optimizer step")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130)


def gain_text(g: dict | None) -> str:
    return f"{g['delta']:+.3f} +- {g['se']:.3f}" if g else ""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("db", type=Path)
    ap.add_argument("--coarse", type=Path, default=None)
    ap.add_argument("--baseline", type=Path, default=None)
    ap.add_argument("--questions", type=int, default=32)
    args = ap.parse_args()
    rows = trials(args.db)
    for r in rows:
        r["final_rates"] = final_rates(args.db.parent / "trials", r["params"])
        r["gain_vs_warm_start"] = paired_gain(args.db.parent / "trials", r["params"],
                                              args.baseline)
    coarse = [dict(r, coarse=True, final_rates=final_rates(args.db.parent / "trials",
                                                          r["params"]))
              for r in trials(args.coarse)] if args.coarse else []
    base = baseline(args.baseline, args.questions) if args.baseline else None
    done = [r for r in rows if r["state"] == "COMPLETE"]
    best = max(done, key=lambda r: r["value"]) if done else None
    (HERE / "study_summary.json").write_text(json.dumps(
        {"warm_start_accuracy": base, "n_trials": len(rows), "n_complete": len(done),
         "n_pruned": sum(r["state"] == "PRUNED" for r in rows), "best": best, "trials": rows,
         "coarse_trials": coarse}, indent=2))
    if best:
        (HERE / "best_overrides.txt").write_text(" ".join(best["overrides"]) + "\n")
    figure(rows + coarse, base, HERE / "trials.png")
    lines = ["| trial | state | lr | warm-up | tasks x G | epochs | T | acc step 4 | acc step 8 "
             "| answer | IDK | wrong | 1-hop | 2-hop | gain +- SE |", "|---" * 15 + "|"]
    for r in sorted(rows + coarse, key=lambda r: -(r["value"] or -1)):
        p, iv = r["params"], r["intermediate"]
        lines.append(f"| {'c' if r.get('coarse') else ''}{r['number']} | {r['state']} | "
                     f"{p['trainer.lr']:.2e} | {p['learner.warmup_steps']} | "
                     f"{p['trainer.tasks_per_step']}x{p['trainer.group_size']} | "
                     f"{p['algo.ppo_epochs']} | {p['sampler.temperature']} | "
                     f"{iv.get(4, float('nan')):.3f} | {iv.get(8, float('nan')):.3f} | "
                     + " | ".join(f"{(r.get('final_rates') or {}).get(k, float('nan')):.3f}"
                                  for k in ("eval/answer_rate", "eval/idk_rate",
                                            "eval/wrong_rate", "eval/accuracy_hops1",
                                            "eval/accuracy_hops2"))
                     + f" | {gain_text(r.get('gain_vs_warm_start'))} |")
    (HERE / "trials.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if args.baseline:
        p = args.baseline / "eval.jsonl" if args.baseline.is_dir() else args.baseline
        w = [json.loads(x) for x in p.read_text().splitlines() if x]
        qs = list(dict.fromkeys(r["task_id"] for r in w))[:args.questions]
        ws = summarise(0, [r for r in w if r["task_id"] in qs], level="hops")
        lines.append(f"| warm start | | | | | | 1.0 | | {ws['eval/accuracy']:.3f} | "
                     + " | ".join(f"{ws[k]:.3f}" for k in (
                         "eval/answer_rate", "eval/idk_rate", "eval/wrong_rate",
                         "eval/accuracy_hops1", "eval/accuracy_hops2")) + " |")
        (HERE / "trials.md").write_text("\n".join(lines) + "\n")
        print(lines[-1])
    print(f"warm start {base}; best {best and best['value']}")


if __name__ == "__main__":
    main()
