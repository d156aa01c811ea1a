"""The default cell's evaluation (32 questions x eval.samples sampled + 1 greedy), the
engine before issue 31 against today's, paired in one process.

    python benchmarks/bench_eval.py [--pairs 2] [--out FILE] [-- hydra overrides...]

Builds the default cell's acting policy once (SamplerPolicy: the shipped tiny model, the
HF sampler) and runs the step-0 evaluation the cell runs (ablate.loop.policy.eval_episodes,
scored by the environment's judge) in the order old, new, old, new, ...; the machine-speed
unit (benchmarks/machine_unit.py) is measured before and after every run, and the process's
CPU seconds are recorded beside wall seconds (one thread: on a shared machine CPU time
leaves out the time spent waiting for a core, though not slower memory). Engines:
  old: `policy.MERGED_EVAL = False` (greedy episodes in a second rollout) and the sampler's
       `legacy = True` (the decoding of issue 11's last stop, see ablate/samplers/hf.py);
  new: as shipped (cascade attention over the shared prefix, ablate/samplers/cascade.py),
       on the threads `run.num_threads=auto` gives (ablate/core/threads.py) and with freed
       memory kept for reuse (run.malloc_reuse, ablate/core/memory.py); the old engine
       ran on one thread with glibc's default allocator settings.
Reports each run's wall seconds and units, medians, the new/old ratio of the medians and
of each pair, the load average seen, and whether every evaluation row (timing aside)
equals the old engine's. Rows must be compared, not assumed: see docs/cpu.md.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import machine_unit  # noqa: E402

ENGINES = ("old", "new")


def set_engine(policy, engine: str, threads: int = 1) -> None:
    """`threads`: the new engine's (run.num_threads resolved as the cell does); the old
    engine's run.num_threads was 1."""
    import torch
    import ablate.loop.policy as pol
    pol.MERGED_EVAL = engine == "new"
    policy.sampler.legacy = engine == "old"
    torch.set_num_threads(threads if engine == "new" else 1)
    from ablate.core.memory import reuse_freed_memory
    reuse_freed_memory(engine == "new")           # run.malloc_reuse, new in issue 31


def evaluate(policy, cfg, tasks) -> list[dict]:
    from ablate.core.seeding import derived_seed
    from ablate.loop.eval_metrics import GREEDY, SAMPLED
    from ablate.loop.policy import eval_episodes
    from ablate.loop.scoring import eval_rows, score
    eps, g_eps = eval_episodes(policy, tasks, cfg.eval.samples,
                               temperature=cfg.sampler.temperature, greedy=cfg.eval.greedy,
                               seed=derived_seed(cfg.seed, 0, 99991),
                               greedy_seed=derived_seed(cfg.seed, 0, 99992))
    rows = eval_rows(0, eps, score(eps, policy.env, cfg.reward), SAMPLED)
    return rows + eval_rows(0, g_eps, score(g_eps, policy.env, cfg.reward), GREEDY)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--out", default=None)
    ap.add_argument("overrides", nargs="*")
    a = ap.parse_args(argv)
    import torch
    from ablate.apps.cli import compose_config
    from ablate.core.seeding import seed_everything
    from ablate.envs import make_env
    from ablate.loop.policy import SamplerPolicy
    from ablate.loop.scoring import eval_subset

    cfg = compose_config(a.overrides + ["run.quiet=true"])
    from ablate.core.threads import available_cpus, cell_threads
    threads = cell_threads(cfg.run.num_threads, cpus=available_cpus())
    seed_everything(cfg.seed)
    env = make_env(cfg.env, cfg=cfg)
    tasks = eval_subset(env.tasks("test"), cfg.eval.num_tasks, cfg.eval.offset)
    policy = SamplerPolicy(env, cfg)
    unit_model = machine_unit._model()
    runs, rows, loads = [], {}, []
    for i in range(a.pairs * 2):
        engine = ENGINES[i % 2]
        set_engine(policy, engine, threads)
        before = machine_unit.measure(unit_model)
        loads.append(os.getloadavg()[0])
        t0, c0 = time.perf_counter(), time.process_time()
        got = evaluate(policy, cfg, tasks)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        after = machine_unit.measure(unit_model)
        loads.append(os.getloadavg()[0])
        rows.setdefault(engine, got)
        same = got == rows[engine]
        runs.append({"engine": engine, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
                     "unit_before_s": round(before, 2), "unit_after_s": round(after, 2),
                     "units": round(machine_unit.in_units(wall, before, after), 3),
                     "rows_as_first_run_of_engine": same})
        print(json.dumps(runs[-1]), flush=True)
    report = _report(a, runs, rows, loads)
    print(json.dumps(report, indent=1))
    if a.out:
        Path(a.out).write_text(json.dumps(report, indent=1) + "\n")
    return report


def _report(a, runs, rows, loads) -> dict:
    med = {e: {k: statistics.median(r[k] for r in runs if r["engine"] == e)
               for k in ("wall_s", "cpu_s", "units")} for e in ENGINES}
    pairs = [round(n["wall_s"] / o["wall_s"], 3) for o, n in zip(runs[::2], runs[1::2])]
    cpu_pairs = [round(n["cpu_s"] / o["cpu_s"], 3) for o, n in zip(runs[::2], runs[1::2])]
    diff = [(o["task_id"], o["decoding"], o["sample"]) for o, n in
            zip(rows["old"], rows["new"]) if o != n]
    return {"overrides": a.overrides, "pairs": a.pairs, "runs": runs, "median": med,
            "ratio_new_over_old_median_wall": round(med["new"]["wall_s"] /
                                                    med["old"]["wall_s"], 3),
            "ratio_new_over_old_median_units": round(med["new"]["units"] /
                                                     med["old"]["units"], 3),
            "ratio_new_over_old_median_cpu": round(med["new"]["cpu_s"] /
                                                   med["old"]["cpu_s"], 3),
            "ratio_new_over_old_per_pair": pairs,
            "cpu_ratio_new_over_old_per_pair": cpu_pairs,
            "load_average_1min_seen": [min(loads), max(loads)],
            "rows": {e: len(r) for e, r in rows.items()},
            "rows_differing_new_vs_old": diff,
            "accuracy": {f"{e}/{d}": round(sum(r["correct"] for r in rs if r["decoding"] == d)
                                  / max(1, sum(r["decoding"] == d for r in rs)), 4)
                         for e, rs in rows.items() for d in ("sampled", "greedy")}}


if __name__ == "__main__":
    main()
