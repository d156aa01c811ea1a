"""Issue 62's equivalence check (pre-registered in experiments/pack_equivalence/README.md):
8 seeds of a LoRA cell run alone (the basic launcher) and as one batched pack, their
held-out accuracy compared by a paired TOST within +-5 points.

    python benchmarks/pack_equivalence.py run       # both arms at once, resumable
    python benchmarks/pack_equivalence.py analyse   # result.json + the README's result

`run` launches the two grids side by side (each cell single-threaded) under
outputs/pack_equivalence/{solo,packed}; a grid run again skips its COMPLETE cells. Each
finished cell's config.yaml, eval.jsonl and COMPLETE are copied to
experiments/pack_equivalence/cells/<arm>/seed=<s>/, the committed inputs `analyse`
reads (so the result regenerates from the repository alone)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
EXP = ROOT / "experiments" / "pack_equivalence"
OUT = ROOT / "outputs" / "pack_equivalence"
SEEDS = list(range(300, 308))
MARGIN = 5.0          # accuracy points (README, "Hypothesis")
# what happened between the pre-registration and the result (written after the run)
DEVIATIONS = (
    "The packed arm's first run, at the pre-registration's commit, was killed for memory "
    "in its evaluation (8 cells' 300 episodes each in one sampler call of 2,400 rows); it "
    "had written no evaluation row. Its directory was removed and the arm run again from "
    "scratch, with the same command, after four commits to ablate/: a 256-row cap per "
    "batched sampler call (the fix), the adapter_rows plan kept per model (no numeric "
    "change: the same layers, the same matmuls), a refactor of lora_rows' hooks and a "
    "docstring. The solo arm ran in one process started at the pre-registration's commit "
    "(its modules imported then), while commits landed beside it: its cells' code.json "
    "name the commit checked out as each began (one with uncommitted edits). None of "
    "those commits touches a solo cell's path (they change the batched pack's sampler "
    "and learner paths, benchmarks, tests and docs).")
CELL = ["learner.lora.enable=true", "learner=torch", "trainer.max_steps=4",
        "env.gen_seed=7", "eval.at_start=false", "eval.every=0", "eval.num_tasks=150",
        "eval.samples=2", "eval.greedy=false", "run.quiet=true", "run.num_threads=1"]
ARMS = {"solo": [],
        "packed": ["hydra/launcher=pack", "hydra.launcher.size=8", "hydra.launcher.exact=false",
                   "hydra.launcher.joint_updates=true"]}


def run() -> int:
    procs = {}
    for arm, extra in ARMS.items():
        args = [sys.executable, "-m", "ablate", "-m", f"seed={','.join(map(str, SEEDS))}",
                *CELL, *extra, f"hydra.sweep.dir={OUT / arm}"]
        log = open(OUT.parent / f"pack_equivalence_{arm}.log", "a")
        procs[arm] = subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    codes = {arm: p.wait() for arm, p in procs.items()}
    copy_cells()
    print(json.dumps(codes))
    return max(codes.values())


def copy_cells() -> None:
    for arm in ARMS:
        for cell in sorted((OUT / arm).glob("*/COMPLETE")):
            cfg = yaml.safe_load((cell.parent / "config.yaml").read_text())
            dst = EXP / "cells" / arm / f"seed={cfg['seed']}"
            dst.mkdir(parents=True, exist_ok=True)
            for name in ("config.yaml", "eval.jsonl", "code.json", "COMPLETE"):
                shutil.copy2(cell.parent / name, dst / name)


def accuracy(cell: Path) -> tuple[float, int]:
    """The cell's held-out accuracy at its last evaluated step: the share of its sampled
    episodes answered correctly (eval.jsonl), and how many episodes."""
    rows = [json.loads(x) for x in (cell / "eval.jsonl").read_text().splitlines() if x]
    last = max(r["step"] for r in rows)
    mine = [r for r in rows if r["step"] == last and r.get("decoding", "sampled") == "sampled"]
    return 100.0 * sum(bool(r["correct"]) for r in mine) / len(mine), len(mine)


def analyse() -> int:
    sys.path.insert(0, str(ROOT))
    from analysis.stats import paired_tost, sign_flip_tost
    acc = {arm: {s: accuracy(EXP / "cells" / arm / f"seed={s}") for s in SEEDS
                 if (EXP / "cells" / arm / f"seed={s}" / "COMPLETE").exists()}
           for arm in ARMS}
    missing = [f"{arm} seed {s}" for arm in ARMS for s in SEEDS if s not in acc[arm]]
    if missing:
        raise SystemExit(f"pack_equivalence: not run yet: {', '.join(missing)}")
    d = [acc["packed"][s][0] - acc["solo"][s][0] for s in SEEDS]
    commits = {arm: sorted({json.loads((EXP / "cells" / arm / f"seed={s}" / "code.json")
                                       .read_text())["commit"][:7] for s in SEEDS})
               for arm in ARMS}
    result = {"margin_points": MARGIN, "seeds": SEEDS,
              "episodes_per_cell": sorted({n for arm in ARMS for _, n in acc[arm].values()}),
              "accuracy": {arm: {str(s): acc[arm][s][0] for s in SEEDS} for arm in ARMS},
              "difference_packed_minus_solo": d,
              "t_tost": paired_tost(d, MARGIN), "sign_flip_tost": sign_flip_tost(d, MARGIN),
              "code_commits": commits, "deviations": DEVIATIONS}
    (EXP / "result.json").write_text(json.dumps(result, indent=1) + "\n")
    write_result(result)
    print(json.dumps(result["t_tost"]))
    return 0


def write_result(r: dict) -> None:
    """The README's result section, regenerated from result.json (replaces its own)."""
    t, e = r["t_tost"], r["sign_flip_tost"]
    mean = {arm: sum(r["accuracy"][arm].values()) / len(r["seeds"]) for arm in ARMS}
    rows = "\n".join(f"| {s} | {r['accuracy']['solo'][str(s)]:.1f} | "
                     f"{r['accuracy']['packed'][str(s)]:.1f} | {x:+.1f} |"
                     for s, x in zip(r["seeds"], r["difference_packed_minus_solo"]))
    text = (f"## Result (written by `analyse` from result.json)\n\n"
            f"| seed | solo accuracy (%) | packed accuracy (%) | packed - solo (points) |\n"
            f"| --- | --- | --- | --- |\n{rows}\n\n"
            f"Mean accuracy: solo {mean['solo']:.1f}%, packed {mean['packed']:.1f}%. "
            f"Mean difference {t['mean']:+.2f} points, {100 * t['ci_level']:.0f}% interval "
            f"[{t['ci'][0]:+.2f}, {t['ci'][1]:+.2f}] (paired t, {t['df']} df); TOST "
            f"p = {t['p']:.3g} against the +-{r['margin_points']:g}-point margin: "
            + ("**equivalent**" if t["equivalent"] else "**not shown equivalent**")
            + f". Exact sign-flip TOST p = {e['p']:.3g} (smallest possible "
            f"{e['min_p']:.3g}): " + ("equivalent." if e["equivalent"] else
                                      "not shown equivalent.") + "\n\n"
            + "Code: " + "; ".join(f"{arm} arm at {', '.join(c)}"
                                   for arm, c in r["code_commits"].items())
            + f". Deviations: {r['deviations']}\n")
    readme = EXP / "README.md"
    body = readme.read_text().split("## Result (written by")[0].rstrip() + "\n\n"
    body = body.replace("**Status: pre-registered; not yet run.**",
                        "**Status: pre-registered (be3f9bc), then run; result below.**")
    readme.write_text(body + text)


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd not in ("run", "analyse"):
        raise SystemExit("usage: python benchmarks/pack_equivalence.py run | analyse")
    raise SystemExit(run() if cmd == "run" else analyse())
