"""Default cell wall time: today's engine vs earlier ones, in one process.

    python benchmarks/bench_cell.py [--order new,full-head,old] [-- hydra overrides...]

Runs `run_cell` on the composed default config (what `python -m ablate` runs, plus any
overrides after `--`) once per engine, in the order given:
  new:       as configured (sampler KV reuse across turns and shared prefix; learner
             shared prefix, output head on trained positions only);
  full-head: the same with the learner's output head over every position (the engine
             before ablate/learners/head.py; its rows must equal new's);
  old:       the engine before issue 11: sampler kv_reuse=False (every prompt
             re-encoded from token 0), learner.shared_prefix=false, full head.
Prints, as JSON, each run's wall time, rollout/update/eval seconds (from metrics.jsonl
and eval.jsonl), the sampler's token counters, the ratio of each engine's wall time (and
rollout, update seconds) over new's, and the metric and eval fields that differ from
new's apart from timing fields. Warm caches: the environment is built before the first
timed run. All runs share one process and one machine state, so the ratios are
comparable even on a busy machine; absolute seconds are not.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

TIMING = ("rollout_s", "update_s", "step_s", "seconds", "tokens_per_s")


def _rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] \
        if path.exists() else []


def _untimed(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not any(k.endswith(t) for t in TIMING)}
            for r in rows]


def _differences(a: list[dict], b: list[dict], rtol: float = 1e-4) -> dict:
    """Fields (timing excluded) whose values differ beyond rtol, with the largest gap."""
    out: dict = {}
    if len(a) != len(b):
        return {"rows": [len(a), len(b)]}
    for x, y in zip(_untimed(a), _untimed(b)):
        for k in (set(x) | set(y)) - {"sampler/encoded_tokens"}:   # differs by design
            u, v = x.get(k), y.get(k)
            if isinstance(u, float) and isinstance(v, float):
                if abs(u - v) > rtol * max(1.0, abs(u), abs(v)):
                    out[k] = max(out.get(k, 0.0), abs(u - v))
            elif u != v:
                out[k] = "differs"
    return out


ENGINES = {"new": [], "full-head": [], "old": ["learner.shared_prefix=false"]}


def run(engine: str, overrides: list[str], out: Path) -> dict:
    import ablate.samplers as samplers
    from ablate.loop.cell import run_cell
    from ablate.apps.cli import compose_config
    from ablate.learners.base import Learner

    made = []
    original, head = samplers.make_sampler, Learner.head_on_trained_only

    def make(*a, **kw):
        s = original(*a, **kw)
        if engine == "old":
            s.kv_reuse = False
        made.append(s)
        return s

    samplers.make_sampler = make
    Learner.head_on_trained_only = engine == "new"
    try:
        cfg = compose_config(overrides + ENGINES[engine] + ["run.quiet=true"])
        t0 = time.perf_counter()
        summary = run_cell(cfg, out)
        wall = time.perf_counter() - t0
    finally:
        samplers.make_sampler, Learner.head_on_trained_only = original, head
    metrics, evals = _rows(out / "metrics.jsonl"), _rows(out / "eval.jsonl")
    res = {"wall_s": round(wall, 1),
           "rollout_s": round(sum(r["rollout_s"] for r in metrics), 1),
           "update_s": round(sum(r["update_s"] for r in metrics), 1),
           "final_accuracy": summary.get("final_accuracy"),
           "encoded_tokens_per_step": [r.get("sampler/encoded_tokens") for r in metrics],
           "metrics": metrics, "evals": evals}
    if made and hasattr(made[0], "stats"):
        res["sampler"] = dict(made[0].stats)
    return res


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--order", default="new,full-head,old")
    ap.add_argument("overrides", nargs="*")
    a = ap.parse_args(argv)
    from ablate.apps.cli import compose_config
    from ablate.envs.email.bundle import build_env
    build_env(compose_config(a.overrides))          # warm: mailbox, tasks, FTS5 index
    work = Path(tempfile.mkdtemp(prefix="bench-cell-"))
    res = {}
    for engine in a.order.split(","):
        res[engine] = run(engine, a.overrides, work / engine)
    new = res["new"]
    rows = {e: (r.pop("metrics"), r.pop("evals")) for e, r in res.items()}
    report = {"overrides": a.overrides, "order": a.order, "engines": res}
    for e, r in res.items():
        if e == "new":
            continue
        for k in ("wall_s", "rollout_s", "update_s"):
            report[f"{k}_ratio_{e}_over_new"] = round(r[k] / max(new[k], 1e-9), 3)
        report[f"metrics_fields_differing_{e}"] = _differences(rows["new"][0], rows[e][0], 0.0)
        report[f"eval_fields_differing_{e}"] = _differences(rows["new"][1], rows[e][1], 0.0)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
