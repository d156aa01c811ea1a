"""The pre-registered secondary of naive_trap (README, "Endpoint and hypotheses"): how the
held-out episodes ended, per arm and seed at each evaluation step, from eval.jsonl. An
agent can stop submitting by saying "I don't know" (an `answer` ending whose final answer
is "I don't know": `answered` false) or by never reaching an answer (out of turns, out of
tokens, malformed calls). "I don't know" in the first turn (`turns` 1: no search, no
read) is counted apart: it is the article's policy, answering before looking.

Registered in analysis.yaml `scripts:` (publish runs it as `python endings.py REPORT_DIR`):
writes REPORT_DIR/endings.json (the README's quantities) and the figure "endings by
seed" (endings_by_seed.png/.pdf). Without REPORT_DIR it prints the table only.

    PYTHONPATH=. python experiments/naive_trap/endings.py [REPORT_DIR] [--runs RUNS] [--step N]
    # defaults: results/runs, the last evaluated step
"""
from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from analysis.collect import parse_assignments, read_jsonl

HERE = Path(__file__).resolve().parent
# (key in endings.json, words in tables and figures)
COLUMNS = (("submitted", "submitted"), ("idk", "\"I don't know\""),
           ("max_turns", "out of turns"), ("max_tokens", "out of tokens"),
           ("malformed", "malformed calls"))
ARMS = ("naive", "shaped", "outcome")


def endings(rows: list[dict]) -> dict:
    """Counts of each way an episode ended, plus first-turn "I don't know" and correct."""
    c = Counter({k: 0 for k, _ in COLUMNS})
    c["idk_first_turn"] = 0
    c["correct"] = 0
    for r in rows:
        if r.get("end_reason") == "answer":
            if r.get("answered"):
                c["submitted"] += 1
            else:
                c["idk"] += 1
                c["idk_first_turn"] += int(r.get("turns") == 1)
        else:
            c[str(r.get("end_reason"))] += 1
        c["correct"] += int(bool(r.get("correct")))
    c["episodes"] = len(rows)
    c["never_answered"] = c["max_turns"] + c["max_tokens"] + c["malformed"]
    return dict(c)


def table(runs: Path, step: int | None = None) -> list[dict]:
    """One row per (reward, seed, step): its episodes and their endings (sampled rows).
    `step` None: every evaluated step."""
    out = []
    for run in sorted(p for p in runs.iterdir() if (p / "eval.jsonl").is_file()):
        keys = parse_assignments(run.name)   # the sweep dir name: k=v,k=v
        rows, _ = read_jsonl(run / "eval.jsonl")
        rows = [r for r in rows if r.get("decoding", "sampled") != "greedy"]
        for at in sorted({r["step"] for r in rows} if step is None else {step}):
            mine = [r for r in rows if r["step"] == at]
            out.append({"reward": str(keys["+reward"]), "seed": int(keys["seed"]),
                        "step": at, **endings(mine)})
    return sorted(out, key=lambda r: (r["reward"], r["seed"], r["step"]))


def quantities(rows: list[dict]) -> dict:
    """endings.json: {first_step, last_step, episodes, at: {step: {reward: {seed: counts}}},
    last/first: the same at the last and first step, and per-arm ranges at the last step."""
    steps = sorted({r["step"] for r in rows})
    at: dict = {}
    for r in rows:
        at.setdefault(str(r["step"]), {}).setdefault(r["reward"], {})[str(r["seed"])] = {
            k: v for k, v in r.items() if k not in ("reward", "seed", "step")}
    last, first = at[str(steps[-1])], at[str(steps[0])]
    keys = [k for k, _ in COLUMNS] + ["idk_first_turn", "correct", "never_answered"]

    def ranges(by_seed: dict) -> dict:
        return {k: [min(v[k] for v in by_seed.values()), max(v[k] for v in by_seed.values())]
                for k in keys}
    return {"first_step": steps[0], "last_step": steps[-1],
            "episodes": sorted({r["episodes"] for r in rows}),
            "at": at, "last": last, "first": first,
            "range_last": {arm: ranges(v) for arm, v in last.items()},
            "range_first": {arm: ranges(v) for arm, v in first.items()}}


def figure(q: dict, out: Path) -> list[Path]:
    """Endings by seed: one stacked bar per seed, grouped by reward, at the last step."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = ("#4c72b0", "#c44e52", "#8172b2", "#ccb974", "#64b5cd")
    last = q["last"]
    arms = [a for a in ARMS if a in last] + sorted(set(last) - set(ARMS))
    fig, axes = plt.subplots(1, len(arms), figsize=(2.3 * len(arms) + 1.6, 3.4),
                             sharey=True, squeeze=False)
    n = max(q["episodes"])
    for ax, arm in zip(axes[0], arms):
        seeds = sorted(last[arm], key=int)
        bottom = [0] * len(seeds)
        for (key, words), col in zip(COLUMNS, colours):
            h = [last[arm][s][key] for s in seeds]
            ax.bar(range(len(seeds)), h, bottom=bottom, color=col, width=0.75,
                   )
            if key == "idk":     # first-turn "I don't know": hatched inside its bar
                ft = [last[arm][s]["idk_first_turn"] for s in seeds]
                ax.bar(range(len(seeds)), ft, bottom=bottom, color="none", width=0.75,
                       edgecolor="white", hatch="///", linewidth=0)
            bottom = [b + x for b, x in zip(bottom, h)]
        ax.set_xticks(range(len(seeds)), [str(s) for s in seeds])
        ax.set_xlabel("seed")
        ax.set_title(f"reward: {arm}", fontsize=10)
        ax.set_ylim(0, n)
    axes[0][0].set_ylabel(f"held-out episodes (of {n})")
    from matplotlib.patches import Patch
    handles = [Patch(facecolor=c, label=w) for (_, w), c in zip(COLUMNS, colours)]
    handles.insert(2, Patch(facecolor=colours[1], edgecolor="white", hatch="///",
                            label="  of which in the first turn"))
    fig.legend(handles=handles, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8,
               frameon=False)
    fig.suptitle(f"How held-out episodes ended at step {q['last_step']} "
                 f"(counts per seed, no interval)", fontsize=10)
    fig.tight_layout()
    paths = []
    for ext in ("png", "pdf"):
        p = out / f"endings_by_seed.{ext}"
        fig.savefig(p, dpi=150, bbox_inches="tight",
                    metadata={"CreationDate": None} if ext == "pdf" else None)
        paths.append(p)
    plt.close(fig)
    seeds = sorted({len(v) for v in last.values()})
    (out / "endings_by_seed.caption.txt").write_text(
        f"How the {n} held-out episodes of each seed ended at step {q['last_step']} "
        f"({'/'.join(map(str, seeds))} seeds per reward; sampled episodes): submitted an "
        "answer, said \"I don't know\" (hatched: in the first turn, before any search), "
        "ran out of turns, out of tokens, or ended on malformed calls. Counts, no "
        "interval.\n")
    return paths


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("report", nargs="?", default=None,
                    help="write endings.json and the figure here (publish passes the report dir)")
    ap.add_argument("--runs", default=str(HERE / "results" / "runs"))
    ap.add_argument("--step", type=int, default=None, help="print this step (default: last)")
    a = ap.parse_args(argv)
    rows = table(Path(a.runs))
    show = a.step if a.step is not None else max(r["step"] for r in rows)
    print("| reward | seed | step | episodes | " + " | ".join(w for _, w in COLUMNS)
          + " | of which first turn |")
    print("|---|---:|---:|---:|" + "---:|" * (len(COLUMNS) + 1))
    for r in rows:
        if r["step"] == show:
            print(f"| {r['reward']} | {r['seed']} | {r['step']} | {r['episodes']} | "
                  + " | ".join(str(r[k]) for k, _ in COLUMNS) + f" | {r['idk_first_turn']} |")
    if a.report:
        out = Path(a.report)
        out.mkdir(parents=True, exist_ok=True)
        q = quantities(rows)
        (out / "endings.json").write_text(json.dumps(q, indent=1, sort_keys=True) + "\n")
        figure(q, out)


if __name__ == "__main__":
    main()
